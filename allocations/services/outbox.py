"""The transactional outbox (issue 16): work due after a commit is written in the same transaction, then sent.

A service calls `enqueue_task("allocations.tasks.provision_allocation_task", allocation.pk)` inside its transaction.
That writes an `OutboxMessage` row beside the state change, so both commit or neither does. After commit the row is
sent to the broker at once (`Dispatch.send`); a broker that is down only logs a warning there, never fails the web
request that already committed. The beat's sweep (`resend_due_messages`) sends again every row that is not done
once it is due: never sent, or sent and not done within FATIA_OUTBOX_RESEND_S (a lost message: broker restarted
empty, worker killed), the delay doubling with each send. A task that ran to the end marks the rows that asked for
it done (`mark_done`, from Celery's task signals in tasks.py), so finished work is not sent again. Every task is
idempotent, so a second copy of one finds its work done and returns.

Tasks are named, never imported: services do not import tasks.py (the import would loop back into the services).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from allocations.models import OutboxMessage

logger = logging.getLogger(__name__)

# A resend waits FATIA_OUTBOX_RESEND_S, then twice that, ... up to this many times that: a task that keeps retrying
# on its own (an unreachable API server) is not doubled every half minute.
MAX_BACKOFF_FACTOR = 32
SWEEP_BATCH = 500


def enqueue_task(task_name: str, *args: Any) -> OutboxMessage:
    """Record that `task_name(*args)` is due once the current transaction commits, and send it after commit.

    Call it inside the transaction that makes the change (outside one, the row commits and is sent at once).
    Arguments must be JSON values (ids), as every task's are.
    """
    message = OutboxMessage.objects.create(task_name=task_name, args=list(args), due_at=timezone.now())
    transaction.on_commit(partial(Dispatch(task_name, message.pk).send, *args))
    return message


def has_open_message(task_name: str, *args: Any) -> bool:
    """True when `task_name(*args)` is written and not done yet: the outbox's sweep is already on it."""
    return OutboxMessage.objects.filter(task_name=task_name, args=list(args), done_at__isnull=True).exists()


@dataclass(frozen=True, slots=True)
class Dispatch:
    """The send right after commit of one fresh outbox row: one try, errors logged and swallowed (the row stays
    due for the sweep). `name` is the task's, so a test of on-commit callbacks can tell what is queued."""

    name: str
    message_id: int

    def send(self, *args: Any) -> None:
        _send(self.message_id, self.name, args, sent_count=0, retry=False)


def _send(message_id: int, task_name: str, args: Sequence[Any], *, sent_count: int, retry: bool) -> bool:
    """Publish the task and push the row's due time back; on a broker error record it and leave the row due."""
    try:
        _task(task_name).apply_async(tuple(args), retry=retry)
    except Exception as exc:  # any broker or transport error: the sweep sends the row again
        logger.warning("outbox: could not send %s%s (#%s): %s", task_name, tuple(args), message_id, exc)
        OutboxMessage.objects.filter(pk=message_id).update(last_error=f"{type(exc).__name__}: {exc}"[:500])
        return False
    now = timezone.now()
    factor = min(2**sent_count, MAX_BACKOFF_FACTOR)
    OutboxMessage.objects.filter(pk=message_id).update(
        last_sent_at=now,
        sent_count=F("sent_count") + 1,
        due_at=now + timedelta(seconds=settings.FATIA_OUTBOX_RESEND_S * factor),
        last_error="",
    )
    return True


def _task(name: str) -> Any:
    """The registered task by name. `apply_async` (not `send_task`) so the demo's embedded worker runs it eagerly."""
    app = current_app
    if name not in app.tasks:
        # The web process has not imported the task modules yet: import the one module the name is in.
        # (Not `app.loader.import_default_modules()`: its Django fix-up runs django.setup() again, which rebuilds
        # the logging handlers in the middle of a request, bound to whatever sys.stderr is at that moment.)
        importlib.import_module(name.rpartition(".")[0])
    return app.tasks[name]


@dataclass(frozen=True, slots=True)
class SweepReport:
    sent: list[int]
    failed: list[int]
    given_up: list[int]
    deleted: int


def resend_due_messages(*, now: datetime | None = None) -> SweepReport:
    """The beat's pass: send every due row that is not done, give up rows sent FATIA_OUTBOX_MAX_SENDS times, and
    delete done rows older than FATIA_OUTBOX_KEEP_HOURS. Rows are claimed with SKIP LOCKED, so two sweeps at once
    never send the same row twice."""
    now = now or timezone.now()
    sent: list[int] = []
    failed: list[int] = []
    given_up: list[int] = []
    with transaction.atomic():
        due = (
            OutboxMessage.objects.select_for_update(skip_locked=True)
            .filter(done_at__isnull=True, due_at__lte=now)
            .order_by("pk")[:SWEEP_BATCH]
        )
        for message in due:
            if message.sent_count >= settings.FATIA_OUTBOX_MAX_SENDS:
                logger.error("outbox: giving up %s (#%s) after %s sends", message, message.pk, message.sent_count)
                OutboxMessage.objects.filter(pk=message.pk).update(done_at=now, last_error="given up")
                given_up.append(message.pk)
            elif _send(message.pk, message.task_name, message.args, sent_count=message.sent_count, retry=True):
                sent.append(message.pk)
            else:
                failed.append(message.pk)
    keep = timedelta(hours=settings.FATIA_OUTBOX_KEEP_HOURS)
    deleted, _ = OutboxMessage.objects.filter(done_at__lt=now - keep).delete()
    return SweepReport(sent=sent, failed=failed, given_up=given_up, deleted=deleted)


def open_message_ids(task_name: str, args: Sequence[Any]) -> list[int]:
    """The rows asking for `task_name(*args)` that are committed and not done: what a run starting now covers."""
    return list(
        OutboxMessage.objects.filter(task_name=task_name, args=list(args), done_at__isnull=True).values_list(
            "pk", flat=True
        )
    )


def mark_done(message_ids: Sequence[int]) -> int:
    """A task ran to the end: the rows it covered (open_message_ids at its start) are done. Returns how many.

    Rows written while it ran are not among them and get a run of their own (no clock is compared)."""
    if not message_ids:
        return 0
    return OutboxMessage.objects.filter(pk__in=message_ids, done_at__isnull=True).update(done_at=timezone.now())
