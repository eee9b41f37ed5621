"""Reclaim with grace (issue 15): a lender's request waits for the slices it lent, and they come back when due.

- `wait_for_reclaim(allocation)`: at the placement step (each backend's, and each admission pass), a request
  within its tenant's guarantee whose cohort lent that guarantee away (`accounting.reclaim_shortfall`) waits in the
  queue while borrowed allocations are given notice for it (services/cohort_notices.py) and until they are gone.
- `reclaim_room_for(allocation)`: a request within guarantee queued because the pool has no room gives notice to
  other members' borrowed allocations in the pool: those whose release lets it be placed (slot-aware, fewest then
  youngest), else counted by their whole size. Called when it enters the queue (queue_entry.py), not on a
  later sweep, and again by each admission pass while it has no notice pending; a room held for it whose
  reclaimed allocations are all gone, and which it still did not fit, is let go first.
- `reclaim_borrowed(allocation_id)`: when `reclaim_at` has passed (the beat's minute sweep, or at once through the
  outbox for grace 0), the borrowed allocation is released and a copy of the request goes back to the queue with
  the place it had (its first `queued_at`, else its creation time): FIFO within its tenant is kept, while the
  fair order across tenants (queue_order.py) counts the usage it had. Its release makes room and asks for an
  admission pass; the lender is admitted by that pass, once (services/queue.py locks), ahead of the rest of the
  queue (`lenders_first`).

A lender withdrawn or admitted otherwise hands the notices a waiting lender's room needs to it, deadline kept, and
calls off the rest (cohort_handover.py; withdrawn: by a task after commit, which the due step leaves them to); a
lender failed calls them off; the due step checks the lender again under the lock, so a notice for a lender that
no longer waits is never carried out.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import F, Q, Subquery
from django.utils import timezone

from allocations.cohorts.accounting import Shortfall, reclaim_shortfall
from allocations.cohorts.members import member_state
from allocations.models import Allocation, Cohort, Quota
from allocations.services.cohort_notices import HANDOVER_TASK, RECLAIMABLE, clear_notice, drop_room, give_notice
from allocations.services.cohorts import held_quota
from allocations.services.compaction import rescue_applying
from allocations.services.locks import lock_allocation, lock_quota
from allocations.services.outbox import has_open_message
from allocations.services.requests import release_allocation
from tenants.services import record_audit_event

Status = Allocation.Status
WAITING = "its tenant's guarantee was lent in its cohort, and the borrowed slices are being taken back"
# The lender still needs what was lent while it is in one of these states.
LENDER_WAITING = (Status.APPROVED, Status.QUEUED)


def _cohort_quota(allocation: Allocation) -> Quota | None:
    quota = Quota.objects.select_related("cohort").filter(tenant_id=allocation.tenant_id, pool_id=allocation.pool_id)
    row = quota.order_by("pk").first()  # one row: not the default ordering's joins
    if row is None or row.cohort is None or row.cohort.pool_id != allocation.pool_id:
        return None
    return row


def _cohort_members(allocation: Allocation) -> tuple[Quota | None, list[Quota]]:
    """The request's quota row and its cohort's member rows in its pool (tenant order, its own among them) in one
    statement, so both come from one snapshot (it was two: the own row, then the members); (None, []) outside a
    cohort of the pool. Not kept for the rest of the try: the rows are not locked here, and a release or a new
    request of a member commits its quota change without the pool's lock (services/quotas.py)."""
    own_cohort = Quota.objects.filter(tenant_id=allocation.tenant_id, pool_id=allocation.pool_id).values("cohort_id")
    own_cohort = own_cohort.order_by()  # one row (unique per tenant and pool): no join for the default ordering
    rows = list(
        Quota.objects.select_related("cohort")
        .filter(pool_id=allocation.pool_id, cohort__pool_id=allocation.pool_id, cohort_id__in=Subquery(own_cohort))
        .order_by("tenant_id")
    )
    return next((q for q in rows if q.tenant_id == allocation.tenant_id), None), rows


def _borrows(allocation: Allocation) -> bool:
    return bool(allocation.borrowed_compute_slices or allocation.borrowed_memory_slices)


def _pending(allocation: Allocation) -> bool:
    return Allocation.objects.filter(reclaimed_for=allocation, status__in=Allocation.QUOTA_HOLDING).exists()


@dataclass(frozen=True)
class ReclaimCheck:
    """`check_reclaim`'s answer. `read`: it read the request's quota row (`quota`: with its cohort, None outside a
    cohort of the pool); a request that borrows is answered without a read."""

    waits: bool
    read: bool
    quota: Quota | None


# The admission pass's try in progress in this thread, if any (`within_pass_try`): its request and the pass's check.
_PASS_TRY: ContextVar[tuple[int, ReclaimCheck] | None] = ContextVar("pass_try", default=None)


