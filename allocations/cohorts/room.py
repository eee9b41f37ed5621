"""The room a release frees for a lender (issue 15): pure Python, no database.

allocations/cohorts/fence.py holds, for a lender whose borrowed slices are being taken back, the slots it will be
given once they are gone. Which slots those are is decided here, on a fleet, so that the fairness bench
(bench/fairness.py) plans the lender's room with the portal's own rule instead of a model of it: first fit on the
GPUs the released allocations free room on, then on their nodes, then anywhere in the pool; never on a GPU another
lender's room is on (`skip`: plans for two lenders never share a GPU). On Kubernetes DynamicMIG (`driver`) the
slots are the ones the driver's first fit will give (cohorts/reclaim.driver_slots); where that cannot be predicted
the whole GPU is held.
"""

from __future__ import annotations

from collections.abc import Collection

from allocations.cohorts.reclaim import driver_slots
from allocations.mig.engine import choose_placement
from allocations.mig.fleet import Fleet, Gpu, Node, PlacementRequest

Position = tuple[str, int]
# Per GPU, the start of each planned slice and whether the whole GPU is to be held (the start is not ours to pick).
Room = dict[Position, list[tuple[int, bool]]]


def without(
    fleet: Fleet, owners: Collection[str], positions: Collection[Position] | None, skip: Collection[Position]
) -> Fleet:
    """The fleet without the instances of `owners`, on `positions` only (None: all), less the GPUs `skip`."""
    return Fleet(
        [
            Node(
                n.name,
                [
                    Gpu(g.node, g.index, g.model, [i for i in g.instances if i.owner not in owners])
                    for g in n.gpus
                    if (positions is None or (n.name, g.index) in positions) and (n.name, g.index) not in skip
                ],
                n.pool,
            )
            for n in fleet.nodes
        ]
    )


def room_after(
    fleet: Fleet, request: PlacementRequest, released: Collection[str], skip: Collection[Position], *, driver: bool
) -> Room:
    """Where `request` goes once the instances owned by `released` are gone: per GPU, its slices' starts (and
    whether the whole GPU must be held); empty when it fits nowhere outside `skip`."""
    owners = set(released)
    if not owners:
        return {}
    touched = {(g.node, g.index) for g in fleet.gpus() if any(i.owner in owners for i in g.instances)}
    nodes = {node for node, _ in touched}
    same_nodes = {(g.node, g.index) for g in fleet.gpus() if g.node in nodes}
    for positions in (touched, same_nodes, None):
        trial = without(fleet, owners, positions, skip)
        if driver:  # the slots the scheduler's first fit gives it there
            predicted = driver_slots(trial, request)
            if predicted is not None:
                return {p: [(s, False) for s in found] for p, found in predicted.items()}
        decision = choose_placement(trial, request, "first-fit")
        if decision is not None:
            # On Kubernetes with no prediction (the counters refuse where our rules allow): its whole GPUs.
            room: Room = {}
            for slot in decision.slots:
                room.setdefault((slot.node, slot.gpu_index), []).append((slot.start, driver))
            return room
    return {}
