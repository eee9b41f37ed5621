"""The Celery application; every periodic schedule lives here, in one place."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery, Task
from celery.schedules import crontab
from celery.signals import celeryd_init, task_prerun
from django.conf import settings

from portal import broker

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Task retries and failures for GET /metrics, counted from every worker into the shared store.
import portal.metrics.celery_signals  # noqa: E402, F401

# Celery's Django fixup closes every database connection after each task unless this is set, and a new
# connection costs a PostgreSQL backend start: on Kubernetes a request runs about five tasks. Connections are
# reused across tasks instead, as Django reuses them across web requests: before each task, Django's
# close_old_connections drops those that broke or outlived DATABASE_CONN_MAX_AGE.
app.conf.CELERY_DB_REUSE_MAX = 1_000_000


@task_prerun.connect
def _close_old_database_connections(task: Task[Any, Any] | None = None, **_: Any) -> None:
    if task is not None and task.request.is_eager:
        return  # the embedded worker runs inside a web request, which manages its own connection
    from django.db import close_old_connections

    close_old_connections()


@celeryd_init.connect
def _visibility_timeout_of_the_queues_consumed(conf: Any = None, options: Any = None, **_: Any) -> None:
    """A worker started with `-Q` for queues named in FATIA_BROKER_VISIBILITY_TIMEOUTS takes their timeout, and keys
    of their own for the messages it has not acknowledged (portal/broker.py says why both). A worker without `-Q`
    consumes every configured queue (`celery` and `claims`), so it is that group, as `-Q celery,claims` is."""
    if conf is None or not settings.FATIA_BROKER_VISIBILITY_TIMEOUTS:
        return
    queues = (options or {}).get("queues") or broker.default_consumed(conf.task_queues, conf.task_default_queue)
    if isinstance(queues, str):
        queues = queues.split(",")
    # Updated in place: the app reads its settings with the CELERY_ namespace, and an attribute set on `conf` under
    # the plain name would be shadowed by CELERY_BROKER_TRANSPORT_OPTIONS.
    current = conf.broker_transport_options
    default = int(current.get("visibility_timeout", 3600))
    current.update(broker.worker_transport_options(queues, settings.FATIA_BROKER_VISIBILITY_TIMEOUTS, default))


app.conf.beat_schedule = {
    "expire-due-leases": {
        "task": "allocations.tasks.expire_due_leases_task",
        "schedule": crontab(minute="*"),
    },
    # Every backend, whether the cluster answers or not: outbox rows due and not done are sent again, requests whose
    # task was lost are queued again (services/outbox.py, services/requeue.py; issue 16).
    "sweep-outbox": {
        "task": "allocations.tasks.sweep_outbox_task",
        "schedule": float(settings.FATIA_OUTBOX_SWEEP_S),
    },
    # The queue (issue 15) is admitted by events (services/queue.py); this slow pass catches room freed unseen.
    "admit-queued": {
        "task": "allocations.tasks.admit_all_queued_task",
        "schedule": float(settings.FATIA_QUEUE_SWEEP_S),
    },
    # Cohorts (issue 15): borrowed allocations whose grace is over are taken back (services/cohort_reclaim.py).
    "reclaim-due-borrowed": {
        "task": "allocations.tasks.reclaim_due_borrowed_task",
        "schedule": crontab(minute="*"),
    },
    # Admission (issue 14): held requests past their bound are placed, forced, by their pool's pass.
    "admit-due-holds": {
        "task": "allocations.tasks.admit_due_holds_task",
        "schedule": crontab(minute="*"),
    },
    # Kubernetes backend: the cluster against the database, both ways.
    "reconcile-cluster": {
        "task": "allocations.tasks.reconcile_cluster_task",
        "schedule": 30.0,
    },
    # Kubernetes backend: fleet discovery's full list, in case `manage.py discover_fleet` is not running.
    "discover-fleet": {
        "task": "allocations.tasks.discover_fleet_task",
        "schedule": 300.0,
    },
    "warn-expiring-leases": {
        "task": "allocations.tasks.warn_expiring_leases_task",
        "schedule": crontab(minute="*/5"),
    },
    # Idle reclaim (allocations/services/reclaim.py): which device serves each slice, then flag, warn and release.
    "record-slice-devices": {
        "task": "allocations.tasks.record_slice_devices_task",
        "schedule": 60.0,
    },
    "reclaim-idle-allocations": {
        "task": "allocations.tasks.reclaim_idle_allocations_task",
        "schedule": crontab(minute="*"),
    },
    # Static MIG pools in a quiet period: free instances reshaped for the demand mix (services/preshaping.py).
    "preshape-static-pools": {
        "task": "allocations.tasks.preshape_static_pools_task",
        "schedule": crontab(minute="*/5"),
    },
    # Compaction (issue 14): fragmented pools get a plan that moves movable slices to free whole GPUs.
    "compact-pools": {
        "task": "allocations.tasks.compact_pools_task",
        "schedule": float(settings.FATIA_COMPACTION_INTERVAL_S),
    },
    # Bookings (issue 15, allocations/services/bookings.py): made into requests at their start, settled at the end.
    "run-due-bookings": {
        "task": "allocations.tasks.run_due_bookings_task",
        "schedule": 30.0,
    },
    # Node agents (allocations/nodeagent/): freshness, hourly history from minutes, retention.
    "mark-silent-agents": {
        "task": "allocations.nodeagent.tasks.mark_silent_agents_task",
        "schedule": 15.0,
    },
    "roll-up-agent-history": {
        "task": "allocations.nodeagent.tasks.roll_up_agent_history_task",
        "schedule": crontab(minute="*/10"),
    },
    "prune-agent-history": {
        "task": "allocations.nodeagent.tasks.prune_agent_history_task",
        "schedule": crontab(minute=17, hour="*/6"),
    },
}