@contextmanager
def within_pass_try(allocation: Allocation, check: ReclaimCheck) -> Iterator[None]:
    """The admission pass's try of `allocation` (services/queue.py), inside its savepoint, `check` its check_reclaim
    made just before. Within it, for that request (issue 14):
    - the placement step's wait_for_reclaim answers with the check (it read the rows in the same transaction, under
      the same locks, and the try changed none of them since: a request that borrows is asked again, as
      services/cohorts.borrow_again may have found it borrows nothing now);
    - reclaim_room_for gives no notice: it runs there only when the request is queued again, and such a try is
      rolled back, notices and all; the pass asks once after the rollback, with the check's quota row."""
    token = _PASS_TRY.set((allocation.pk, check))
    try:
        yield
    finally:
        _PASS_TRY.reset(token)


def _pass_try_of(allocation: Allocation) -> ReclaimCheck | None:
    current = _PASS_TRY.get()
    return current[1] if current is not None and current[0] == allocation.pk else None


def wait_for_reclaim(allocation: Allocation) -> bool:
    """True: the request must wait for borrowed slices to come back (notices given now or before). Caller holds
    the allocation's lock and its pool's. The request's quota is charged already (approval), so the shortfall is
    what its own charge adds to the cohort's overdraft."""
    checked = _pass_try_of(allocation)
    if checked is not None and checked.read:
        return checked.waits
    return check_reclaim(allocation).waits


def check_reclaim(allocation: Allocation) -> ReclaimCheck:
    """wait_for_reclaim, with the quota row it read, for the admission pass (services/queue.py): the placement step
    and `reclaim_room_for` use it instead of reading it again (issue 14). Safe within one try: same transaction,
    same locks (the pass's quota rows are locked at both reads or at neither: services/locks.PassQuotas), and the
    try changes the row only in a savepoint that is rolled back before the row is used again."""
    if _borrows(allocation):
        return ReclaimCheck(waits=False, read=False, quota=None)  # one that borrows never reclaims (Kueue's rule)
    quota, rows = _cohort_members(allocation)
    if quota is None or quota.cohort is None:
        return ReclaimCheck(waits=False, read=True, quota=None)
    return ReclaimCheck(waits=_must_wait(allocation, quota.cohort, rows), read=True, quota=quota)


def _must_wait(allocation: Allocation, cohort: Cohort, rows: list[Quota]) -> bool:
    compute, memory = held_quota(allocation)
    members = [
        member_state(q, less_compute=compute, less_memory=memory)
        if q.tenant_id == allocation.tenant_id
        else member_state(q)
        for q in rows
    ]
    need = reclaim_shortfall(members, allocation.tenant_id, compute, memory)
    if not need.any:
        return False
    if _pending(allocation):
        return True
    # Nothing left to take back (every borrowed slice already under notice for another lender, or none runs):
    # waiting would be for ever, so the request goes on as any other; the cohort balances as those come back.
    return bool(give_notice(lender=allocation, cohort=cohort, need=need, whole=False))


def reclaim_room_for(allocation: Allocation, *, checked: ReclaimCheck | None = None) -> int:
    """A request within guarantee waits for room in a full pool: notice to other members' borrowed allocations
    there whose release makes a layout it fits (cohort_notices._choose); when no choice does, enough slices by
    count (the layout they free may still not fit, and then the next pass asks again). How many were marked.
    Caller holds the allocation's lock (and the pool's). `checked`: the admission pass's check_reclaim of this
    try, whose quota row (locked by the pass, the try rolled back) is used instead of reading it again."""
    if _borrows(allocation) or _pass_try_of(allocation) is not None:
        return 0  # one that borrows never reclaims; within a pass's try: rolled back if it runs (within_pass_try)
    pending = _pending(allocation)
    if allocation.reclaim_room and not pending and not rescue_applying(allocation):
        # Everything taken back (or moved) for it is gone and it still did not fit (a node left, say): its room
        # holds nothing it can use, so other requests may have it again (allocations/cohorts/fence.py).
        drop_room(allocation)
    quota = checked.quota if checked is not None and checked.read else _cohort_quota(allocation)
    if quota is None or quota.cohort is None or pending or rescue_applying(allocation):
        return 0  # notices or moves for it under way
    if quota.compute_slices_used > quota.compute_slices_limit or quota.memory_slices_used > quota.memory_slices_limit:
        return 0  # beyond its guarantee (a limit lowered meanwhile): no claim on what it lent
    need = Shortfall(compute=allocation.compute_slices, memory=allocation.memory_slices)
    return len(give_notice(lender=allocation, cohort=quota.cohort, need=need, whole=True))


