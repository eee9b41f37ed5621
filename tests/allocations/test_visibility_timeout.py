"""A visibility timeout per queue on Redis (issue 16: "a worker killed ... waits the visibility timeout; make it
configurable per queue"). A real worker consuming queue `urgent` (FATIA_BROKER_VISIBILITY_TIMEOUTS=urgent=3, while
the default stays an hour) is killed with SIGKILL holding a provisioning task; a new worker of that queue gets the
task back after the queue's own 3 s, with neither the outbox nor beat to help. Real PostgreSQL and Redis."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from django.utils import timezone

from allocations import services, tasks
from allocations.models import Allocation, OutboxMessage
from tests.allocations.faults import PrivateRedis, assert_books_balance, celery_process
from tests.allocations.test_worker_killed import database, lock_waiters
from tests.conftest import World, wait_for_status

pytestmark = pytest.mark.django_db(transaction=True)
Status = Allocation.Status
# An hour by default, 3 s for `urgent`: only the queue's own timeout can bring the task back within the test.
TIMEOUTS = {"FATIA_BROKER_VISIBILITY_TIMEOUT_S": "3600", "FATIA_BROKER_VISIBILITY_TIMEOUTS": "urgent=3"}
# The queue's 3 s, then the Redis transport's restore scan (every 10 s for a queue with its own timeout,
# portal/broker.py; kombu's default, every 100 s, misses this bound whenever the new worker's first scan comes before
# the 3 s are up), then the task.
CONVERGE_S = 60.0


def wait_acknowledged(keys: redis.Redis, group: str) -> None:
    """Waits (at most ``CONVERGE_S``) until the worker has acknowledged what it holds of ``group``: the task commits its
    status before the worker acknowledges the message, and under load the 3 s timeout can put a running task back
    once more (run again, it finds the request active), so the status alone does not say the keys are clean yet."""
    deadline = time.monotonic() + CONVERGE_S
    while keys.zcard(f"unacked_index:{group}") and time.monotonic() < deadline:
        time.sleep(0.2)


def test_a_killed_workers_task_comes_back_after_its_queues_own_visibility_timeout(
    world: World, redis_server: PrivateRedis, tmp_path: Path, django_capture_on_commit_callbacks: Any
) -> None:
    keys = redis.Redis.from_url(redis_server.url)
    holder = database()
    watcher = database()
    watcher.autocommit = True
    try:
        # given: an approved request whose provisioning the outbox will not send (row done, no beat), and the pool's
        # row locked, so that its task blocks inside its transaction
        with django_capture_on_commit_callbacks(execute=False):
            allocation, _ = services.request_allocation(
                tenant_id=world.tenant_a.pk,
                pool_id=world.pool.pk,
                profile="1g.10gb",
                count=1,
                lease_hours=2,
                purpose="visibility",
                actor=world.alice,
            )
        OutboxMessage.objects.update(done_at=timezone.now())
        with holder.cursor() as cur:
            cur.execute("SELECT id FROM allocations_nodepool WHERE id = %s FOR UPDATE", [world.pool.pk])
        with celery_process("worker", redis_server.url, tmp_path, queues="urgent", **TIMEOUTS) as worker:
            # when: its provisioning is sent to queue `urgent` and the worker takes it
            tasks.provision_allocation_task.apply_async((allocation.pk,), queue="urgent")
            deadline = time.monotonic() + 60
            while lock_waiters(watcher) < 1 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert lock_waiters(watcher) == 1
            # then: the message it holds unacknowledged is kept under the queue's own keys, not the shared ones
            assert (keys.zcard("unacked_index:urgent"), keys.zcard("unacked_index")) == (1, 0)
            # when: the worker dies mid-task
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=10)
        holder.rollback()
        assert Allocation.objects.get(pk=allocation.pk).status == Status.APPROVED
        # when: a new worker of the queue starts
        with celery_process("worker", redis_server.url, tmp_path, queues="urgent", **TIMEOUTS):
            # then: the task is back after the queue's timeout (the default one is an hour), and runs once
            active = wait_for_status(allocation.pk, Status.ACTIVE, timeout=CONVERGE_S)
            assert active.status == Status.ACTIVE
            wait_acknowledged(keys, "urgent")
        assert keys.zcard("unacked_index:urgent") == 0
        assert_books_balance([world.tenant_a.pk])
    finally:
        holder.close()
        watcher.close()


# Both queues a worker without -Q consumes have 3 s: only their group's own timeout brings the poll back in the test.
BOTH = {"FATIA_BROKER_VISIBILITY_TIMEOUT_S": "3600", "FATIA_BROKER_VISIBILITY_TIMEOUTS": "celery=3,claims=3"}


def test_a_killed_default_workers_claims_task_is_kept_under_its_groups_keys_and_comes_back(
    world: World, redis_server: PrivateRedis, tmp_path: Path, django_capture_on_commit_callbacks: Any
) -> None:
    """A worker without -Q consumes `celery` and `claims` (portal/broker.py): what it took from `claims` is kept under
    the keys of that group, as a `-Q celery,claims` worker keeps it (session 13: under `celery`'s alone, which such a
    worker never restores), and a worker of those queues runs it again after their timeout. Kombu puts it back on
    the queue it was sent to (it keeps an unacknowledged message with its exchange and routing key)."""
    keys = redis.Redis.from_url(redis_server.url)
    holder = database()
    watcher = database()
    watcher.autocommit = True
    try:
        # given: a task on the claim polls' queue (a provisioning one: it blocks on the pool's row locked here)
        with django_capture_on_commit_callbacks(execute=False):
            allocation, _ = services.request_allocation(
                tenant_id=world.tenant_a.pk, pool_id=world.pool.pk, profile="1g.10gb", count=1, lease_hours=2,
                purpose="claims visibility", actor=world.alice,
            )  # fmt: skip
        OutboxMessage.objects.update(done_at=timezone.now())
        with holder.cursor() as cur:
            cur.execute("SELECT id FROM allocations_nodepool WHERE id = %s FOR UPDATE", [world.pool.pk])
        with celery_process("worker", redis_server.url, tmp_path, **BOTH) as worker:
            # when: a worker started without -Q takes it from `claims`
            tasks.provision_allocation_task.apply_async((allocation.pk,), queue="claims")
            deadline = time.monotonic() + 60
            while lock_waiters(watcher) < 1 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert lock_waiters(watcher) == 1
            # then: it is kept under the group of both queues (the keys of `-Q celery,claims`)
            group = [keys.zcard(f"unacked_index:{name}") for name in ("celery+claims", "celery", "claims")]
            assert (group, keys.zcard("unacked_index")) == ([1, 0, 0], 0)
            # when: the worker dies mid-task
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=10)
        holder.rollback()
        assert Allocation.objects.get(pk=allocation.pk).status == Status.APPROVED
        # when: a worker of the same queues starts, named with -Q
        with celery_process("worker", redis_server.url, tmp_path, queues="claims,celery", **BOTH):
            # then: the task is back after the group's 3 s and runs once
            active = wait_for_status(allocation.pk, Status.ACTIVE, timeout=CONVERGE_S)
            assert active.status == Status.ACTIVE
            wait_acknowledged(keys, "celery+claims")
        assert keys.zcard("unacked_index:celery+claims") == 0
        assert_books_balance([world.tenant_a.pk])
    finally:
        holder.close()
        watcher.close()
