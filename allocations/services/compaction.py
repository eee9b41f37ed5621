"""Compaction that runs (issue 14): move plans made from a pool's real layout, started by the beat, by a platform
admin, or to rescue one request refused for fragmentation alone.

What may move: ACTIVE slices whose owner said a move may restart their pods (`Allocation.movable`, defaulting to the
tenant's `movable_by_default`), and slices idle reclaim has flagged (`idle_since`): nobody is using them. Nothing else
ever moves. The planner is allocations/mig/defrag.py; this module turns its plan into MovePlan and SliceMove rows,
and services/moves.py applies them one step at a time.

Where compaction runs: MIG pools with DynamicMIG, on the simulated backend and on Kubernetes. There a move is a new
claim pinned at the destination (GPU by UUID, slot by steering), then the old claim and holder pod deleted
(allocations/cluster/moves.py), so only requests of one slice move. Static-MIG pools on Kubernetes: only the rescue
runs there, with moves to FREE pre-created instances of the same profile (the new claim pins the instance's
`uuid`; plan: allocations/cluster/static_compaction.py), after which the refused request has the freed GPU
reconfigured for it. Freeing whole GPUs there (the beat, the admin's button) would need layout changes on the
destinations too: not done.

Lenders' rooms (issue 15, allocations/cohorts/fence.py): no move lands in the room a cohort reclaim holds for a
waiting lender, and a rescue does not make room there. A plan that would is made again without the fenced GPUs
(dynamic pools), or around the held instances from the start (static pools); when nothing useful is left, the
admin is told for whom the room is held, the beat passes, and a rescued request waits in the queue saying so.
A fence raised while a plan applies fails the plan at the move that would land in it (services/moves.py). A
lender's own rescue holds the slot its moves free for it (rescue_with_moves, `fence.lends`): from the plan's
start until the lender is placed, or until the plan fails.

Locks: the callers hold the pool's lock (rescue: the refused request's, then the pool's), and every plan is created
under it, so a pool has one plan APPLYING at a time (a constraint says so too).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from allocations.cluster.static_compaction import gpu_positions, plan_static_rescue
from allocations.cohorts.fence import (
    Fence,
    fenced_positions,
    held_message,
    landing_hit,
    lends,
    planned_room,
    pool_fences,
)
from allocations.costs import gpu_model_for
from allocations.mig.defrag import DefragPlan, plan_defrag
from allocations.mig.fleet import Fleet, Gpu, Node, PlacementRequest
from allocations.models import Allocation, MovePlan, NodePool, SliceMove
from allocations.placement import PlannedSlice, PoolLayout, read_pool, recent_demand
from allocations.services.lender_room import hold_room
from allocations.services.locks import lock_pool
from allocations.services.outbox import enqueue_task
from tenants.errors import InvalidInput
from tenants.services import record_audit_event

if TYPE_CHECKING:
    from django.contrib.auth.models import User

ADVANCE_TASK = "allocations.tasks.advance_move_plan_task"
# A request refused for fragmentation gets a plan of at most this many moves (issue 14): more restarts other
# people's pods for one request.
RESCUE_MAX_MOVES = 2


def compaction_refusal(pool: NodePool, *, rescue: bool = False) -> str:
    """Why this pool is not compacted, or "" when it is (see the module docstring); `rescue`: for one refused
    request rather than to free whole GPUs."""
    if pool.kind != NodePool.Kind.MIG:
        return f"{pool.name} shares whole GPUs: there are no MIG slots to compact."
    if pool.mig_mode == NodePool.MigMode.DYNAMIC:
        return ""
    if rescue and settings.FATIA_CLUSTER_BACKEND == "kubernetes":
        return ""  # moves to free pre-created instances (allocations/cluster/static_compaction.py)
    return (
        f"{pool.name} uses static MIG: slices move there only to make room for a refused request; freeing whole "
        "GPUs needs layout changes first."
    )


def movable_allocation_ids(pool: NodePool) -> set[int]:
    """ACTIVE requests of the pool that may move: movable by their owner, or idle. On Kubernetes only requests of
    one slice: a move makes the new claim before deleting the old one, and a claim of several slices made anew
    would ask for the devices its unmoved slices hold."""
    movable = Allocation.objects.filter(pool=pool, status=Allocation.Status.ACTIVE).filter(
        Q(movable=True) | Q(idle_since__isnull=False)
    )
    if settings.FATIA_CLUSTER_BACKEND == "kubernetes":
        movable = movable.filter(count=1)
    return set(movable.values_list("pk", flat=True))


def movable_fleet(pool: NodePool, *, skip: frozenset[tuple[str, int]] = frozenset()) -> tuple[PoolLayout, Fleet]:
    """The pool's layout, and its fleet with the movable requests' instances marked idle (the planner's word for
    "may move"); devices held outside the portal and every other request stay put. `skip`: GPUs (node, index)
    left out of the fleet (rooms held for lenders)."""
    layout = read_pool(pool)
    ids = {str(pk) for pk in movable_allocation_ids(pool)}
    nodes = [
        Node(
            n.name,
            [
                Gpu(g.node, g.index, g.model, [replace(i, idle=i.owner in ids) for i in g.instances])
                for g in n.gpus
                if (n.name, g.index) not in skip
            ],
            n.pool,
        )
        for n in layout.fleet.nodes
    ]
    return layout, Fleet(nodes)


def _landings(pool: NodePool, positions: Mapping[tuple[str, int], int], plan: DefragPlan) -> list[PlannedSlice]:
    """Where the plan puts slices: each move's destination and the rescued request's slot (its size from the
    pool's catalog model: a profile's memory slices are the same on every GPU of one model)."""
    model = gpu_model_for(pool.gpu_model)
    spots = [(m.to_node, m.to_gpu, m.profile, m.to_start) for m in plan.moves]
    if plan.placement is not None:
        p = plan.placement
        spots.append((p.node, p.gpu_index, p.profile, p.start))
    return [
        PlannedSlice(positions[(node, gpu)], node, gpu, start, model.profile(profile).memory_slices, device_name="")
        for node, gpu, profile, start in spots
    ]


def held_refusal(pool: NodePool, fence: Fence) -> str:
    """Why a compaction of the pool is refused: its only useful plan lands in a lender's room."""
    return f"The only compaction of {pool.name} right now would move slices into the room {held_message(fence)}."


