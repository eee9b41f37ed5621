"""The room a reclaim frees is kept for its lender (issue 15): a fence around the slots planned for it.

Between the notice and the release (the cohort's grace), and between the release and the admission pass that
follows it, another request (a borrower's new one, another lender's) could be placed in the room the reclaim
planned for the lender R; R would then wait a second round, past the bound. So while R's notices run, its
planned slots are held from every other request's placement.

Where it lives: the plan is stored on R's own row (Allocation.reclaim_room), written when its notices are given
(services/cohort_notices.give_notice). It cannot be derived: the reclaimed allocations' placements are deleted
when they are released (services/lifecycle.finish_release), and the plan may also use free slots next to them.
Whether the fence holds is derived, so that it cannot outlive its reason: R still waits (APPROVED or QUEUED) and
a notice given for it stands or was carried out (an allocation with reclaimed_for = R and reclaim_at set), or a
rescue plan that makes R's room by moves (a MovePlan for R whose summary names its `placement`) is applying or
done: a room made by moves alone, with no notice, is held too. R admitted (cohort_notices.cancel_notices_for
clears the plan), withdrawn (no longer waiting), its notices called off (clear_notice unsets reclaimed_for) with
no such plan, or that plan failed: the fence is gone. A room made by moves alone that R still does not fit once
the plan is done is let go by the next admission pass (services/cohort_reclaim.reclaim_room_for).

What is held: on the simulated fleet, the exact GPU and slots R's first fit takes once the reclaimed allocations
are gone. On Kubernetes DynamicMIG the scheduler picks the slot on the GPU the portal pins: the slots its first
fit will give R there (allocations/mig/scheduler.first_fit, the prediction placement uses), or the whole GPU
when that cannot be predicted. Another request's slice passes a fenced GPU only when its own predicted slot lies
outside R's and no claim on that GPU still waits for the scheduler (the order claims are allocated in could
shift both). Static pools: the pre-made instances static placement will pin R to (on one GPU, or spread over
GPUs of a node for a request of several slices), or the whole GPU where R needs a reconfiguration (_static_room);
other requests' static placement counts them held (static_placement.static_gpus). Shared pools never reclaim
(their placement skips wait_for_reclaim and a full one fails rather than queues), so they have nothing to fence.
Compaction's moves keep out of fences too (services/compaction.py).

Placement (services/provisioning.py, cluster/sync.py) plans as usual; a plan that runs into a fence is made
again without the fenced GPUs (`place_around`), and when nothing else fits the request waits in the queue, told
for whom the room is held. R itself passes its own fence, and the admission pass takes it first
(services/cohort_reclaim.lenders_first). Plans for two lenders never share a slot: each is planned around the
fences already standing: `plan_room` here, and the choice of what to take back or move for R
(services/cohort_notices._choose) is made on the pool without the GPUs other lenders' rooms are on (`unfenced`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Exists, OuterRef

from allocations.cluster.static_spread import choose_static_slices
from allocations.cohorts.room import Room, room_after
from allocations.costs import gpu_model_for
from allocations.mig.fleet import Fleet, Node, PlacementRequest, SlotChoice
from allocations.models import Allocation, MovePlan, NodePool, Quota, SlicePlacement
from allocations.placement import PlannedSlice, PoolLayout, read_pool

Status = Allocation.Status
# The lender still needs its room while in one of these (services/cohort_reclaim.LENDER_WAITING).
WAITING = (Status.APPROVED, Status.QUEUED)

Position = tuple[str, int]
# A rescue plan holds the room it makes while it runs and once it is done (until the lender is admitted); a failed
# plan's room may never be made.
MOVES_HOLD = (MovePlan.Status.APPLYING, MovePlan.Status.DONE)


@dataclass(frozen=True, slots=True)
class HeldSlot:
    """Memory slots [start, start + size) of one GPU, held for a lender."""

    gpu: int
    node: str
    index: int
    start: int
    size: int

    def as_json(self) -> dict[str, object]:
        return {"gpu": self.gpu, "node": self.node, "index": self.index, "start": self.start, "size": self.size}

    @classmethod
    def from_json(cls, row: dict[str, object]) -> HeldSlot:
        return cls(
            gpu=int(str(row["gpu"])),
            node=str(row["node"]),
            index=int(str(row["index"])),
            start=int(str(row["start"])),
            size=int(str(row["size"])),
        )

    def overlaps(self, gpu: int, start: int, size: int) -> bool:
        return gpu == self.gpu and start < self.start + self.size and self.start < start + size


@dataclass(frozen=True, slots=True)
class Fence:
    lender_id: int
    slots: tuple[HeldSlot, ...]

    @property
    def positions(self) -> set[Position]:
        return {(s.node, s.index) for s in self.slots}


def scheduler_picks_slots(pool: NodePool) -> bool:
    """Kubernetes DynamicMIG: the slot is the scheduler's first fit, a prediction rather than our choice."""
    return settings.FATIA_CLUSTER_BACKEND == "kubernetes" and not pool.is_static


def pool_fences(pool_id: int, *, besides: int | None = None) -> list[Fence]:
    """The fences standing in the pool (one indexed query), but the one of request `besides`."""
    standing = Allocation.objects.filter(reclaimed_for=OuterRef("pk"), reclaim_at__isnull=False)
    # The moves of a rescue make (or made) the room: rescue_lender and rescue_with_moves name it in the summary.
    moving = MovePlan.objects.filter(for_allocation=OuterRef("pk"), status__in=MOVES_HOLD, summary__has_key="placement")
    rows = (
        Allocation.objects.filter(pool_id=pool_id, status__in=WAITING)
        .exclude(reclaim_room=[])
        .filter(Exists(standing) | Exists(moving))
        .order_by("pk")
        .values_list("pk", "reclaim_room")
    )
    return [
        Fence(lender_id=pk, slots=tuple(HeldSlot.from_json(s) for s in room))
        for pk, room in rows
        if pk != besides and room
    ]


def fence_hit(fences: Sequence[Fence], slices: Sequence[PlannedSlice], *, predicted: bool) -> Fence | None:
    """The fence `slices` run into, or None. `predicted`: the slices' starts are the scheduler's first fit
    (Kubernetes), trusted only on a GPU with no claim the scheduler has still to allocate."""
    for fence in fences:
        if any(slot.overlaps(s.gpu_id, s.start, s.size) for slot in fence.slots for s in slices):
            return fence
    if not predicted:
        return None
    fenced = {slot.gpu: fence for fence in fences for slot in fence.slots}
    on = {s.gpu_id for s in slices} & set(fenced)
    if not on:
        return None
    waiting = SlicePlacement.objects.filter(gpu_id__in=on, allocation__status=Status.PROVISIONING)
    gpu = waiting.values_list("gpu_id", flat=True).first()
    return None if gpu is None else fenced[gpu]


def held_message(fence: Fence) -> str:
    """The queued request's reason, in words (services/queue_entry.enqueue_allocation's `waiting_for`)."""
    # A room made by moves alone (no notice) is held too: say both ways the room is made.
    return (
        f"the free room it fits is held for request #{fence.lender_id}, for which borrowed slices are being taken "
        "back in its cohort or other slices moved"
    )


def place_around(
    *,
    pool: NodePool,
    allocation: Allocation,
    slices: list[PlannedSlice] | None,
    replan: Callable[[frozenset[Position]], list[PlannedSlice] | None],
) -> tuple[list[PlannedSlice] | None, str]:
    """`slices` when they keep out of every other lender's fence; else `replan` without the fenced GPUs; else
    (None, why). Caller holds the pool's lock, as for the plan itself."""
    if slices is None or pool.is_shared:
        return slices, ""
    fences = pool_fences(pool.pk, besides=allocation.pk)
    if not fences:
        return slices, ""
    hit = fence_hit(fences, slices, predicted=scheduler_picks_slots(pool))
    if hit is None:
        return slices, ""
    again = replan(frozenset(p for fence in fences for p in fence.positions))
    return (again, "") if again is not None else (None, held_message(hit))


def unfenced(fleet: Fleet, fences: Sequence[Fence]) -> Fleet:
    """The fleet without the GPUs the fences hold slots of: where a lender's reclaim or rescue is planned, so
    that neither its room nor a move's destination lies in another lender's room (as `plan_room` skips them)."""
    if not fences:
        return fleet
    skip = fenced_positions(fences)
    return Fleet([Node(n.name, [g for g in n.gpus if (n.name, g.index) not in skip], n.pool) for n in fleet.nodes])


