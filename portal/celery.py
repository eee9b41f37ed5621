"""The Celery application; every periodic schedule lives here, in one place."""

from __future__ import annotations

import os

from celery import Celery
from celery.schedules import crontab

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

app.conf.beat_schedule = {
    "expire-due-leases": {
        "task": "allocations.tasks.expire_due_leases_task",
        "schedule": crontab(minute="*"),
    },
    # Kubernetes backend: the cluster against the database, both ways (a no-op with the simulated backend).
    "reconcile-cluster": {
        "task": "allocations.tasks.reconcile_cluster_task",
        "schedule": 30.0,
    },
    "warn-expiring-leases": {
        "task": "allocations.tasks.warn_expiring_leases_task",
        "schedule": crontab(minute="*/5"),
    },
}
