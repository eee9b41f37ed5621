"""An admin's "retry" for a request whose work is overdue (issue 16): its task is sent again, and the audit says who.

The beat's sweeps do the same on their own (services/outbox.py, services/requeue.py); this is for the admin who
sees a request waiting and does not want to wait for the next sweep, or whose outbox row was given up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction

from allocations.models import Allocation
from allocations.selectors import is_overdue
from allocations.services.locks import lock_allocation
from allocations.services.outbox import enqueue_task
from allocations.services.requeue import TASK_FOR
from tenants.errors import DomainError, NotAllowed
from tenants.services import record_audit_event

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class NotOverdue(DomainError):
    """Nothing to retry: the request is not waiting on a task, or not for long enough yet."""

    status = 409
    code = "not_overdue"


@transaction.atomic
def retry_allocation_work(*, allocation_id: int, actor: User) -> Allocation:
    """Send the overdue request's task again (provision, claim poll or teardown, by its status). Platform admins
    only. Changes no state: the task decides under the allocation's lock what is left. Locks the allocation, so
    the status read is the one the task will see. Raises NotAllowed or NotOverdue."""
    if not actor.is_staff:
        raise NotAllowed("Only platform admins can retry a request's work.")
    allocation = lock_allocation(allocation_id=allocation_id)
    if not is_overdue(allocation):
        raise NotOverdue(
            f"Request #{allocation.pk} is {allocation.status} and not overdue: only a request approved, provisioning "
            f"or releasing for more than {settings.FATIA_OUTBOX_RESEND_S} s can be retried."
        )
    task_name = TASK_FOR[Allocation.Status(allocation.status)]
    enqueue_task(task_name, allocation.pk)
    record_audit_event(
        actor=actor,
        verb="retry",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        before={"status": allocation.status},
        after={"status": allocation.status, "task": task_name.rsplit(".", 1)[-1]},
    )
    return allocation
