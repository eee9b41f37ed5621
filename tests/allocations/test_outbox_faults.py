"""Lose no work when the broker fails (issue 16): real PostgreSQL, a real Redis this test stops and restarts, a real
worker and beat. Requests go through the API in this process; the worker and beat are separate processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from allocations.models import Allocation, OutboxMessage
from tests.allocations.faults import (
    PrivateRedis,
    assert_books_balance,
    celery_process,
    wait_settled,
)
from tests.conftest import World, wait_for_status

pytestmark = pytest.mark.django_db(transaction=True)
Status = Allocation.Status
# Sweep every 1 s, resend after 2 s: converging takes a sweep and a task; this leaves room for a loaded machine.
CONVERGE_S = 30.0


def create(world: World, purpose: str, compute_heavy: bool = False) -> tuple[int, int]:
    """POST a request as alice: 1g.10gb is auto-approved, 3g.40gb waits for a manager (past the policy)."""
    profile = "3g.40gb" if compute_heavy else "1g.10gb"
    response = world.client(world.alice).post(
        "/api/v1/allocations/",
        {
            "tenant": world.tenant_a.pk,
            "pool": world.pool.pk,
            "profile": profile,
            "count": 1,
            "lease_hours": 2,
            "purpose": purpose,
        },
        format="json",
    )
    return response.status_code, int(response.json().get("id", 0))


def test_broker_down_create_approve_release_answer_and_converge_once_it_is_back(
    world: World, redis_server: PrivateRedis, tmp_path: Path
):
    with (
        celery_process("worker", redis_server.url, tmp_path) as worker,
        celery_process("beat", redis_server.url, tmp_path),
    ):
        # given: two active requests
        active = [create(world, f"before {n}")[1] for n in range(2)]
        assert [wait_for_status(pk, Status.ACTIVE, timeout=CONVERGE_S).status for pk in active] == [
            Status.ACTIVE
        ] * 2, list(OutboxMessage.objects.values())
        # when: the broker goes down; create, approve and release meanwhile
        redis_server.kill()
        created = [create(world, f"during {n}") for n in range(3)]
        pending_code, pending = create(world, "needs a manager", compute_heavy=True)
        approved = world.client(world.mallory).post(f"/api/v1/allocations/{pending}/approve/", {}, format="json")
        released = [world.client(world.alice).post(f"/api/v1/allocations/{pk}/release/") for pk in active]
        # then: every answer is the usual one, no 500
        assert [code for code, _ in created] + [pending_code] == [201] * 4
        assert [approved.status_code] + [r.status_code for r in released] == [200] * 3
        # when: the broker is back
        redis_server.start()
        ids = [pk for _, pk in created] + [pending] + active
        waited = wait_settled(ids, CONVERGE_S)
        # then: everything converged, each request once
        statuses = dict(Allocation.objects.filter(pk__in=ids).values_list("pk", "status"))
        assert statuses == {
            **{pk: Status.ACTIVE for _, pk in created},
            pending: Status.ACTIVE,
            **{pk: Status.RELEASED for pk in active},
        }, (waited, list(OutboxMessage.objects.values_list("task_name", "args", "sent_count", "done_at", "last_error")))
        assert worker.poll() is None
    assert_books_balance([world.tenant_a.pk])


def test_broker_restarted_empty_with_messages_queued_loses_nothing(
    world: World, redis_server: PrivateRedis, tmp_path: Path
):
    # given: requests whose tasks wait in the broker, no worker running
    ids = []
    for n in range(4):
        code, pk = create(world, f"queued {n}")
        assert code == 201
        ids.append(pk)
    assert redis_server.queued() == 4
    # when: the broker dies with them and comes back empty; then a worker and beat start
    redis_server.kill()
    redis_server.start()
    assert redis_server.queued() == 0
    with celery_process("worker", redis_server.url, tmp_path), celery_process("beat", redis_server.url, tmp_path):
        waited = wait_settled(ids, CONVERGE_S)
        # then: all provisioned, once, within the resend delay and a sweep
        assert set(Allocation.objects.filter(pk__in=ids).values_list("status", flat=True)) == {Status.ACTIVE}, waited
    assert waited < CONVERGE_S
    assert_books_balance([world.tenant_a.pk])