def lends(allocation: Allocation) -> bool:
    """Whether the request is one whose room is kept for it: a member of a cohort of its (not shared) pool asking
    within its guarantee, and not borrowing (services/cohort_reclaim.reclaim_room_for's lender)."""
    if allocation.pool.is_shared or allocation.borrowed_compute_slices or allocation.borrowed_memory_slices:
        return False
    quota = Quota.objects.filter(
        tenant_id=allocation.tenant_id, pool_id=allocation.pool_id, cohort__pool_id=allocation.pool_id
    ).first()
    return (
        quota is not None
        and quota.compute_slices_used <= quota.compute_slices_limit
        and quota.memory_slices_used <= quota.memory_slices_limit
    )


def planned_room(pool: NodePool, positions: Mapping[Position, int], placement: SlotChoice) -> list[HeldSlot]:
    """The slot a rescue plan planned for its request (the defrag plan's `placement`), as a held slot; `positions`:
    GPU ids by (node, index). Its size from the pool's catalog model, as compaction's landings."""
    position = (placement.node, placement.gpu_index)
    size = gpu_model_for(pool.gpu_model).profile(placement.profile).memory_slices
    return [HeldSlot(positions[position], position[0], position[1], placement.start, size)]


def fenced_positions(fences: Sequence[Fence]) -> frozenset[Position]:
    """The GPUs (node, index) the fences hold slots of."""
    return frozenset(p for fence in fences for p in fence.positions)


def landing_hit(pool: NodePool, fences: Sequence[Fence], landings: Sequence[PlannedSlice]) -> Fence | None:
    """The fence that slices moved to `landings` (compaction's destinations, allocations/services/compaction.py)
    run into, or None. A move's slot is ours (steered or pinned), but on Kubernetes DynamicMIG the lender's room
    is a prediction that a claim still waiting on the GPU can shift: the same test as a placement's."""
    return fence_hit(fences, landings, predicted=scheduler_picks_slots(pool)) if fences and landings else None


def plan_room(lender: Allocation, released: Collection[int]) -> list[HeldSlot]:
    """The slots `lender` gets once the allocations `released` are gone: first fit on the GPUs they free (then
    their nodes, then the pool), around the other lenders' fences; empty when it fits nowhere (nothing held:
    the next admission pass asks again). Caller holds the lender's and the pool's locks."""
    pool = lender.pool
    if pool.is_shared or not released:
        return []
    if pool.is_static:
        return _static_room(lender, released)
    layout = read_pool(pool)
    others = {p for fence in pool_fences(pool.pk, besides=lender.pk) for p in fence.positions}
    request = PlacementRequest(profile=lender.profile, count=lender.count, pool=pool.slug)
    # The rule itself is pure (cohorts/room.py), so that the fairness bench runs it too.
    room = room_after(layout.fleet, request, {str(pk) for pk in released}, others, driver=scheduler_picks_slots(pool))
    return _held(layout, lender.profile, room)


def _static_room(lender: Allocation, released: Collection[int]) -> list[HeldSlot]:
    """Static MIG: the pre-created instances the lender is pinned to once `released` are gone (static placement's
    own choice, around the other lenders' fences: one GPU, or a multi-slice request spread over GPUs of a node),
    or, on each GPU where it needs a reconfiguration, the whole GPU (its steps cannot be held slot by slot: they
    may destroy free instances around the target). Empty when nothing takes it (the next pass asks again)."""
    pool = lender.pool
    others = [slot for fence in pool_fences(pool.pk, besides=lender.pk) for slot in fence.slots]
    freed = {str(pk) for pk in released}
    choices = choose_static_slices(pool=pool, profile=lender.profile, count=lender.count, freed=freed, fenced=others)
    held: list[HeldSlot] = []
    for choice in choices or []:
        gpu, node, index = choice.gpu.pk, choice.gpu.node.name, choice.gpu.index
        if choice.plan.operations:
            held.append(HeldSlot(gpu, node, index, 0, choice.model.memory_slices))
        else:
            held += [HeldSlot(gpu, node, index, s.start, s.size) for s in choice.slices(lender.profile)]
    return held


def _held(layout: PoolLayout, profile: str, slots: Room) -> list[HeldSlot]:
    """Per GPU, (start, whole GPU?) of each planned slice, as held slots."""
    held: list[HeldSlot] = []
    for position, found in slots.items():
        model = layout.models[position]
        gpu_id = layout.by_position[position]
        if any(whole for _, whole in found):
            held.append(HeldSlot(gpu_id, position[0], position[1], 0, model.memory_slices))
            continue
        size = model.profile(profile).memory_slices
        held += [HeldSlot(gpu_id, position[0], position[1], start, size) for start, _ in found]
    return held
