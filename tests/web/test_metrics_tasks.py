"""Task retries and failures in /metrics, counted by a real Celery worker process through the real Redis broker
and the shared cache (portal/metrics/celery_signals.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from allocations.tasks import notify_managers_of_extension_task, onboard_tenant_task
from portal.celery import app as celery_app
from tests.conftest import World, celery_worker_process
from tests.web.test_metrics import AUTH, POD_IP, TOKEN, samples

pytestmark = pytest.mark.django_db(transaction=True)

ONBOARD = "allocations.tasks.onboard_tenant_task"
NOTIFY = "allocations.tasks.notify_managers_of_extension_task"


def task_counts(name: str) -> dict[str, float]:
    text = Client().get("/metrics", HTTP_HOST=POD_IP, **AUTH).content.decode()
    return {s.labels["task"]: s.value for s in samples(text) if s.name == name}


def wait_for(check: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.25)


def test_a_retrying_task_and_a_failing_task_move_their_counters(world: World, settings: Any, tmp_path: Path) -> None:
    # given: a worker whose kubeconfig cannot be read (the Kubernetes tasks retry: KubeUnavailable) and nothing
    # counted yet
    settings.FATIA_METRICS_TOKEN = TOKEN
    assert task_counts("fatia_celery_task_retries_total") == {}
    assert task_counts("fatia_celery_task_failures_total") == {}
    env = {"FATIA_CLUSTER_BACKEND": "kubernetes", "FATIA_KUBECONFIG": str(tmp_path / "missing-kubeconfig")}
    # and: an empty queue. Earlier tests leave tasks in the shared broker (sent on commit with no worker running);
    # their rows are gone, so a worker started here would fail them and count failures this test did not cause.
    celery_app.control.purge()
    with celery_worker_process(**env):
        # when: a tenant's onboarding, which retries on its backoff (1 s, 2 s, ...), and a notification about a
        # lease extension that does not exist, which fails for good (DoesNotExist is not retried)
        onboard_tenant_task.delay(world.tenant_a.pk)
        notify_managers_of_extension_task.delay(987654)
        wait_for(lambda: task_counts("fatia_celery_task_retries_total").get(ONBOARD, 0) >= 2)
        wait_for(lambda: NOTIFY in task_counts("fatia_celery_task_failures_total"))
        # then
        retries = task_counts("fatia_celery_task_retries_total")
        failures = task_counts("fatia_celery_task_failures_total")
    # the onboarding keeps retrying while the worker runs, so only its lower bound is known here
    assert set(retries) == {ONBOARD}
    assert retries[ONBOARD] >= 2
    assert failures == {NOTIFY: 1}
