"""Admission's state changes (issue 14): a request held, a hold kept across the pass's rollback, how a hold ended,
and which pools hold a request that has waited its bound (due.py starts their passes).

Lock order (services/locks.py): the admission pass locks the pool's queued requests, then the pool; the placement
steps the allocation, then the pool. `hold_allocation` runs inside them; `admit_due_holds` only starts passes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.utils import timezone

from allocations.admission.hold import Hold, is_held
from allocations.admission.outcomes import note_hold_ended
from allocations.models import Allocation, NodePool
from allocations.services.queue_entry import enqueue_allocation
from tenants.services import record_audit_event

if TYPE_CHECKING:
    from datetime import datetime

Status = Allocation.Status
HoldOutcome = Allocation.HoldOutcome


def hold_allocation(allocation: Allocation, *, pool: NodePool, what: str, hold: Hold) -> Allocation:
    """APPROVED -> QUEUED, held (`Allocation.held`, saved with the status): it fits only where it would strand more
    than the pool's policy accepts. Keeps the first hold's deadline (`held_until`), so passes do not push it back.
    The caller holds the allocation's and the pool's locks (a placement step). Audited `hold` the first time."""
    first = allocation.held_until is None
    allocation.held_until = hold.until
    allocation.save(update_fields=["held_until"])
    if first:
        _audit_hold(allocation, pool=pool, hold=hold.until)
    return enqueue_allocation(allocation, pool=pool, what=what, waiting_for=hold.reason, held=True)


def keep_hold(*, queued: Allocation, tried: Allocation) -> bool:
    """After an admission pass rolled a try back (services/queue.py): keep what the try learnt about a hold, which
    the rollback undid: the deadline of a request held for the first time (else every pass would hold it anew and
    it would never be forced), whether it is held now (a forced one that no longer fits waits for room instead) and
    its current reason (what it would strand, or that it now waits for room). True when the try held it (then it
    waits by choice, not for room: no reclaim is sought for it)."""
    if tried.held_until is None:
        return False
    now = timezone.now()
    learnt = (tried.held_until, tried.held, tried.status_message)
    if learnt != (queued.held_until, queued.held, queued.status_message):
        if queued.held and not tried.held:  # retried or forced, it no longer fits: waits for room from now
            end_hold(queued, outcome=HoldOutcome.LOST, now=now)
        Allocation.objects.filter(pk=queued.pk).update(
            held_until=tried.held_until, held=tried.held, status_message=tried.status_message, updated_at=now
        )
        if queued.held_until is None:
            _audit_hold(queued, pool=queued.pool, hold=tried.held_until)
        queued.held_until, queued.held, queued.status_message = learnt
    return is_held(tried)


def end_hold(allocation: Allocation, *, outcome: HoldOutcome, now: datetime) -> None:
    """Record how a held request's hold ended (`hold_outcome`, `hold_ended_at`), in the transaction that ends it:
    placed on a retry, placed forced at its deadline, or lost (it no longer fits and waits for room: with no room
    to wait for, the bench's held request is lost). The first end only: a lost request placed later stays lost.
    The pool's hold policy prices its next holds of the profile by these (allocations/admission/outcomes.py)."""
    if allocation.held_until is None or allocation.hold_outcome:
        return
    Allocation.objects.filter(pk=allocation.pk, hold_outcome="").update(hold_outcome=outcome, hold_ended_at=now)
    allocation.hold_outcome, allocation.hold_ended_at = outcome, now
    note_hold_ended(allocation, outcome=outcome)  # the admission pass in progress reads its outcomes once


def _audit_hold(allocation: Allocation, *, pool: NodePool, hold: datetime) -> None:
    record_audit_event(
        actor=None,
        verb="hold",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        before={"status": Status.APPROVED},
        after={"status": Status.QUEUED, "pool": pool.slug, "held_until": hold.isoformat()},
    )


def pools_with_due_holds(*, now: datetime | None = None) -> list[int]:
    """Pools where a held request has waited its bound: the beat starts their admission pass (forced there)."""
    due = Allocation.objects.filter(held=True, held_until__lte=now or timezone.now())
    return sorted(set(due.values_list("pool_id", flat=True).order_by()))
