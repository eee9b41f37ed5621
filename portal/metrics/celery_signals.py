"""Celery task retries and failures, counted in the shared store from whichever worker process saw them.

Connected when the Celery app is imported (portal/celery.py), so every worker has them. A retry that Celery
schedules (autoretry_for, self.retry) sends task_retry; a task that raised past its retries, or raised an error it
does not retry, sends task_failure.
"""

from __future__ import annotations

from typing import Any

from celery.signals import task_failure, task_retry

from portal.metrics import events


def _name(sender: Any) -> str:
    return str(getattr(sender, "name", None) or "unknown")


@task_retry.connect(weak=False)
def _count_retry(sender: Any = None, **_: Any) -> None:
    events.record_task_retry(_name(sender))


@task_failure.connect(weak=False)
def _count_failure(sender: Any = None, **_: Any) -> None:
    events.record_task_failure(_name(sender))
