"""A queued request's priority inside its tenant (issue 15): set by the tenant's managers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction

from allocations.models import Allocation
from allocations.services.locks import lock_allocation
from tenants.errors import InvalidInput, InvalidTransition, NotAllowed
from tenants.selectors import can_manage_tenant
from tenants.services import record_audit_event

if TYPE_CHECKING:
    from django.contrib.auth.models import User

Status = Allocation.Status

# A small range keeps priorities a tool for managers, not an arms race; SmallIntegerField holds it.
PRIORITY_MIN = -100
PRIORITY_MAX = 100
PRIORITY_STATES = (Status.PENDING, Status.APPROVED, Status.QUEUED)


@transaction.atomic
def set_allocation_priority(*, allocation_id: int, priority: int, actor: User) -> Allocation:
    """Set the order of a request inside its tenant's queue (higher first). Only tenant managers (and admins);
    only before it starts (PENDING, APPROVED or QUEUED). Locks the allocation. Raises NotAllowed, InvalidInput,
    InvalidTransition."""
    allocation = lock_allocation(allocation_id=allocation_id)
    if not can_manage_tenant(actor, allocation.tenant_id):
        raise NotAllowed("Only a manager of the tenant can set a request's priority.")
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise InvalidInput({"priority": [f"Priority is a whole number from {PRIORITY_MIN} to {PRIORITY_MAX}."]})
    if allocation.status not in PRIORITY_STATES:
        raise InvalidTransition(
            current=allocation.status,
            target="reprioritised",
            message=f"Request #{allocation.pk} is {allocation.get_status_display().lower()}: a priority orders only "
            "requests that have not started (pending, approved or queued).",
        )
    before = allocation.priority
    allocation.priority = priority
    allocation.save(update_fields=["priority", "updated_at"])
    record_audit_event(
        actor=actor,
        verb="set_priority",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        before={"priority": before},
        after={"priority": priority},
    )
    return allocation
