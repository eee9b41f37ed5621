"""Requests whose task was lost: queue the task again (every task is idempotent).

A request stays APPROVED, PROVISIONING or RELEASING only while a task works on it. When the message is lost (a
worker killed before it acknowledged, a broker restart without persistence) or the task ran out of retries, the
request would hold its quota for good. Both backends' beat passes call this sweep: the Kubernetes reconcile
(cluster/reconcile.py) and, for the simulated backend, `sweep_stuck_requests` below.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

from django.db import transaction
from django.utils import timezone

from allocations.models import Allocation

Status = Allocation.Status

# The simulated backend provisions and tears down in one short transaction; a task retried after deadlocks or a
# lost database connection is done within seconds. A request in one of these states longer than this lost its task.
SIMULATED_STUCK_AFTER = timedelta(minutes=2)


@dataclass(frozen=True, slots=True)
class StuckAfter:
    """How long a request may stay in each working state before its task counts as lost."""

    approved: timedelta
    provisioning: timedelta
    releasing: timedelta


def requeue_stuck_requests(*, stuck_after: StuckAfter, now: datetime | None = None) -> list[int]:
    """Queue the task of every request that outlived `stuck_after` in its state (after commit); returns their ids.

    Reads only: the task that runs decides, under the allocation's lock, whether anything is left to do.
    """
    from allocations import tasks

    now = now or timezone.now()
    work = (
        (Status.APPROVED, stuck_after.approved, tasks.provision_allocation_task),
        (Status.PROVISIONING, stuck_after.provisioning, tasks.await_claim_allocation_task),
        (Status.RELEASING, stuck_after.releasing, tasks.teardown_allocation_task),
    )
    requeued: list[int] = []
    for status, after, task in work:
        stuck = Allocation.objects.filter(status=status, updated_at__lt=now - after).order_by("pk")
        for pk in stuck.values_list("pk", flat=True):
            transaction.on_commit(partial(task.delay, pk))
            requeued.append(pk)
    return requeued


def sweep_stuck_requests(*, now: datetime | None = None) -> list[int]:
    """The simulated backend's beat pass: requeue requests whose task was lost (see the module docstring)."""
    limit = SIMULATED_STUCK_AFTER
    return requeue_stuck_requests(stuck_after=StuckAfter(limit, limit, limit), now=now)
