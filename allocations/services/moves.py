"""Applying a move plan (allocations/services/compaction.py makes them), one step per transaction.

Each call of advance_move_plan takes the plan's first unfinished move one step further and queues the next call in
the same transaction (the outbox), so a worker killed between steps leaves a committed step and a due message: the
outbox's sweep sends it again and the plan resumes where it stopped. A step re-run finds its move past that step and
does nothing: no second placement, audit event or notification.

Steps of one move (SliceMove.Step):
  PENDING  -> NOTIFIED  the owner is told before (in-app now, e-mail after commit)
  NOTIFIED -> PLACED    the slice is placed at the destination slot (simulated backend: a placement row); the old
                        one still holds its slot, so both GPUs stay valid
  PLACED   -> DONE      the old placement is deleted; the owner is told it moved
A move whose request ended or stopped being movable before it was placed is SKIPPED. A destination taken meanwhile
ends the plan FAILED (the moves done so far stay: each left every layout valid), and so does a destination
that lies in a room held for a lender since the plan was made (issue 15, allocations/cohorts/fence.py). When the
plan ends, a rescued request is provisioned again.

On the Kubernetes backend the NOTIFIED and PLACED steps talk to the cluster (allocations/cluster/moves.py): a new
claim pinned at the destination, allocated by kube-scheduler, then the old claim and holder pod deleted. The
PENDING step and the plan's end are the same for both backends and stay here.

Locks: the move's request, then the pool, then the plan (allocation, then pool, as everywhere). Quota never changes:
a moved slice is the same slice.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from allocations.cohorts.fence import held_message, landing_hit, pool_fences
from allocations.mig.layout import geometry
from allocations.models import Allocation, MovePlan, Notification, SliceMove, SlicePlacement
from allocations.placement import PlannedSlice, PoolLayout, dra_device_name, read_pool
from allocations.services.compaction import ADVANCE_TASK
from allocations.services.locks import lock_allocation, lock_pool
from allocations.services.notifications import notify_users
from allocations.services.outbox import enqueue_task
from allocations.services.queue_trigger import request_admission
from tenants.services import record_audit_event

Step = SliceMove.Step
NOTIFY_TASK = "allocations.tasks.notify_move_task"
PROVISION_TASK = "allocations.tasks.provision_allocation_task"


def _lock_plan(plan_id: int) -> MovePlan:
    return MovePlan.objects.select_for_update(no_key=True, of=("self",)).select_related("pool").get(pk=plan_id)


def _lock_move(move_id: int) -> SliceMove:
    return (
        SliceMove.objects.select_for_update(no_key=True, of=("self",))
        .select_related("from_gpu__node", "to_gpu__node")
        .get(pk=move_id)
    )


def may_move(allocation: Allocation) -> bool:
    return allocation.status == Allocation.Status.ACTIVE and (allocation.movable or allocation.idle_since is not None)


@dataclass(frozen=True, slots=True)
class Advance:
    """What one step did: the plan as it is now, and `wait` when nothing changed because the cluster has not
    allocated the move's new claim yet (Kubernetes): the caller looks again after a short delay."""

    plan: MovePlan
    wait: bool = False


def advance_move_plan(*, plan_id: int) -> MovePlan:
    """Take plan `plan_id` one step further (see the module docstring) and queue the next step. Idempotent."""
    return step_move_plan(plan_id=plan_id).plan


def step_move_plan(*, plan_id: int) -> Advance:
    """advance_move_plan, saying whether the step waits for the cluster (see Advance). On the Kubernetes backend
    the NOTIFIED and PLACED steps make cluster calls outside any transaction; raises KubeUnavailable (retry)."""
    if settings.FATIA_CLUSTER_BACKEND == "kubernetes":
        move = current_move(plan_id)
        if move is not None and move.step in (Step.NOTIFIED, Step.PLACED):
            from allocations.cluster import moves as cluster_moves

            return cluster_moves.advance_move_on_cluster(move_id=move.pk)
    return Advance(_advance_in_database(plan_id=plan_id))