def lenders_first(queue: list[Allocation]) -> list[Allocation]:
    """The admission order with lenders whose notices were carried out (or whose borrowers left meanwhile) first:
    the room a reclaim frees is theirs, not the next queued request's (else, e.g., the reclaimed request's own
    copy borrows it again and the lender needs a second round). The rest keep their order."""
    if not queue:
        return queue
    served = set(
        Allocation.objects.filter(reclaimed_for__in=[a.pk for a in queue], reclaim_at__isnull=False)
        .exclude(status__in=RECLAIMABLE)
        .values_list("reclaimed_for_id", flat=True)
    )
    return [a for a in queue if a.pk in served] + [a for a in queue if a.pk not in served]


@transaction.atomic
def reclaim_borrowed(*, allocation_id: int, now: datetime | None = None) -> str:
    """Take one borrowed allocation back if its notice is due. Returns "reclaimed", "cancelled" (its lender no
    longer waits) or "unchanged" (not due, not running, no notice). Idempotent: locks the allocation first; a
    second run finds it RELEASING and its notice spent."""
    now = now or timezone.now()
    allocation = lock_allocation(allocation_id=allocation_id)
    if allocation.reclaim_at is None or allocation.status not in RECLAIMABLE:
        return "unchanged"
    lender = allocation.reclaimed_for
    if lender is not None and lender.status not in LENDER_WAITING and has_open_message(HANDOVER_TASK, lender.pk):
        return "unchanged"  # withdrawn: its notices are handed over to a waiting lender that needs them, or called off
    if lender is None or lender.status not in LENDER_WAITING:
        clear_notice(allocation, why="the request it was taken back for no longer waits")
        return "cancelled"
    if allocation.reclaim_at > now:
        return "unchanged"
    copy = _requeue_copy(allocation)
    release_allocation(
        allocation_id=allocation.pk,
        actor=None,
        reason=f"Borrowed slices taken back for request #{lender.pk}; request #{copy.pk} waits in the queue.",
    )
    record_audit_event(
        actor=None,
        verb="reclaim",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        after={"for": lender.pk, "requeued_as": copy.pk},
    )
    return "reclaimed"


def _requeue_copy(allocation: Allocation) -> Allocation:
    """The reclaimed request again, QUEUED, holding its part within the guarantee (its borrowed part is borrowed
    again at admission, services/cohorts.py), with the place in the queue it first had."""
    copy = Allocation.objects.create(
        tenant_id=allocation.tenant_id,
        pool_id=allocation.pool_id,
        requested_by_id=allocation.requested_by_id,
        profile=allocation.profile,
        count=allocation.count,
        lease_hours=allocation.lease_hours,
        purpose=allocation.purpose,
        compute_slices=allocation.compute_slices,
        memory_slices=allocation.memory_slices,
        memory_mib=allocation.memory_mib,
        thread_percentage=allocation.thread_percentage,
        movable=allocation.movable,
        namespace_name=allocation.namespace_name,
        priority=allocation.priority,
        auto_approved=allocation.auto_approved,
        decided_by_id=allocation.decided_by_id,
        decided_at=allocation.decided_at,
        borrowed_compute_slices=allocation.borrowed_compute_slices,
        borrowed_memory_slices=allocation.borrowed_memory_slices,
        status=Status.QUEUED,
        queued_at=allocation.queued_at or allocation.created_at,
        status_message=(
            f"Back in {allocation.pool.name}'s queue: request #{allocation.pk} ran on borrowed slices, taken back "
            "for a tenant that lent them. It starts again when the cohort lends again or room frees up."
        ),
    )
    compute, memory = held_quota(copy)
    quota = lock_quota(tenant_id=copy.tenant_id, pool_id=copy.pool_id)
    if quota is not None:
        Quota.objects.filter(pk=quota.pk).update(
            compute_slices_used=F("compute_slices_used") + compute, memory_slices_used=F("memory_slices_used") + memory
        )
    record_audit_event(
        actor=None,
        verb="queue",
        obj=copy,
        tenant_id=copy.tenant_id,
        after={"status": Status.QUEUED, "pool": allocation.pool.slug, "requeued_from": allocation.pk},
    )
    return copy


def due_reclaims(*, now: datetime | None = None) -> list[int]:
    """The beat's sweep: ids of borrowed allocations whose notice is due (or whose lender stopped waiting)."""
    now = now or timezone.now()
    lender_gone = Q(reclaimed_for__isnull=True) | ~Q(reclaimed_for__status__in=LENDER_WAITING)
    due = Allocation.objects.filter(status__in=RECLAIMABLE, reclaim_at__isnull=False)
    return list(due.filter(Q(reclaim_at__lte=now) | lender_gone).order_by("pk").values_list("pk", flat=True))


def reclaim_due_borrowed(*, now: datetime | None = None) -> dict[str, int]:
    """Run `reclaim_borrowed` for every due one, each in its own transaction; counts per outcome."""
    counts: dict[str, int] = {}
    for pk in due_reclaims(now=now):
        outcome = reclaim_borrowed(allocation_id=pk, now=now)
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts
