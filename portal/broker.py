"""How the broker's queues are declared and redelivered: quorum queues on RabbitMQ, the visibility timeout per queue
on Redis (issue 16; docs/operations.md, "The broker"). Plain functions of the settings' raw values, so settings.py
and the worker's start-up (portal/celery.py) share them; they read no settings themselves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from kombu import Exchange, Queue

QUEUE_TYPES = ("classic", "quorum")
AMQP_SCHEMES = ("amqp://", "amqps://", "pyamqp://")


def queue_type_settings(queue_type: str, broker_url: str) -> dict[str, Any]:
    """The Celery settings (without the CELERY_ prefix) for FATIA_BROKER_QUEUE_TYPE.

    `quorum`: Celery declares its queues with `x-queue-type: quorum` (replicated over the RabbitMQ cluster, durable,
    messages confirmed by a majority before the publish returns). Quorum queues refuse a global prefetch (QoS), so
    Celery's worker turns it off (worker_detect_quorum_queues, on by default) and cannot hold back a countdown task
    by raising it; countdowns (our retries' back-off, the claim poll) go through Celery's native delayed delivery
    instead, which needs the queues' exchange to be a topic exchange. Publisher confirms make a send that the
    broker did not take fail, so the outbox row stays due (services/outbox.py) instead of being counted as sent.
    """
    if queue_type not in QUEUE_TYPES:
        allowed = " or ".join(QUEUE_TYPES)
        raise ImproperlyConfigured(f"FATIA_BROKER_QUEUE_TYPE must be {allowed}, not {queue_type!r}")
    if queue_type == "classic":
        return {}
    if not broker_url.startswith(AMQP_SCHEMES):
        raise ImproperlyConfigured(
            "FATIA_BROKER_QUEUE_TYPE=quorum needs a RabbitMQ broker (CELERY_BROKER_URL=amqp://...); "
            "Redis has no quorum queues."
        )
    return {
        "task_default_queue_type": "quorum",
        "task_default_exchange_type": "topic",
        "broker_transport_options": {"confirm_publish": True},
    }


# Celery's default queue, and the claim polls' own: a poll waits behind other polls, not behind a burst's provisioning.
DEFAULT_QUEUE = "celery"
CLAIM_POLLS_QUEUE = "claims"
TASK_ROUTES = {"allocations.tasks.await_claim_allocation_task": {"queue": CLAIM_POLLS_QUEUE}}


def task_queues(queue_type: str) -> tuple[Queue, ...]:
    """The queues a worker started without -Q consumes (Celery's default queue and the claim polls'), declared as
    Celery declares its default queue for FATIA_BROKER_QUEUE_TYPE: `quorum` queues on topic exchanges (native delayed
    delivery binds every queue through its exchange), classic ones on direct exchanges otherwise. On Redis the worker
    pops from the queues in turn, on RabbitMQ it consumes each, so a poll never waits behind the other queue's backlog.
    """
    quorum = queue_type == "quorum"
    return tuple(
        Queue(
            name,
            Exchange(name, type="topic" if quorum else "direct"),
            routing_key=name,
            queue_arguments={"x-queue-type": "quorum"} if quorum else None,
        )
        for name in (DEFAULT_QUEUE, CLAIM_POLLS_QUEUE)
    )


def default_consumed(configured: Iterable[Queue] | None, default_queue: str) -> list[str]:
    """The queues a worker started without -Q consumes: every configured one (`task_queues`), else Celery's default.
    Its group for the visibility timeout is all of them: grouped under `celery` alone (as before session 14), it
    kept a claim poll it had taken under other keys than a `-Q celery,claims` worker's, so neither restored the
    other's, and a timeout given to `claims` did not count for it."""
    return [queue.name for queue in configured or ()] or [default_queue]


def parse_visibility_timeouts(raw: str) -> dict[str, int]:
    """FATIA_BROKER_VISIBILITY_TIMEOUTS, `queue=seconds,queue=seconds` (spaces allowed), as a mapping."""
    timeouts: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        queue, sep, seconds = item.partition("=")
        if not sep or not queue.strip() or not seconds.strip().isdigit() or int(seconds) <= 0:
            raise ImproperlyConfigured(
                f"FATIA_BROKER_VISIBILITY_TIMEOUTS must look like 'celery=300,kube=900' (queue=seconds), not {raw!r}"
            )
        timeouts[queue.strip()] = int(seconds)
    return timeouts


def worker_transport_options(
    queues: Iterable[str], timeouts: Mapping[str, int], default_timeout: int
) -> dict[str, Any]:
    """The Redis transport options of a worker that consumes `queues`.

    The Redis transport keeps every message a worker took and has not acknowledged in one sorted set, and any
    worker on the same Redis puts back the entries older than *its own* visibility timeout, whatever their queue.
    Separate keys per group of queues give each group its own timeout: a worker of that group records and restores
    only its group's messages. Queues without an entry share the default keys and FATIA_BROKER_VISIBILITY_TIMEOUT_S.

    kombu 5.7 scans for messages to put back when a worker starts and then only every `unacked_restore_interval`
    (10 s) x `unacked_restore_throttle` (10) = 100 s, which would add up to 100 s to a timeout of a few seconds: the
    group's workers scan every 10 s instead (one ZRANGE of a small sorted set).
    """
    names = sorted(set(queues))
    if not any(name in timeouts for name in names):
        return {"visibility_timeout": default_timeout}
    group = "+".join(names)
    return {
        "visibility_timeout": max(timeouts.get(name, default_timeout) for name in names),
        "unacked_key": f"unacked:{group}",
        "unacked_index_key": f"unacked_index:{group}",
        "unacked_mutex_key": f"unacked_mutex:{group}",
        "unacked_restore_throttle": 1,
    }
