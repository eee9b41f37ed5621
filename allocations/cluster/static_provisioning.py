"""Provisioning in a static-MIG pool: pin free pre-created instances, or have the layout changed first.

Called by sync.start_provisioning under the allocation's and the pool's locks. When free MIG devices of the
profile fit (static_placement.choose_static finds a plan without operations), the placements are recorded with
the devices' uuids and the request goes on as on DynamicMIG: the claim pins `uuid` (and the profile and GPU), the
holder pod makes the scheduler allocate it. Otherwise a reconfiguration is requested (services/reconfiguration.py)
and the request stays APPROVED, saying so, until it is over; its task then provisions the request again. When
not even a reconfiguration makes room, a plan of at most 2 moves of movable slices to free instances elsewhere is
tried first (services/compaction.py rescue_with_moves); the request waits for it, then is provisioned again.

A request of several slices that no single GPU can take cheaply is spread over GPUs of one node
(static_spread.py): one reconfiguration per GPU that needs one, asked for in node and GPU order within this one
transaction (so two requests never hold parts of each other's plans: the node is `reconfiguring` from the first
one on, and placement skips it), and provisioned when all of them are over. When one of them failed, the others'
changes are undone (each by a reconfiguration of the inverse plan, unless what it created is held by now) and the
request fails with its quota given back. A request whose reconfiguration failed is never planned into a second
one. In MIG-manager mode a spread may change one GPU at most (the manager applies a whole node's config at a time).

The room a cohort reclaim holds for a lender (issue 15, allocations/cohorts/fence.py: pre-created instances, or a
GPU to reconfigure) is planned around for every other request; one that would fit only there waits in the queue,
told for whom the room is held.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from allocations.cluster.static_placement import StaticChoice
from allocations.cluster.static_spread import choose_static_slices
from allocations.cohorts.fence import Fence, HeldSlot, held_message, pool_fences
from allocations.mig.reconfig import Operation
from allocations.models import Allocation, MigReconfiguration, NodePool, SlicePlacement
from allocations.services.compaction import rescue_with_moves
from allocations.services.lifecycle import fail_locked_allocation, start_claiming
from allocations.services.queue_entry import enqueue_allocation
from allocations.services.reconfiguration import operations_of, queue_advance, request_reconfiguration
from tenants.errors import InvalidInput

Status = Allocation.Status
RStatus = MigReconfiguration.Status


def start_static_provisioning(*, allocation: Allocation, pool: NodePool) -> Allocation:
    """APPROVED -> PROVISIONING on free pre-created instances, or APPROVED (waiting for reconfigurations), or
    QUEUED (no room even after reconfiguring; quota kept), or FAILED (a reconfiguration for it failed). Caller
    holds the allocation's and the pool's locks, in that order."""
    mine = MigReconfiguration.objects.filter(allocation=allocation)
    live = list(mine.filter(status__in=MigReconfiguration.LIVE).order_by("pk"))
    if live:
        # A redelivered task, or the stuck-request sweep: the last reconfiguration's task provisions it when all
        # are over. A living task moves a step within the step timeout; past it, its message was lost: start it.
        lost_after = timedelta(
            seconds=settings.FATIA_RECONFIGURATION_STEP_TIMEOUT_S + 10 * settings.FATIA_RECONFIGURATION_POLL_S
        )
        for reconfiguration in live:
            if timezone.now() - (reconfiguration.step_started_at or reconfiguration.created_at) > lost_after:
                queue_advance(reconfiguration.pk)
        return allocation
    failed = mine.filter(status=RStatus.FAILED).order_by("-pk").first()
    done = list(mine.filter(status=RStatus.DONE).order_by("pk"))
    if failed is not None and done:
        return _undo_and_fail(allocation, failed, done)
    fences = pool_fences(pool.pk, besides=allocation.pk)
    choices = _choose(allocation, pool, [slot for fence in fences for slot in fence.slots])
    if choices is None:
        held = _held_for(allocation, pool, fences)
        if held is not None:
            what = f"{allocation.count} x {allocation.profile}"
            return enqueue_allocation(allocation, pool=pool, what=what, waiting_for=held_message(held))
        if rescue_with_moves(allocation):  # movable slices go to free instances elsewhere first (issue 14)
            return allocation
        return enqueue_allocation(allocation, pool=pool, what=f"{allocation.count} x {allocation.profile} on one node")
    to_change = [c for c in choices if c.plan.operations]
    if not to_change:
        return _claim(allocation, choices)
    if failed is not None:
        return fail_locked_allocation(
            allocation,
            f"Changing the MIG layout of {failed.gpu} for this request failed: {failed.error} "
            "The quota was given back.",
        )
    asked = [
        request_reconfiguration(
            gpu_id=choice.gpu.pk,
            operations=choice.plan.operations,
            reason=f"request #{allocation.pk}: {allocation.count} x {allocation.profile}",
            allocation_id=allocation.pk,
        )
        for choice in to_change  # node and GPU order (static_spread): one order for every request
    ]
    steps = sum(len(c.plan.operations) for c in to_change)
    allocation.status_message = (
        f"Waiting for a MIG layout change on {', '.join(str(c.gpu) for c in to_change)} ({steps} steps, "
        f"reconfiguration {', '.join(f'#{r.pk}' for r in asked)}); provisioning resumes when the node publishes it."
    )
    allocation.save(update_fields=["status_message", "updated_at"])
    return allocation


def _held_for(allocation: Allocation, pool: NodePool, fences: list[Fence]) -> Fence | None:
    """The lender's fence that alone keeps the request out: it would fit were the room not held."""
    if not fences:
        return None
    unfenced = _choose(allocation, pool, [])
    if unfenced is None:
        return None
    gpus = {choice.gpu.pk for choice in unfenced}
    return next((f for f in fences if any(slot.gpu in gpus for slot in f.slots)), fences[0])


