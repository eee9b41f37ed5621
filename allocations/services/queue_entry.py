"""A request joins its pool's queue, and room that frees up asks for an admission pass (issue 15).

Kept apart from the admission pass (services/queue.py) because the provisioning backends call in here at their
"no room" point, while the admission pass calls those backends: one direction of import each.
"""

from __future__ import annotations

from django.utils import timezone

from allocations.models import Allocation, NodePool
from allocations.services.outbox import enqueue_task
from tenants.services import record_audit_event

Status = Allocation.Status

ADMIT_TASK = "allocations.tasks.admit_queued_task"


def enqueue_allocation(allocation: Allocation, *, pool: NodePool, what: str) -> Allocation:
    """APPROVED -> QUEUED: no layout of the pool fits the request now. The quota stays held (docs/queue.md), so
    admission never fails on quota. `queued_at` is kept when the request had waited before (a request put back
    after a failed admission keeps its place). The caller holds the allocation's and the pool's locks."""
    previous = allocation.status
    allocation.status = Status.QUEUED
    allocation.queued_at = allocation.queued_at or timezone.now()
    allocation.status_message = (
        f"Waiting in {pool.name}'s queue: no free layout fits {what} right now. It starts as soon as a release, "
        "an expiry or a new node makes room; the quota stays held meanwhile."
    )
    allocation.save(update_fields=["status", "queued_at", "status_message", "updated_at"])
    record_audit_event(
        actor=None,
        verb="queue",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        before={"status": previous},
        after={"status": Status.QUEUED, "pool": pool.slug},
    )
    return allocation


def request_admission(*, pool_id: int) -> bool:
    """Room may have freed up in the pool: when requests wait there, queue one admission pass through the outbox
    (sent after commit; the task is idempotent, so two passes for one release admit nothing twice). True when
    one was queued. A request that joins the queue while this commits is caught by the beat's safety sweep."""
    if not Allocation.objects.filter(pool_id=pool_id, status=Status.QUEUED).exists():
        return False
    enqueue_task(ADMIT_TASK, pool_id)
    return True