@dataclass(frozen=True, slots=True)
class PlannedMove:
    allocation_id: int
    tenant: str
    profile: str
    source: str  # node/gpu-<index>:<start>
    destination: str


@dataclass(frozen=True, slots=True)
class Preview:
    """What a compaction of the pool would do now; `refusal` is set when it would not run at all."""

    moves: list[PlannedMove]
    whole_gpus_before: int
    whole_gpus_after: int
    gain: dict[str, int]  # per profile: how many more fit after the plan
    refusal: str = ""

    @property
    def gpus_freed(self) -> int:
        return self.whole_gpus_after - self.whole_gpus_before


def _where(node: str, gpu_index: int, start: int) -> str:
    return f"{node}/gpu-{gpu_index}:{start}"


def _preview(plan: DefragPlan) -> Preview:
    owners = {
        a.pk: a.tenant.name
        for a in Allocation.objects.filter(pk__in=[int(m.owner) for m in plan.moves]).select_related("tenant")
    }
    return Preview(
        moves=[
            PlannedMove(
                allocation_id=int(m.owner),
                tenant=owners.get(int(m.owner), ""),
                profile=m.profile,
                source=_where(m.from_node, m.from_gpu, m.from_start),
                destination=_where(m.to_node, m.to_gpu, m.to_start),
            )
            for m in plan.moves
        ],
        whole_gpus_before=plan.whole_gpus_before,
        whole_gpus_after=plan.whole_gpus_after,
        gain={p: n for p, n in plan.gain.items() if n},
    )


