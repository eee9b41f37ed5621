"""Compaction in a static-MIG pool (issue 14): which slices to move so that a refused request fits.

In a static pool the MIG devices are pre-created and a claim pins one by its `uuid` (static_placement.py). A move
there is a new claim pinned to a FREE pre-created instance of the same profile on another GPU, then the old claim
and holder pod deleted (cluster/moves.py applies it, as on DynamicMIG): no layout changes for the move itself. The
instance it leaves stays, free, and the refused request has the freed GPU reconfigured for it by the planner that
static provisioning uses (static_placement's StaticGpu.plan). (The freed instances are never of the request's
profile: a free instance of it elsewhere, where the moved slice goes, would have served the request directly.)

The plan: for each GPU that has the profile, the fewest movable slices (at most `max_moves`) whose moves leave the
GPU able to take the request, each with a free instance of its profile elsewhere to go to; fewest moves first,
then the fewest MIG operations left to do, then node and GPU order. Destinations: GPUs that hold something first
(an empty GPU stays whole for a large request), then node, GPU and slot order; two moves never share one.

Instances held for a lender (issue 15, allocations/cohorts/fence.py: a cohort reclaim's room) count as held here:
no move goes to them, and the GPU they are on is freed for the request only around them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING

from allocations.cluster.static_placement import StaticGpu, held_owners, whole_gpu_held
from allocations.costs import gpu_model_for
from allocations.mig.catalog import GpuModel
from allocations.mig.defrag import DefragPlan, Move
from allocations.mig.fleet import Instance
from allocations.models import Gpu, Node, NodePool
from allocations.placement import gpu_model_of

if TYPE_CHECKING:
    from allocations.cohorts.fence import HeldSlot

# The owner of an instance held for a lender: neither free nor movable.
LENDER = "lender"


@dataclass(frozen=True, slots=True)
class _Slot:
    """One pre-created instance of a ready GPU."""

    gpu: Gpu
    profile: str
    start: int
    owner: str | None  # who holds it (static_placement.held_owners), None when free


@dataclass(frozen=True, slots=True)
class _StaticGpu:
    gpu: Gpu
    model: GpuModel
    slots: list[_Slot]

    @property
    def holds(self) -> bool:
        return any(s.owner is not None for s in self.slots)


def _static_fleet(pool: NodePool, fenced: Sequence[HeldSlot] = ()) -> list[_StaticGpu]:
    pool_model = gpu_model_for(pool.gpu_model)
    held = held_owners(pool)
    out = []
    gpus = Gpu.objects.filter(node__pool=pool, node__state=Node.State.READY).select_related("node")
    for gpu in gpus.order_by("node__name", "index"):
        model = gpu_model_of(pool_model, gpu.figures_id) or pool_model
        owners = held.get(gpu.pk, {})
        slots = []
        for i in gpu.static_instances:
            profile, start = str(i["profile"]), int(i["start"])
            owner = owners.get(start)
            if owner is None and model.has_profile(profile):
                size = model.profile(profile).memory_slices
                owner = LENDER if any(f.overlaps(gpu.pk, start, size) for f in fenced) else None
            slots.append(_Slot(gpu, profile, start, owner))
        out.append(_StaticGpu(gpu, model, slots))
    return out


def gpu_positions(pool: NodePool) -> dict[tuple[str, int], int]:
    """Every GPU of the pool by (node name, index): the plan's moves name GPUs so."""
    rows = Gpu.objects.filter(node__pool=pool).values_list("node__name", "index", "pk")
    return {(node, index): pk for node, index, pk in rows}


def free_static_instance(pool: NodePool, gpu: Gpu, profile: str, start: int) -> tuple[str, str] | None:
    """(uuid, device name) of the free pre-created `profile` instance at `start` of `gpu`, or None when it is not
    published (any more) or someone holds it. Caller holds `pool`'s lock."""
    instance = next(
        (i for i in gpu.static_instances if int(i["start"]) == start and str(i["profile"]) == profile), None
    )
    if instance is None or start in held_owners(pool).get(gpu.pk, {}):
        return None
    return str(instance["uuid"]), str(instance["device"])


def _fits_after(target: _StaticGpu, moved: set[int], profile: str, mig_mode: str) -> int | None:
    """The MIG operations the request still needs on `target` once the slices at `moved` are gone (their
    instances stay, free), or None when it does not fit even so."""
    instances = [
        Instance(profile=s.profile, start=s.start, owner=None if s.start in moved or s.owner is None else "held")
        for s in target.slots
    ]
    held = any(i.owner is not None for i in instances)
    plan = StaticGpu(gpu=target.gpu, model=target.model, instances=instances, held=held, existing={}).plan(
        profile, 1, mig_mode
    )
    return None if plan is None else plan.cost


def _destinations(fleet: list[_StaticGpu], target: _StaticGpu, moving: tuple[_Slot, ...]) -> list[_Slot] | None:
    """A free instance of each moving slice's profile on another GPU (distinct ones), or None."""
    free = [
        (not g.holds, n, s)
        for n, g in enumerate(fleet)
        if g.gpu.pk != target.gpu.pk
        for s in g.slots
        if s.owner is None
    ]
    free.sort(key=lambda f: (f[0], f[1], f[2].start))
    taken: set[tuple[int, int]] = set()
    out = []
    for slot in moving:
        found = next((s for _, _, s in free if s.profile == slot.profile and (s.gpu.pk, s.start) not in taken), None)
        if found is None:
            return None
        taken.add((found.gpu.pk, found.start))
        out.append(found)
    return out


def plan_static_rescue(
    *, pool: NodePool, profile: str, movable: set[int], max_moves: int, held: Sequence[HeldSlot] = ()
) -> DefragPlan | None:
    """The cheapest plan of at most `max_moves` moves of `movable` requests' slices after which one `profile`
    instance fits the pool (see the module docstring), or None. `held`: slots held for lenders, kept as they are.
    Caller holds the pool's lock."""
    fleet = _static_fleet(pool, held)
    best: tuple[tuple[int, int, str, int], list[Move]] | None = None
    for target in fleet:
        if not target.model.has_profile(profile) or whole_gpu_held(held, target.gpu.pk, target.model):
            continue  # (a GPU whose reconfiguration is held for a lender is not changed for anyone else)
        candidates = [s for s in target.slots if s.owner is not None and s.owner.isdigit() and int(s.owner) in movable]
        for k in range(1, max_moves + 1):
            if best is not None and best[0][0] < k:
                break
            for moving in combinations(candidates, k):
                cost = _fits_after(target, {s.start for s in moving}, profile, pool.mig_mode)
                if cost is None:
                    continue
                destinations = _destinations(fleet, target, moving)
                if destinations is None:
                    continue
                rank = (k, cost, target.gpu.node.name, target.gpu.index)
                if best is None or rank < best[0]:
                    best = (rank, [_move(s, d) for s, d in zip(moving, destinations, strict=True)])
    if best is None:
        return None
    return DefragPlan(
        moves=tuple(best[1]),
        destroys=(),
        placement=None,
        whole_gpus_before=0,
        whole_gpus_after=0,
        fits_before={profile: 0},
        fits_after={profile: 1},
    )


def _move(slot: _Slot, destination: _Slot) -> Move:
    return Move(
        owner=slot.owner or "",
        profile=slot.profile,
        from_node=slot.gpu.node.name,
        from_gpu=slot.gpu.index,
        from_start=slot.start,
        to_node=destination.gpu.node.name,
        to_gpu=destination.gpu.index,
        to_start=destination.start,
        reuse=True,
    )
