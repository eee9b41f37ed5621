"""Room may have freed up in a pool: ask for one admission pass of its queue (issue 15, services/queue.py).

Its own module so that the end states (services/lifecycle.py) and the fleet's changes can call it without
importing the queue's entry, which itself ends requests that can never fit.
"""

from __future__ import annotations

from allocations.models import Allocation
from allocations.services.outbox import enqueue_task

ADMIT_TASK = "allocations.tasks.admit_queued_task"


def request_admission(*, pool_id: int) -> bool:
    """When requests wait in the pool's queue, queue one admission pass through the outbox (sent after commit; the
    task is idempotent, so two passes for one release admit nothing twice). True when one was queued. A request
    that joins the queue while this commits is caught by the beat's safety sweep (FATIA_QUEUE_SWEEP_S)."""
    if not Allocation.objects.filter(pool_id=pool_id, status=Allocation.Status.QUEUED).exists():
        return False
    enqueue_task(ADMIT_TASK, pool_id)
    return True