def _plan_whole_gpus(pool: NodePool, skip: frozenset[tuple[str, int]]) -> tuple[PoolLayout, DefragPlan]:
    layout, fleet = movable_fleet(pool, skip=skip)
    plan = plan_defrag(fleet, max_moves=settings.FATIA_COMPACTION_MAX_MOVES, demand=recent_demand(pool))
    if plan is None:  # without a request the planner always answers, possibly with an empty plan
        raise RuntimeError("plan_defrag answered None without a request")
    return layout, plan


def _frees_a_gpu(plan: DefragPlan) -> bool:
    return bool(plan.moves) and plan.gpus_freed > 0


def _whole_gpu_plan(pool: NodePool) -> tuple[PoolLayout, DefragPlan, str]:
    """The plan that frees whole GPUs, kept out of lenders' rooms (made again without their GPUs when it lands in
    one), and why it is refused when only a plan landing in a room would free a GPU ("" otherwise)."""
    layout, plan = _plan_whole_gpus(pool, frozenset())
    fences = pool_fences(pool.pk)
    hit = landing_hit(pool, fences, _landings(pool, layout.by_position, plan))
    if hit is None:
        return layout, plan, ""
    layout, plan = _plan_whole_gpus(pool, fenced_positions(fences))
    return layout, plan, "" if _frees_a_gpu(plan) else held_refusal(pool, hit)


def preview_compaction(*, pool: NodePool) -> Preview:
    """The plan a compaction would start now (nothing is written): which request moves from which slot to which,
    and the whole GPUs and room it frees."""
    refusal = compaction_refusal(pool)
    if refusal:
        return Preview([], 0, 0, {}, refusal)
    if MovePlan.objects.filter(pool=pool, status=MovePlan.Status.APPLYING).exists():
        return Preview([], 0, 0, {}, f"A compaction of {pool.name} is being applied; wait until it ends.")
    _, plan, held = _whole_gpu_plan(pool)
    return Preview([], 0, 0, {}, held) if held else _preview(plan)


def _create_plan(
    *,
    pool: NodePool,
    positions: Mapping[tuple[str, int], int],
    plan: DefragPlan,
    trigger: str,
    actor: User | None,
    for_allocation: Allocation | None = None,
) -> MovePlan:
    """Write the plan and its moves, audit it and queue its first step; the caller holds the pool's lock."""
    preview = _preview(plan)
    summary: dict[str, Any] = {
        "whole_gpus_before": preview.whole_gpus_before,
        "whole_gpus_after": preview.whole_gpus_after,
        "gain": preview.gain,
        "moves": [[m.allocation_id, m.profile, m.source, m.destination] for m in preview.moves],
    }
    move_plan = MovePlan.objects.create(
        pool=pool, trigger=trigger, for_allocation=for_allocation, created_by=actor, summary=summary
    )
    SliceMove.objects.bulk_create(
        [
            SliceMove(
                plan=move_plan,
                position=n,
                allocation_id=int(m.owner),
                profile=m.profile,
                from_gpu_id=positions[(m.from_node, m.from_gpu)],
                from_start=m.from_start,
                to_gpu_id=positions[(m.to_node, m.to_gpu)],
                to_start=m.to_start,
            )
            for n, m in enumerate(plan.moves)
        ]
    )
    record_audit_event(
        actor=actor,
        verb="compaction_started",
        obj=move_plan,
        after={"pool": pool.slug, "trigger": trigger, **summary},
    )
    enqueue_task(ADVANCE_TASK, move_plan.pk)
    return move_plan


def _applying(pool: NodePool) -> bool:
    return MovePlan.objects.filter(pool=pool, status=MovePlan.Status.APPLYING).exists()


