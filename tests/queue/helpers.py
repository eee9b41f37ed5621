"""A small pool for the queue's tests (issue 15): one H100 per node, so one 7g.80gb fills a node."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from allocations import services
from allocations.models import Allocation, NodePool
from allocations.services.locks import lock_pool
from allocations.services.provisioning import provision_allocation
from allocations.services.queue import admit_queued
from tenants.models import Tenant
from tests.conftest import World

H100 = "NVIDIA H100 80GB HBM3"


def small_pool(world: World, *, nodes: int = 1, slug: str = "q1") -> NodePool:
    """`nodes` nodes of one H100 each; both tenants get 14 compute / 16 memory there and auto-approval up to 7."""
    pool = services.create_node_pool(name=f"Queue pool {slug}", slug=slug, gpu_model=H100, actor=world.root)
    for n in range(nodes):
        services.register_node(pool_id=pool.pk, name=f"{slug}-node-{n}", gpu_count=1, actor=world.root)
    for tenant in (world.tenant_a, world.tenant_b):
        services.set_tenant_quota(
            tenant_id=tenant.pk, pool_id=pool.pk, compute_slices_limit=14, memory_slices_limit=16, actor=world.root
        )
    # given, not a rule under test: both tenants' requests up to a whole GPU are approved at once
    Tenant.objects.filter(pk__in=[world.tenant_a.pk, world.tenant_b.pk]).update(auto_approve_max_compute_slices=7)
    return pool


def ask(world: World, pool: NodePool, profile: str, *, b: bool = False, lease_hours: int = 8, **kw: Any) -> Allocation:
    """Tenant A's (alice) or B's (charlie) request, approved at once, then provisioned: ACTIVE or QUEUED."""
    allocation, _ = services.request_allocation(
        tenant_id=(world.tenant_b if b else world.tenant_a).pk,
        pool_id=pool.pk,
        profile=profile,
        count=kw.get("count", 1),
        lease_hours=lease_hours,
        purpose="queue test",
        actor=world.charlie if b else world.alice,
    )
    assert allocation.status == Allocation.Status.APPROVED
    return provision_allocation(allocation_id=allocation.pk)


def release(world: World, allocation: Allocation) -> Allocation:
    """Release by a platform admin, and the teardown done (the simulated backend has nothing to delete)."""
    services.release_allocation(allocation_id=allocation.pk, actor=world.root)
    return services.provisioning.teardown_allocation(allocation_id=allocation.pk)


def backdate(allocation: Allocation, *, activated_h: float, ended_h: float | None = None) -> None:
    """Given, not a rule under test: the request ran from `activated_h` hours ago (to `ended_h` hours ago)."""
    now = timezone.now()
    Allocation.objects.filter(pk=allocation.pk).update(
        activated_at=now - timedelta(hours=activated_h),
        ended_at=None if ended_h is None else now - timedelta(hours=ended_h),
    )


def nodes_of(allocation: Allocation) -> set[str]:
    return set(allocation.placements.values_list("gpu__node__name", flat=True))


# Two transactions at once on PostgreSQL (real threads): tests/queue/test_withdrawn_during_pass.py and
# tests/admission/test_hold_budget_locked.py.
def until(done: Callable[[], bool]) -> None:
    """Poll (short intervals) until `done`; a bound only against a hung thread, not a timed assertion."""
    for _ in range(2000):
        if done():
            return
        time.sleep(0.005)
    raise AssertionError("the other transactions never got there")


def waiting_on_a_lock() -> bool:
    """Some backend is blocked by another one now. Read from pg_blocking_pids, not from pg_stat_activity's wait event:
    a backend whose blocker just committed still shows its lock wait until it wakes up, which read as "still
    waiting" once a pass had in fact got its lock (a flake under load)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE cardinality(pg_blocking_pids(pid)) > 0")
        return bool(cursor.fetchone()[0])


def in_transaction(work: Callable[[], object], started: threading.Event, finish: threading.Event) -> threading.Thread:
    """A thread that runs `work` in a transaction and commits only once `finish` is set."""

    def run() -> None:
        try:
            with transaction.atomic():
                work()
                started.set()
                finish.wait(20)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@dataclass
class PassBehindPool:
    """An admission pass started while another transaction holds the pool (a placement step): it has locked the
    pool's queued requests and waits for the pool's lock until `free_pool`."""

    holder: threading.Thread
    pool_free: threading.Event
    thread: threading.Thread
    admitted: list[list[int]] = field(default_factory=list)

    def free_pool(self) -> None:
        self.pool_free.set()
        self.holder.join()


def start_pass_behind_pool(pool_id: int) -> PassBehindPool:
    pool_held, pool_free = threading.Event(), threading.Event()
    holder = in_transaction(lambda: lock_pool(pool_id=pool_id), pool_held, pool_free)
    pool_held.wait(20)
    admitted: list[list[int]] = []

    def run_pass() -> None:
        try:
            admitted.append([a.pk for a in admit_queued(pool_id=pool_id)])
        finally:
            connection.close()

    thread = threading.Thread(target=run_pass)
    thread.start()
    until(waiting_on_a_lock)
    return PassBehindPool(holder, pool_free, thread, admitted)
