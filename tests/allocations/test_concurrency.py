"""Quota holds under concurrency: row locks on PostgreSQL, not check-then-act."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

import pytest
from django.db import connection

from allocations import services
from allocations.models import Allocation, Quota
from tenants.errors import QuotaExceeded
from tenants.models import Tenant
from tests.conftest import World

pytestmark = pytest.mark.django_db(transaction=True)
PARALLEL = 20


def run_in_parallel(job: Callable[[int], str], threads: int = PARALLEL) -> Counter[str]:
    """Run job(i) for i in range(threads), each in its own thread and database connection,
    released together by a barrier so the requests really overlap. An exception counts as its class name."""
    barrier = threading.Barrier(threads)
    outcomes: list[str] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        try:
            barrier.wait()
            outcome = job(i)
        except Exception as exc:  # noqa: BLE001 - every failure is counted and asserted on
            outcome = type(exc).__name__
        finally:
            connection.close()
        with lock:
            outcomes.append(outcome)

    started = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in started:
        t.start()
    for t in started:
        t.join()
    return Counter(outcomes)


def set_quota(world: World, compute: int, memory: int) -> None:
    services.set_tenant_quota(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        compute_slices_limit=compute,
        memory_slices_limit=memory,
        actor=world.root,
    )


def test_twenty_parallel_submissions_at_the_quota_edge_approve_exactly_what_fits(world: World):
    # given: room for exactly 7 slices of 1g.10gb (1 compute, 1 memory each)
    assert connection.vendor == "postgresql"
    set_quota(world, compute=7, memory=8)

    def submit(i: int) -> str:
        allocation, _ = services.request_allocation(
            tenant_id=world.tenant_a.pk,
            pool_id=world.pool.pk,
            profile="1g.10gb",
            count=1,
            lease_hours=1,
            purpose=f"parallel {i}",
            actor=world.alice,
        )
        return allocation.status

    # when
    outcomes = run_in_parallel(submit)
    # then
    assert outcomes == Counter({"approved": 7, "pending": 13})
    quota = Quota.objects.get(tenant=world.tenant_a, pool=world.pool)
    assert (quota.compute_slices_used, quota.memory_slices_used) == (7, 7)


def test_twenty_parallel_approvals_at_the_quota_edge_approve_exactly_what_fits(world: World):
    # given: 20 pending 2g.20gb requests (2 compute, 2 memory each) and room for 5 of them
    Tenant.objects.filter(pk=world.tenant_a.pk).update(auto_approve_max_compute_slices=0)
    set_quota(world, compute=10, memory=16)
    pending = [
        services.request_allocation(
            tenant_id=world.tenant_a.pk,
            pool_id=world.pool.pk,
            profile="2g.20gb",
            count=1,
            lease_hours=1,
            purpose=f"p{i}",
            actor=world.alice,
        )[0].pk
        for i in range(PARALLEL)
    ]

    def approve(i: int) -> str:
        return services.approve_allocation(allocation_id=pending[i], actor=world.mallory).status

    # when
    outcomes = run_in_parallel(approve)
    # then
    assert outcomes == Counter({"approved": 5, QuotaExceeded.__name__: 15})
    assert Allocation.objects.filter(status="approved").count() == 5
    quota = Quota.objects.get(tenant=world.tenant_a, pool=world.pool)
    assert (quota.compute_slices_used, quota.memory_slices_used) == (10, 10)


def test_the_same_idempotency_key_in_parallel_creates_one_request(world: World):
    def submit(i: int) -> str:
        allocation, created = services.request_allocation(
            tenant_id=world.tenant_a.pk,
            pool_id=world.pool.pk,
            profile="1g.10gb",
            count=1,
            lease_hours=1,
            purpose="same",
            actor=world.alice,
            idempotency_key="retry-me",
        )
        return "created" if created else "replayed"

    outcomes = run_in_parallel(submit)
    assert outcomes == Counter({"created": 1, "replayed": 19})
    assert Allocation.objects.count() == 1
    assert Quota.objects.get(tenant=world.tenant_a, pool=world.pool).compute_slices_used == 1