@transaction.atomic
def start_compaction(*, pool_id: int, actor: User | None, trigger: str = MovePlan.Trigger.ADMIN) -> MovePlan:
    """Plan a compaction that frees whole GPUs (at most FATIA_COMPACTION_MAX_MOVES moves, movable requests only)
    and start applying it after commit (advance_move_plan_task).

    Locks the pool. InvalidInput when the pool is not compacted (compaction_refusal), a plan is being applied
    there already, or no plan frees a whole GPU."""
    pool = lock_pool(pool_id=pool_id)
    refusal = compaction_refusal(pool)
    if refusal:
        raise InvalidInput({"pool": [refusal]})
    if _applying(pool):
        raise InvalidInput({"pool": [f"A compaction of {pool.name} is being applied; wait until it ends."]})
    layout, plan, held = _whole_gpu_plan(pool)
    if held:
        raise InvalidInput({"pool": [held]})
    if not _frees_a_gpu(plan):
        raise InvalidInput({"pool": [f"Moving the movable slices of {pool.name} frees no whole GPU right now."]})
    return _create_plan(pool=pool, positions=layout.by_position, plan=plan, trigger=trigger, actor=actor)


def compact_pools() -> list[MovePlan]:
    """The beat's pass: in every pool that compaction runs in and that is fragmented (moving movable slices
    frees a whole GPU), start one plan. Pools with a plan applying are left to it. Returns the plans started."""
    started = []
    for pool in NodePool.objects.filter(kind=NodePool.Kind.MIG, mig_mode=NodePool.MigMode.DYNAMIC).order_by("pk"):
        if compaction_refusal(pool) or _applying(pool):
            continue
        try:
            started.append(start_compaction(pool_id=pool.pk, actor=None, trigger=MovePlan.Trigger.BEAT))
        except InvalidInput:
            continue  # not fragmented (or a plan started meanwhile): nothing to do this time
    return started


def rescue_with_moves(allocation: Allocation) -> bool:
    """A request refused for fragmentation alone: start a plan of at most RESCUE_MAX_MOVES moves that makes room
    for it. True when the request is dealt with: a plan is applying for it (the request waits, APPROVED, and is
    provisioned again when the plan ends), or the only plan would move slices into (or make room in) a room held
    for a lender, and the request is queued saying for whom; False when there is none (no such plan, a
    multi-slice request, another plan applying in the pool, or this request had its rescue already: one per
    request, so a plan overtaken by others does not loop).

    The caller holds the request's lock, then its pool's (provisioning does)."""
    earlier = MovePlan.objects.filter(for_allocation=allocation).order_by("-pk").first()
    if earlier is not None:
        return earlier.status == MovePlan.Status.APPLYING
    pool = allocation.pool
    if allocation.count != 1 or compaction_refusal(pool, rescue=True) or _applying(pool):
        return False
    fences = pool_fences(pool.pk, besides=allocation.pk)
    positions, plan, held = _rescue_plan(allocation, fences)
    if held is not None:
        return _held_from_rescue(allocation, held)
    if plan is None or not plan.moves:
        return False
    move_plan = _create_plan(
        pool=pool,
        positions=positions,
        plan=plan,
        trigger=MovePlan.Trigger.RESCUE,
        actor=None,
        for_allocation=allocation,
    )
    allocation.status_message = (
        f"The pool's free slots are scattered: {len(plan.moves)} movable slice(s) of other requests move to make "
        "room, then this request is provisioned."
    )
    allocation.save(update_fields=["status_message", "updated_at"])
    if plan.placement is not None and lends(allocation):
        # A lender within its guarantee (issue 15): the room the moves make is held for it until it is placed
        # there (allocations/cohorts/fence.py), else another request could take it between the moves and then.
        _name_placement(move_plan, plan)
        hold_room(allocation, planned_room(pool, positions, plan.placement))
    record_audit_event(
        actor=None,
        verb="rescue",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        after={"plan": move_plan.pk, "moves": len(plan.moves)},
    )
    return True


def may_rescue(allocation: Allocation) -> bool:
    """Whether moves may be started for this request now: one slice, a compacted pool with no plan applying, and
    no rescue of this request before (one per request, as `rescue_with_moves`: a plan overtaken does not loop)."""
    pool = allocation.pool
    return (
        allocation.count == 1
        and not compaction_refusal(pool)
        and not _applying(pool)
        and not MovePlan.objects.filter(for_allocation=allocation).exists()
    )


