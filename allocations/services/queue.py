"""Admission from a pool's queue (issue 15): the one entry point that admits what now fits.

`admit_queued(pool_id=...)` runs when room may have freed up: a release or an expiry finished, a failure's slots
were cleaned up, a node joined or came back (services/queue_entry.request_admission queues it through the outbox),
and from the beat's slow safety sweep. It is not a sweep itself: nothing waits on a timer to be admitted.

The pass goes through the queue in admission order (queue_state.queued_in_order: fair across tenants, priority
then FIFO within one) and tries each request with the backend's own placement step (services/provisioning.
start_allocation), each inside a savepoint: a request that still does not fit is rolled back to exactly what it
was, one that fits is placed as a fresh request would be, with the starvation bound (queue_reservation) applied
the same way. A request that does not fit is skipped, not waited for: smaller ones behind it may go (backfill),
until it has waited past the bound and its node is reserved.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from allocations.admission.hold import is_due, is_held
from allocations.admission.outcomes import PassHistory, read_once_per_pass
from allocations.models import Allocation, Cohort, NodePool
from allocations.placement import PoolBusy
from allocations.queue_state import queued_in_order
from allocations.services.admission import end_hold, keep_hold
from allocations.services.cohort_handover import hand_over_admitted
from allocations.services.cohort_reclaim import (
    ReclaimCheck,
    check_reclaim,
    lenders_first,
    reclaim_room_for,
    within_pass_try,
)
from allocations.services.cohorts import borrow_again
from allocations.services.locks import PassQuotas, lock_pool, pass_quotas, quotas_at_first_lock
from allocations.services.outbox import enqueue_task
from allocations.services.provisioning import start_allocation
from tenants.services import record_audit_event

Status = Allocation.Status
HoldOutcome = Allocation.HoldOutcome

PROVISION_TASK = "allocations.tasks.provision_allocation_task"


@transaction.atomic
def admit_queued(*, pool_id: int) -> list[Allocation]:
    """QUEUED -> ACTIVE (simulated) or PROVISIONING (Kubernetes; the provision task applies the claim after
    commit) for every queued request of the pool that fits now, in admission order; the admitted, in that order.

    Idempotent and safe to run concurrently: it locks the pool's queued requests (pk order), then the pool, so two
    passes run one after the other and the second finds the first's admissions no longer QUEUED; in a pool with
    cohorts, its queued tenants' quota rows (pk order) when a try first needs one (services/locks.PassQuotas),
    before any try locks a cohort row. It tries only the requests it holds locked: one queued after its first lock
    is taken without waiting (another transaction may be withdrawing it) or left to the next pass, so a request
    withdrawn meanwhile is never admitted.
    """
    queue = lock_queue(pool_id=pool_id)
    if queue is None:
        return []
    if not queue.has_cohorts:
        return try_queued(queue)
    with quotas_at_first_lock(pool_id=pool_id, tenant_ids={a.tenant_id for a in queue.queued}):
        return try_queued(queue)


@dataclass(frozen=True)
class LockedQueue:
    """A pool's queue as an admission pass holds it: the pool (locked), the queued requests it holds locked, and
    those of them still QUEUED in admission order."""

    pool: NodePool
    locked: set[int]
    queued: list[Allocation]
    has_cohorts: bool


def lock_queue(*, pool_id: int) -> LockedQueue | None:
    """The pass's first step: the pool's queued requests (pk order), then the pool; None when nothing is queued.
    Caller is in a transaction (admit_queued; bench/pass_quota_locks.py calls the steps one by one, with the quota
    rows taken at the first lock, before the first try as in session 13, or not at all)."""
    locked = set(
        Allocation.objects.select_for_update(no_key=True, of=("self",))
        .filter(pool_id=pool_id, status=Status.QUEUED)  # the status read under the lock (re-checked after a wait)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    if not locked:
        return None
    pool = lock_pool(pool_id=pool_id)
    # Queued since: after the pool, out of the documented order, so SKIP LOCKED (never waits: cannot deadlock). One that
    # another transaction holds is not tried: unlocked, a withdrawal could commit before its try, which would then
    # update the withdrawn row back to APPROVED and admit it (a try's update is by pk alone).
    locked |= set(
        Allocation.objects.select_for_update(no_key=True, of=("self",), skip_locked=True)
        .filter(pool_id=pool_id, status=Status.QUEUED)
        .exclude(pk__in=locked)
        .values_list("pk", flat=True)
    )
    queued = [a for a in queued_in_order(pool) if a.pk in locked]  # read under the locks: only what is still QUEUED
    has_cohorts = Cohort.objects.filter(pool_id=pool_id).exists()  # stable under the pool lock (create_cohort takes it)
    return LockedQueue(pool=pool, locked=locked, queued=queued, has_cohorts=has_cohorts)


def try_queued(queue: LockedQueue) -> list[Allocation]:
    """The pass's tries, in admission order (lenders first); the admitted, in that order."""
    pool, admitted = queue.pool, []
    # The pool's hold outcomes, churn and held requests: read once for the pass's tries, kept current by it (issue 14).
    with read_once_per_pass(pool) as history:
        for allocation in lenders_first(queue.queued):
            check = check_reclaim(allocation)
            if check.waits:
                continue  # a lender whose lent guarantee is being taken back (issue 15): notices given outside the try
            placed, left_queued = _try_admit(allocation, pool, history, queue.locked, check)
            if placed is not None:
                admitted.append(placed)
            elif not pool.is_shared and not is_held(allocation):  # a held request fits: no reclaim (issue 14)
                # Within guarantee in a full pool: borrowed slices of the cohort make room. The check's quota row is
                # still right after a rollback (cohort_reclaim.check_reclaim); a try that settled otherwise changed it.
                reclaim_room_for(allocation, checked=check if left_queued else None)
    return admitted


