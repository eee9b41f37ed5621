"""Tasks through a real Celery worker process and a real Redis broker."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from allocations import services
from allocations.models import Allocation
from tests.conftest import World, celery_worker_process, wait_for_status

pytestmark = pytest.mark.django_db(transaction=True)
Status = Allocation.Status


@pytest.fixture
def celery_worker() -> Iterator[subprocess.Popen[bytes]]:
    with celery_worker_process() as worker:
        yield worker


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