def current_move(plan_id: int) -> SliceMove | None:
    """The first unfinished move of an APPLYING plan (read without locks: the step re-checks under them)."""
    return (
        SliceMove.objects.filter(plan_id=plan_id, plan__status=MovePlan.Status.APPLYING)
        .exclude(step__in=(Step.DONE, Step.SKIPPED, Step.FAILED))
        .order_by("position")
        .first()
    )


@transaction.atomic
def _advance_in_database(*, plan_id: int) -> MovePlan:
    plan = MovePlan.objects.get(pk=plan_id)
    if plan.status != MovePlan.Status.APPLYING:
        return plan
    move = plan.moves.exclude(step__in=(Step.DONE, Step.SKIPPED, Step.FAILED)).order_by("position").first()
    allocation = lock_allocation(allocation_id=move.allocation_id) if move is not None else None
    lock_pool(pool_id=plan.pool_id)
    plan = _lock_plan(plan_id)
    if plan.status != MovePlan.Status.APPLYING:
        return plan
    if move is None or allocation is None:
        return finish_plan(plan, MovePlan.Status.DONE, "Every move is done.")
    move = _lock_move(move.pk)
    if move.step in (Step.DONE, Step.SKIPPED, Step.FAILED):
        return plan  # another run took this step; it queued the next one
    if move.step == Step.PENDING:
        _announce(move, allocation)
    elif settings.FATIA_CLUSTER_BACKEND == "kubernetes":
        return plan  # the cluster steps are allocations/cluster/moves.py's (a backend switched mid-plan)
    elif move.step == Step.NOTIFIED:
        if not _place(plan, move, allocation):
            return plan
    else:
        _complete(move, allocation)
    enqueue_task(ADVANCE_TASK, plan.pk)
    return plan


def skip_move(move: SliceMove, allocation: Allocation) -> None:
    """The move's request ended or stopped being movable first: SKIPPED, audited. The caller holds the locks."""
    move.step = Step.SKIPPED
    move.save(update_fields=["step", "updated_at"])
    record_audit_event(
        actor=None,
        verb="move_skipped",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        after={"plan": move.plan_id, "move": move.position, "status": allocation.status, "movable": allocation.movable},
    )


def _where(gpu_node: str, gpu_index: int, start: int) -> str:
    return f"{gpu_node}/gpu-{gpu_index}:{start}"


def source_of(move: SliceMove) -> str:
    return _where(move.from_gpu.node.name, move.from_gpu.index, move.from_start)


def destination_of(move: SliceMove) -> str:
    return _where(move.to_gpu.node.name, move.to_gpu.index, move.to_start)


def tell_owner(move: SliceMove, allocation: Allocation, text: str, phase: str) -> None:
    notify_users(
        recipient_ids=[allocation.requested_by_id],
        kind=Notification.Kind.ALLOCATION_MOVE,
        text=text,
        link=f"/requests/{allocation.pk}/",
        actor=None,
    )
    enqueue_task(NOTIFY_TASK, move.pk, phase)


def _announce(move: SliceMove, allocation: Allocation) -> None:
    if not may_move(allocation):
        skip_move(move, allocation)
        return
    tell_owner(
        move,
        allocation,
        f"Request #{allocation.pk}: one {move.profile} slice moves from {source_of(move)} to {destination_of(move)} to "
        "make room in the pool; pods using it restart.",
        "before",
    )
    move.step = Step.NOTIFIED
    move.save(update_fields=["step", "updated_at"])
    record_audit_event(
        actor=None,
        verb="move_announced",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        after={"plan": move.plan_id, "from": source_of(move), "to": destination_of(move)},
    )


