"""Which borrowed allocations to take back for a lender (issue 15): pure Python, no database.

Order: least used first where the node agents report use (the fraction of observed slice-time in use over the
last hour; no report counts as fully used, so a busy-looking slice is never preferred to a known idle one), then
youngest first (the one that started last has lost the least work). Taken in that order until the need is
covered in both compute slices and memory slots; a candidate that helps with neither dimension still short is
passed over (`pick_reclaims`: counts slices, not where they are).

Slot-aware (`pick_fitting`): counting slices is not enough when the lender's request does not fit the pool's
layout: the slices freed may lie on GPUs, or at starts, where its profile cannot go. So the borrowed allocations
are chosen per GPU (then per node, then pool-wide), in the order above, until releasing them lets the request be
placed (the placement engine decides, allocations/mig); then those not needed are dropped again, oldest first. Of
the sets found, the one with the fewest allocations wins, then the fewest compute slices, then the youngest. None
found: the caller falls back to `pick_reclaims`. The bench (bench/fairness.py) runs the same function.

On Kubernetes DynamicMIG (`driver=True`) the portal pins the GPU and the scheduler takes the slot: the first
placement in the driver's order whose counters are free (allocations/mig/scheduler.py). "Fits" is then what
`driver_slots` predicts, not our engine's first fit, so the room a reclaim frees is the room the driver will
really use (the counters may refuse a start our layout rules allow, e.g. a second media-engine profile).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from allocations.cohorts.accounting import Shortfall
from allocations.mig import scheduler
from allocations.mig.engine import choose_placement
from allocations.mig.fleet import Fleet, Gpu, Node, PlacementRequest
from allocations.mig.layout import geometry

NOTHING = Shortfall(0, 0)  # room alone: no slices to count


@dataclass(frozen=True)
class Candidate:
    allocation_id: int
    # What taking it back gives: its borrowed part (quota-wise) or all of it (room in the pool).
    compute: int
    memory: int
    started_at: datetime
    used_fraction: float | None = None
    tenant_id: int = 0  # for `caps`: how much may be taken from each tenant


def reclaim_order(candidates: Sequence[Candidate]) -> list[Candidate]:
    def key(c: Candidate) -> tuple[float, float, int]:
        used = 1.0 if c.used_fraction is None else c.used_fraction
        return (used, -c.started_at.timestamp(), -c.allocation_id)

    return sorted(candidates, key=key)


def pick_reclaims(candidates: Sequence[Candidate], need: Shortfall) -> list[Candidate]:
    """Enough candidates, in reclaim order, to cover `need`; all of them when they cannot cover it."""
    compute, memory = need.compute, need.memory
    picked: list[Candidate] = []
    for candidate in reclaim_order(candidates):
        if compute <= 0 and memory <= 0:
            break
        if (compute > 0 and candidate.compute > 0) or (memory > 0 and candidate.memory > 0):
            picked.append(candidate)
            compute -= candidate.compute
            memory -= candidate.memory
    return picked


def driver_slots(fleet: Fleet, request: PlacementRequest) -> dict[tuple[str, int], list[int]] | None:
    """Kubernetes DynamicMIG: per GPU (node, index), the starts the driver's first fit gives the request's slices
    on the GPUs first fit in device order would pin, passing over GPUs whose counters refuse them; None when no
    GPU set takes it. Mirrors placement.plan_slices_for_scheduler's prediction without its ranking policy."""
    refused: set[tuple[str, int]] = set()
    gpus = sum(len(n.gpus) for n in fleet.nodes)
    for _ in range(gpus + 1):
        trial = Fleet(
            [Node(n.name, [g for g in n.gpus if (n.name, g.index) not in refused], n.pool) for n in fleet.nodes]
        )
        decision = choose_placement(trial, request, "first-fit")
        if decision is None:
            return None
        found: dict[tuple[str, int], list[int]] = {}
        for position, n in Counter((s.node, s.gpu_index) for s in decision.slots).items():
            gpu = fleet.gpu(*position)
            geom = geometry(gpu.model)
            key = geom.named_key(tuple([(i.profile, i.start, False) for i in gpu.instances]))
            placed = scheduler.first_fit(geom, key, [geom.profile_index(request.profile)] * n)
            if placed is None:
                refused.add(position)
            else:
                found[position] = placed[1]
        if all(p in found for p in {(s.node, s.gpu_index) for s in decision.slots}):
            return found
    return None


def _placeable(fleet: Fleet, request: PlacementRequest, driver: bool) -> bool:
    if driver:
        return driver_slots(fleet, request) is not None
    return choose_placement(fleet, request, "first-fit") is not None


