"""Tasks through a real Celery worker process and a real Redis broker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.db import connection

from allocations import services
from allocations.models import Allocation
from tests.conftest import World

pytestmark = pytest.mark.django_db(transaction=True)
Status = Allocation.Status


@pytest.fixture
def celery_worker() -> Iterator[subprocess.Popen[bytes]]:
    """A worker on the test database, consuming from the Redis broker the test runner started."""
    db = settings.DATABASES["default"]
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
    }
    assert settings.CELERY_BROKER_URL.startswith("redis://")
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "portal", "worker", "--pool=solo", "--loglevel=WARNING"],
        env=env,
    )
    yield worker
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=30)


def wait_for_status(allocation_id: int, status: str, timeout: float = 60.0) -> Allocation:
    deadline = time.monotonic() + timeout
    while True:
        allocation = Allocation.objects.get(pk=allocation_id)
        if allocation.status == status or time.monotonic() > deadline:
            return allocation
        connection.close()
        time.sleep(0.2)


def test_an_approved_request_is_provisioned_and_released_by_a_worker(world: World, celery_worker):
    # given / when: auto-approved; the task goes through Redis to the worker
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="2g.20gb",
        count=1,
        lease_hours=2,
        purpose="worker",
        actor=world.alice,
    )
    # then
    active = wait_for_status(allocation.pk, Status.ACTIVE)
    assert active.status == Status.ACTIVE
    assert active.placements.count() == 1
    # when
    services.release_allocation(allocation_id=allocation.pk, actor=world.alice)
    # then
    released = wait_for_status(allocation.pk, Status.RELEASED)
    assert released.status == Status.RELEASED
    assert released.placements.count() == 0