def destination_problem(layout: PoolLayout, move: SliceMove) -> str:
    """Why the move's destination slot cannot take its slice in the pool's current layout, or ""."""
    position = (move.to_gpu.node.name, move.to_gpu.index)
    model = layout.models.get(position)
    if model is None:
        return f"{destination_of(move)} is no longer a ready GPU of the pool."
    held = [(i.profile, i.start) for i in layout.fleet.gpu(*position).instances]
    problems = geometry(model).violations([*held, (move.profile, move.to_start)])
    if problems:
        return f"{destination_of(move)} is taken now: {'; '.join(problems)}."
    return ""


def held_problem(plan: MovePlan, move: SliceMove, size: int) -> str:
    """Why the move's destination may not be used: it lies in a room held for a lender (a cohort reclaim's, raised
    after the plan was made), or ""."""
    landing = PlannedSlice(move.to_gpu_id, move.to_gpu.node.name, move.to_gpu.index, move.to_start, size, "")
    hit = landing_hit(plan.pool, pool_fences(plan.pool_id), [landing])
    return "" if hit is None else f"{destination_of(move)} lies in the room {held_message(hit)}."


def _place(plan: MovePlan, move: SliceMove, allocation: Allocation) -> bool:
    """Place the slice at the destination; False (plan FAILED) when the destination is no longer free."""
    if not may_move(allocation):
        skip_move(move, allocation)
        return True
    source = SlicePlacement.objects.filter(allocation=allocation, gpu=move.from_gpu, start=move.from_start).first()
    if source is None:
        skip_move(move, allocation)
        return True
    layout = read_pool(plan.pool)
    problem = destination_problem(layout, move)
    spec = None if problem else layout.models[(move.to_gpu.node.name, move.to_gpu.index)].profile(move.profile)
    problem = problem or held_problem(plan, move, spec.memory_slices if spec else 0)
    if problem or spec is None:
        finish_plan(plan, MovePlan.Status.FAILED, problem)
        return False
    SlicePlacement.objects.create(
        allocation=allocation,
        gpu=move.to_gpu,
        profile=move.profile,
        start=move.to_start,
        size=spec.memory_slices,
        device_name=dra_device_name(
            gpu_index=move.to_gpu.index, profile=move.profile, profile_id=spec.profile_id, start=move.to_start
        ),
    )
    move.step = Step.PLACED
    move.save(update_fields=["step", "updated_at"])
    record_audit_event(
        actor=None,
        verb="move_placed",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        after={"plan": move.plan_id, "at": destination_of(move)},
    )
    return True


def _complete(move: SliceMove, allocation: Allocation) -> None:
    SlicePlacement.objects.filter(allocation=allocation, gpu=move.from_gpu, start=move.from_start).delete()
    move.step = Step.DONE
    move.save(update_fields=["step", "updated_at"])
    if allocation.status == Allocation.Status.ACTIVE:
        tell_owner(
            move,
            allocation,
            f"Request #{allocation.pk}: its {move.profile} slice now runs at {destination_of(move)}; start your pods "
            "again if they did not restart by themselves.",
            "after",
        )
    record_audit_event(
        actor=None,
        verb="move",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        before={"at": source_of(move)},
        after={"plan": move.plan_id, "at": destination_of(move)},
    )


def finish_plan(plan: MovePlan, status: str, message: str) -> MovePlan:
    plan.status = status
    plan.status_message = message[:500]
    plan.finished_at = timezone.now()
    plan.save(update_fields=["status", "status_message", "finished_at"])
    record_audit_event(
        actor=None,
        verb="compaction_finished",
        obj=plan,
        before={"status": MovePlan.Status.APPLYING},
        after={"status": status, "message": plan.status_message},
    )
    if plan.for_allocation_id is not None:
        # The rescued request tries again: it fits now, or it waits in the pool's queue as it would have.
        enqueue_task(PROVISION_TASK, plan.for_allocation_id)
    # The moves freed room: queued requests (issue 15) may fit now.
    request_admission(pool_id=plan.pool_id)
    return plan