def _fits(fleet: Fleet, request: PlacementRequest, released: set[str], driver: bool = False) -> bool:
    """Whether the request can be placed once the instances owned by `released` are gone (dynamic MIG). Only the
    nodes they free room on are tried: the caller knows it does not fit as things are (a request's slices go to
    one node), which keeps each test to a node or two on a large pool."""
    touched = [n for n in fleet.nodes if any(i.owner in released for g in n.gpus for i in g.instances)]
    trial = Fleet(
        [
            Node(
                n.name,
                [Gpu(g.node, g.index, g.model, [i for i in g.instances if i.owner not in released]) for g in n.gpus],
                n.pool,
            )
            for n in touched
        ]
    )
    return bool(touched) and _placeable(trial, request, driver)


def _covers(chosen: Sequence[Candidate], need: Shortfall) -> bool:
    return sum(c.compute for c in chosen) >= need.compute and sum(c.memory for c in chosen) >= need.memory


def _enough(
    fleet: Fleet,
    request: PlacementRequest,
    group: Sequence[Candidate],
    need: Shortfall,
    caps: Mapping[int, tuple[int, int]] | None,
    fits_now: bool,
    driver: bool = False,
) -> list[Candidate]:
    """Candidates of `group`, in order, until the need is covered and the request fits; then pared down (oldest
    dropped first while both still hold). Empty when the whole group is not enough."""
    taken: dict[int, list[int]] = {}
    chosen: list[Candidate] = []
    for candidate in group:
        if caps is not None:
            cap = caps.get(candidate.tenant_id, (0, 0))
            so_far = taken.setdefault(candidate.tenant_id, [0, 0])
            if so_far[0] >= cap[0] and so_far[1] >= cap[1]:
                continue  # its tenant is back within what may be taken from it with those already chosen
            so_far[0] += candidate.compute
            so_far[1] += candidate.memory
        chosen.append(candidate)
        if _covers(chosen, need) and (
            fits_now or _fits(fleet, request, {str(c.allocation_id) for c in chosen}, driver)
        ):
            break
    else:
        return []
    for candidate in reversed(list(chosen)):
        rest = [c for c in chosen if c is not candidate]
        if (
            rest
            and _covers(rest, need)
            and (fits_now or _fits(fleet, request, {str(c.allocation_id) for c in rest}, driver))
        ):
            chosen = rest
    return chosen


def pick_fitting(
    fleet: Fleet,
    request: PlacementRequest,
    candidates: Sequence[Candidate],
    need: Shortfall = NOTHING,
    *,
    caps: Mapping[int, tuple[int, int]] | None = None,
    driver: bool = False,
) -> list[Candidate]:
    """The fewest borrowed allocations whose release covers `need` and makes room where `request` fits, or an
    empty list when no choice does. `fleet` holds every allocation's instances, owned by str(allocation_id);
    `caps`: per tenant, how many compute slices / memory slots may be taken (the last one taken may go past);
    `driver`: fitting is the Kubernetes driver's first fit (`driver_slots`), not our engine's."""
    ordered = reclaim_order(candidates)
    # Room there already (a shortfall of quota only, the cohort's balance): what is taken need only cover it.
    fits_now = _placeable(fleet, request, driver)
    rank = {c.allocation_id: n for n, c in enumerate(ordered)}
    at: dict[str, set[tuple[str, int]]] = {}
    for gpu in fleet.gpus():
        for instance in gpu.instances:
            if instance.owner is not None:
                at.setdefault(instance.owner, set()).add((gpu.node, gpu.index))
    gpus = [(g.node, g.index) for g in fleet.gpus()]
    groups: list[list[Candidate]] = [
        [c for c in ordered if position in at.get(str(c.allocation_id), set())] for position in gpus
    ]
    groups += [
        [c for c in ordered if any(node == n for n, _ in at.get(str(c.allocation_id), set()))]
        for node in dict.fromkeys(n for n, _ in gpus)
    ]
    groups.append(ordered)
    best: list[Candidate] = []
    best_key: tuple[int, int, int] | None = None
    seen: set[tuple[int, ...]] = set()
    for group in groups:
        ids = tuple(c.allocation_id for c in group)
        if not group or ids in seen:
            continue
        seen.add(ids)
        chosen = _enough(fleet, request, group, need, caps, fits_now, driver)
        if not chosen:
            continue
        key = (len(chosen), sum(c.compute for c in chosen), sum(rank[c.allocation_id] for c in chosen))
        if best_key is None or key < best_key:
            best, best_key = chosen, key
    return best