def _try_admit(
    allocation: Allocation, pool: NodePool, history: PassHistory, locked: set[int], check: ReclaimCheck
) -> tuple[Allocation | None, bool]:
    """Place one queued request, or leave it exactly as it was (savepoint rolled back). The admitted request or
    None, and whether it was left queued by a rollback. `history` (the pass's hold history) learns whether it is held
    afterwards; while it is tried it is not, so it does not count against itself. `locked`: the queued requests the
    pass holds (the only ones its notices may be handed to). `check`: the pass's check_reclaim of it just now."""
    quotas = pass_quotas()  # its quota rows, if not yet taken, are taken at the try's first quota or cohort lock
    taken = quotas is None or quotas.taken
    savepoint = transaction.savepoint()
    # Tried as a fresh request: not held while it is placed (or forced); a try that holds it again sets it again.
    Allocation.objects.filter(pk=allocation.pk).update(status=Status.APPROVED, held=False)
    history.set_held(allocation, held=False)
    if not borrow_again(allocation):  # its borrowed part, given back while queued, is no longer lent (issue 15)
        _roll_back(savepoint, quotas, taken)
        history.set_held(allocation, held=is_held(allocation))
        return None, True
    try:  # reads the layout and demand once (read_once_per_try), and the reclaim rows not again (within_pass_try)
        with within_pass_try(allocation, check):
            placed = start_allocation(allocation_id=allocation.pk)
    except PoolBusy:
        placed = None  # fits only next to claims still being allocated: the next pass sees them settled
    if placed is None or placed.status == Status.QUEUED:
        _roll_back(savepoint, quotas, taken)
        if placed is not None:
            keep_hold(queued=allocation, tried=placed)  # a hold's deadline and reason outlive the rollback (issue 14)
        history.set_held(allocation, held=is_held(allocation))  # as the rollback (and keep_hold) left it
        return None, True
    transaction.savepoint_commit(savepoint)
    if placed.status == Status.FAILED:
        return None, False  # its pool can no longer ever hold it (a node left): failed with why, its quota given back
    if placed.status == Status.APPROVED:
        # Not admitted yet: a rescue's moves make room for it first (services/compaction.rescue_with_moves), and
        # the plan's end provisions it; its notices, and the room held for it, stay until then.
        return None, False
    now = timezone.now()
    waited = (now - allocation.queued_at).total_seconds() if allocation.queued_at else 0.0
    forced = {"forced_after_hold": True} if is_due(allocation, now=now) else {}  # held its bound (issue 14)
    end_hold(placed, outcome=HoldOutcome.FORCED if forced else HoldOutcome.PLACED, now=now)  # if it was held
    record_audit_event(
        actor=None,
        verb="admit",
        obj=placed,
        tenant_id=placed.tenant_id,
        before={"status": Status.QUEUED},
        after={"status": placed.status, "pool": pool.slug, "waited_s": round(waited, 1), **forced},
    )
    # Its notices go to a waiting lender the pass holds whose room they make (deadline kept), else are called off
    # (issue 15); all or none: after commit if another transaction holds one of their allocations.
    hand_over_admitted(placed, among=locked)
    if placed.status != Status.ACTIVE:
        enqueue_task(PROVISION_TASK, placed.pk)  # Kubernetes: apply the claim and holder pod, then watch them
    return placed, False


def _roll_back(savepoint: str, quotas: PassQuotas | None, taken: bool) -> None:
    """Roll a try back. Quota rows first taken within it are no longer locked (PostgreSQL releases the row locks a
    rolled-back savepoint took): the pass takes them again when it next needs one."""
    transaction.savepoint_rollback(savepoint)
    if quotas is not None and not taken:
        quotas.taken = False


def admit_all_queued() -> dict[int, int]:
    """The beat's safety sweep: one admission pass per pool with a queue (room freed without an event, e.g. a
    request that joined the queue while a release committed). Per pool, how many were admitted."""
    pools = Allocation.objects.filter(status=Status.QUEUED).values_list("pool_id", flat=True).distinct().order_by()
    return {pool_id: len(admit_queued(pool_id=pool_id)) for pool_id in sorted(set(pools))}
