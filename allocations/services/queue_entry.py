"""A request joins its pool's queue (issue 15), or fails when no layout of the pool could ever hold it.

Kept apart from the admission pass (services/queue.py) because the provisioning backends call in here at their
"no room" point, while the admission pass calls those backends: one direction of import each.
"""

from __future__ import annotations

from django.utils import timezone

from allocations.models import Allocation, NodePool
from allocations.placement import empty_pool_fleet
from allocations.queue_eta import never_fits
from allocations.services.cohort_reclaim import reclaim_room_for
from allocations.services.cohorts import return_borrowed_part
from allocations.services.lifecycle import fail_locked_allocation
from tenants.services import record_audit_event

Status = Allocation.Status


def enqueue_allocation(
    allocation: Allocation, *, pool: NodePool, what: str, waiting_for: str = "", held: bool = False
) -> Allocation:
    """APPROVED -> QUEUED: no layout of the pool fits the request now. The quota stays held (docs/queue.md), so
    admission never fails on quota. `queued_at` is kept when the request had waited before (a request put back
    after a failed admission keeps its place). A request that no layout of the pool could hold even with every GPU
    free is not queued for ever: it fails, its quota given back. The caller holds the allocation's and the pool's
    locks. `waiting_for` replaces "no free layout fits" in the message: room held for a booking or a starving
    request (queue_reservation.reservation_blocker), or a lender waiting for borrowed slices to come back (issue 15).
    A request that borrowed gives its borrowed part back while it waits (services/cohorts.py). `held`: it waits by
    the pool's choice (services/admission.hold_allocation, issue 14); any other wait clears the mark, in the same
    save as the status."""
    why = never_fits(
        empty_pool_fleet(pool),
        pool_name=pool.name,
        pool=pool.slug,
        profile=allocation.profile,
        count=allocation.count,
        what=what,
    )
    if why is not None:  # the pool shrank since it was approved (a request made so is refused: services/requests.py)
        return fail_locked_allocation(
            allocation, f"{why}; the quota was given back. Try fewer slices or a smaller profile."
        )
    previous = allocation.status
    return_borrowed_part(allocation)
    allocation.status = Status.QUEUED
    allocation.held = held
    allocation.queued_at = allocation.queued_at or timezone.now()
    allocation.status_message = (
        f"Waiting in {pool.name}'s queue: {waiting_for or f'no free layout fits {what} right now'}. It starts as soon "
        "as a release, an expiry or a new node makes room; the quota stays held meanwhile."
    )
    if allocation.borrowed_compute_slices or allocation.borrowed_memory_slices:
        allocation.status_message += " Its borrowed part is borrowed again from the cohort when it starts."
    allocation.save(update_fields=["status", "held", "queued_at", "status_message", "updated_at"])
    record_audit_event(
        actor=None,
        verb="queue",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        before={"status": previous},
        after={"status": Status.QUEUED, "pool": pool.slug, **({"held": True} if held else {})},
    )
    if not waiting_for:
        reclaim_room_for(allocation)  # within guarantee: borrowed slices of its cohort make room (issue 15)
    return allocation