def rescue_lender(allocation: Allocation, *, layout: PoolLayout, plan: DefragPlan) -> MovePlan | None:
    """Moves that make room for a lender of a cohort (issue 15), with or without borrowed slices taken back
    meanwhile (allocations/cohorts/rescue.py `plan_room` made `plan` on `layout`), started as a rescue of that
    request. None when `may_rescue` refuses. When the plan ends the pool gets an admission pass (services/moves.py).

    The caller holds the request's lock, then its pool's."""
    if not plan.moves or not may_rescue(allocation):
        return None
    move_plan = _create_plan(
        pool=allocation.pool,
        positions=layout.by_position,
        plan=plan,
        trigger=MovePlan.Trigger.RESCUE,
        actor=None,
        for_allocation=allocation,
    )
    if plan.placement is not None:
        _name_placement(move_plan, plan)
    record_audit_event(
        actor=None,
        verb="rescue",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        after={"plan": move_plan.pk, "moves": len(plan.moves), "lender": True},
    )
    return move_plan


def _name_placement(move_plan: MovePlan, plan: DefragPlan) -> None:
    """Where the lender goes once the moves are made (and any slices on notice gone): the room kept for it while
    the plan applies or is done (cohorts/fence.pool_fences reads this key)."""
    if plan.placement is not None:
        where = plan.placement
        move_plan.summary["placement"] = [_where(where.node, where.gpu_index, where.start), where.profile]
        move_plan.save(update_fields=["summary"])


def rescue_applying(allocation: Allocation) -> bool:
    """Whether a move plan started for this request is being applied."""
    return MovePlan.objects.filter(for_allocation=allocation, status=MovePlan.Status.APPLYING).exists()


def _rescue_plan(
    allocation: Allocation, fences: list[Fence]
) -> tuple[Mapping[tuple[str, int], int], DefragPlan | None, Fence | None]:
    """(GPU ids by position, the rescue plan around the lenders' rooms or None, the fence that alone stops it)."""
    pool = allocation.pool
    if pool.is_static:  # the held instances are neither destinations nor freed for the request
        positions = gpu_positions(pool)
        movable = movable_allocation_ids(pool)

        def static(held: list[Fence]) -> DefragPlan | None:
            slots = [slot for fence in held for slot in fence.slots]
            plan = plan_static_rescue(
                pool=pool, profile=allocation.profile, movable=movable, max_moves=RESCUE_MAX_MOVES, held=slots
            )
            return plan if plan is not None and plan.moves else None

        plan = static(fences)
        if plan is not None or not fences:
            return positions, plan, None
        unfenced = static([])
        if unfenced is None:
            return positions, None, None
        return positions, None, landing_hit(pool, fences, _landings(pool, positions, unfenced)) or fences[0]

    def dynamic(skip: frozenset[tuple[str, int]]) -> tuple[PoolLayout, DefragPlan | None]:
        layout, fleet = movable_fleet(pool, skip=skip)
        request = PlacementRequest(profile=allocation.profile, count=1, pool=pool.slug)
        plan = plan_defrag(fleet, request=request, max_moves=RESCUE_MAX_MOVES, demand=recent_demand(pool))
        return layout, plan if plan is not None and plan.moves else None

    layout, plan = dynamic(frozenset())
    hit = None if plan is None else landing_hit(pool, fences, _landings(pool, layout.by_position, plan))
    if hit is None:
        return layout.by_position, plan, None
    layout, plan = dynamic(fenced_positions(fences))
    return layout.by_position, plan, None if plan is not None else hit


def _held_from_rescue(allocation: Allocation, fence: Fence) -> bool:
    """The rescue would land in a lender's room: the request waits in the queue, told for whom it is held."""
    # queue_entry -> cohort_reclaim -> cohort_notices imports this module: import at the call.
    from allocations.services.queue_entry import enqueue_allocation  # noqa: PLC0415

    what = f"{allocation.count} x {allocation.profile}"
    enqueue_allocation(allocation, pool=allocation.pool, what=what, waiting_for=held_message(fence))
    return True