def _choose(allocation: Allocation, pool: NodePool, fenced: list[HeldSlot]) -> list[StaticChoice] | None:
    """One GPU when free instances there fit, or when no spread over GPUs costs fewer operations; around the
    slots `fenced` for lenders (static_spread.choose_static_slices)."""
    return choose_static_slices(pool=pool, profile=allocation.profile, count=allocation.count, fenced=fenced)


def _claim(allocation: Allocation, choices: list[StaticChoice]) -> Allocation:
    slices = [s for choice in choices for s in choice.slices(allocation.profile)]
    uuids = {(c.gpu.pk, start): c.existing[start][0] for c in choices for _, start in c.plan.targets}
    start_claiming(allocation=allocation, slices=slices, audit={"pinned": [uuids[(s.gpu_id, s.start)] for s in slices]})
    for planned in slices:
        SlicePlacement.objects.filter(allocation=allocation, gpu_id=planned.gpu_id, start=planned.start).update(
            mig_uuid=uuids[(planned.gpu_id, planned.start)]
        )
    return allocation


def inverse(operations: list[Operation]) -> list[Operation]:
    """The plan that takes a GPU back: the steps reversed, creates destroyed and destroys created again (every
    intermediate layout is one the forward plan went through, so each is valid)."""
    return [
        Operation("destroy" if op.action == "create" else "create", op.profile, op.start) for op in reversed(operations)
    ]


def _undo_and_fail(allocation: Allocation, failed: MigReconfiguration, done: list[MigReconfiguration]) -> Allocation:
    """A spread whose reconfiguration of one GPU failed: ask for the others to be undone, then fail the request."""
    left: list[str] = []
    for reconfiguration in done:
        created = {op.start for op in operations_of(reconfiguration.plan) if op.action == "create"}
        held = SlicePlacement.objects.filter(
            gpu_id=reconfiguration.gpu_id, start__in=created, allocation__status__in=Allocation.QUOTA_HOLDING
        )
        if held.exists():
            left.append(f"{reconfiguration.gpu} (its new instances are in use)")
            continue
        try:
            request_reconfiguration(
                gpu_id=reconfiguration.gpu_id,
                operations=inverse(operations_of(reconfiguration.plan)),
                reason=f"undo reconfiguration #{reconfiguration.pk}: request #{allocation.pk} failed on another GPU",
            )
        except InvalidInput as exc:  # the GPU changed or is being changed again: leave it as it is (valid)
            left.append(f"{reconfiguration.gpu} ({'; '.join(m for ms in exc.errors.values() for m in ms)})")
    note = f" Left as they are: {', '.join(left)}." if left else ""
    return fail_locked_allocation(
        allocation,
        f"Changing the MIG layout of {failed.gpu} for this request failed: {failed.error} The other GPUs' changes "
        f"are being undone.{note} The quota was given back.",
    )
