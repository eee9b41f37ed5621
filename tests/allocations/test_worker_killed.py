"""Lose no work when a worker dies (issue 16): a real worker with pool processes is killed with SIGKILL, parent and
children together, while every provisioning task it holds waits on the pool's row lock; a new worker and beat then
bring each request to ACTIVE exactly once. Real PostgreSQL and Redis."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psycopg
import pytest
from django.conf import settings as django_settings

from allocations.models import Allocation
from tests.allocations.faults import (
    PrivateRedis,
    assert_books_balance,
    celery_process,
    wait_settled,
)
from tests.allocations.test_outbox_faults import create
from tests.conftest import World

pytestmark = pytest.mark.django_db(transaction=True)
Status = Allocation.Status
REQUESTS = 4
CONVERGE_S = 60.0


def database() -> psycopg.Connection[tuple[object, ...]]:
    db = django_settings.DATABASES["default"]
    return psycopg.connect(host=db["HOST"], port=db["PORT"], user=db["USER"], dbname=db["NAME"], autocommit=False)


def lock_waiters(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    """Sessions of other processes waiting for a lock right now."""
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()")
        row = cur.fetchone()
    return int(row[0]) if row else 0


def test_a_worker_killed_with_its_children_mid_provisioning_loses_no_request(
    world: World, redis_server: PrivateRedis, tmp_path: Path
) -> None:
    holder = database()
    watcher = database()
    watcher.autocommit = True
    try:
        # given: requests approved while no worker runs (their tasks wait in the broker), then the pool's row locked,
        # so that every provisioning task blocks inside its transaction (requests lock the pool too: created first)
        ids = []
        for n in range(REQUESTS):
            code, pk = create(world, f"doomed worker {n}")
            assert code == 201
            ids.append(pk)
        with holder.cursor() as cur:
            cur.execute("SELECT id FROM allocations_nodepool WHERE id = %s FOR UPDATE", [world.pool.pk])
        with celery_process("worker", redis_server.url, tmp_path, children=2) as worker:
            deadline = time.monotonic() + 60
            while lock_waiters(watcher) < 2 and time.monotonic() < deadline:
                time.sleep(0.2)
            # then: both pool processes hold a provisioning task, stuck on the lock
            assert lock_waiters(watcher) >= 2
            # when: the worker dies with its children, mid-task
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=10)
        holder.rollback()  # the lock goes; the killed sessions' transactions were rolled back by PostgreSQL
        assert set(Allocation.objects.filter(pk__in=ids).values_list("status", flat=True)) == {Status.APPROVED}
        # when: a new worker and beat start
        with celery_process("worker", redis_server.url, tmp_path), celery_process("beat", redis_server.url, tmp_path):
            waited = wait_settled(ids, CONVERGE_S)
            # then: every request is active, once, within the sweep's resend delay (not the visibility timeout)
            statuses = dict(Allocation.objects.filter(pk__in=ids).values_list("pk", "status"))
            assert statuses == {pk: Status.ACTIVE for pk in ids}, waited
        assert waited < CONVERGE_S
        assert_books_balance([world.tenant_a.pk])
    finally:
        holder.close()
        watcher.close()
