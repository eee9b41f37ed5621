"""Requests whose task was lost: queue the task again (every task is idempotent).

A request stays APPROVED, PROVISIONING or RELEASING only while a task works on it. When the message is lost (a
worker killed before it acknowledged, a broker restart without persistence) or the task ran out of retries, the
request would hold its quota for good. The beat's outbox sweep (tasks.sweep_outbox_task) calls
`sweep_stuck_requests` every FATIA_OUTBOX_SWEEP_S on every backend, without asking the cluster anything, so it runs
while the API server is unreachable too. A request whose work still has an open outbox row is left to the outbox's
own resend (services/outbox.py); this catches what the outbox does not track: chained tasks a worker queues itself
(the claim poll after a provisioning, a re-plan) and work marked done whose request is still not through.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from allocations.models import Allocation
from allocations.services.outbox import enqueue_task, has_open_message

Status = Allocation.Status


@dataclass(frozen=True, slots=True)
class StuckAfter:
    """How long a request may stay in each working state before its task counts as lost."""

    approved: timedelta
    provisioning: timedelta
    releasing: timedelta


def requeue_stuck_requests(*, stuck_after: StuckAfter, now: datetime | None = None) -> list[int]:
    """Queue (through the outbox) the task of every request that outlived `stuck_after` in its state and has no
    outbox row open for it; returns their ids.

    Changes no request: the task that runs decides, under the allocation's lock, whether anything is left to do.
    """
    now = now or timezone.now()
    work = (
        (Status.APPROVED, stuck_after.approved, TASK_FOR[Status.APPROVED]),
        (Status.PROVISIONING, stuck_after.provisioning, TASK_FOR[Status.PROVISIONING]),
        (Status.RELEASING, stuck_after.releasing, TASK_FOR[Status.RELEASING]),
    )
    requeued: list[int] = []
    with transaction.atomic():
        for status, after, task_name in work:
            stuck = Allocation.objects.filter(status=status, updated_at__lt=now - after).order_by("pk")
            for pk in stuck.values_list("pk", flat=True):
                if not has_open_message(task_name, pk):
                    enqueue_task(task_name, pk)
                    requeued.append(pk)
    return requeued


# The task that moves a request on from each working state.
TASK_FOR = {
    Status.APPROVED: "allocations.tasks.provision_allocation_task",
    Status.PROVISIONING: "allocations.tasks.await_claim_allocation_task",
    Status.RELEASING: "allocations.tasks.teardown_allocation_task",
}


def stuck_after_now() -> StuckAfter:
    """The limits from FATIA_STUCK_REQUEST_S. On Kubernetes a claim may wait for the scheduler up to
    FATIA_KUBE_ALLOCATION_TIMEOUT_S while its poll task runs, so PROVISIONING counts as stuck only past that too."""
    limit = timedelta(seconds=settings.FATIA_STUCK_REQUEST_S)
    provisioning = limit
    if settings.FATIA_CLUSTER_BACKEND == "kubernetes":
        provisioning += timedelta(seconds=settings.FATIA_KUBE_ALLOCATION_TIMEOUT_S)
    return StuckAfter(approved=limit, provisioning=provisioning, releasing=limit)


def sweep_stuck_requests(*, now: datetime | None = None) -> list[int]:
    """The beat's pass on every backend: requeue requests whose task was lost (see the module docstring)."""
    return requeue_stuck_requests(stuck_after=stuck_after_now(), now=now)
