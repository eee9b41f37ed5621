"""One admission try reads its pool's layout and demand once (issue 14), on PostgreSQL: a queued request that does not
fit is planned unforced, forced, then offered a rescue plan, and each step used to read both again. A fresh request's
placement (provision_allocation, either backend) is one try as well (session 13)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from allocations import services
from allocations.cluster.sync import start_provisioning
from allocations.models import Allocation, NodePool
from allocations.placement import plan_slices, read_once_per_try, read_pool, recent_demand
from allocations.services.lifecycle import record_placements
from allocations.services.provisioning import provision_allocation
from allocations.services.queue import admit_queued
from tests.admission.helpers import holding_pool
from tests.cohorts.helpers import cohort_pool
from tests.conftest import World
from tests.queue.helpers import ask, release

pytestmark = pytest.mark.django_db
Status = Allocation.Status

# The statements read_pool and recent_demand run (one of each per read).
LAYOUT_READ = '"allocations_sliceplacement"."blocked_starts" AS "blocked_starts"'
DEMAND_READ = 'SUM("allocations_allocation"."count") AS "n"'


# A statement that reads quota rows (not one that locks them).
QUOTA_READ = 'FROM "allocations_quota"'


def reads(captured: CaptureQueriesContext, statement: str) -> int:
    return len([q for q in captured.captured_queries if statement in q["sql"]])


def test_each_try_of_a_pass_reads_the_layout_and_the_demand_once(world: World):
    # given: a pool with admission on, its GPU taken whole, and three 1g.10gb waiting for room
    pool = holding_pool(world)
    assert ask(world, pool, "7g.80gb").status == Status.ACTIVE
    queued = [ask(world, pool, "1g.10gb", b=True) for _ in range(3)]
    assert {a.status for a in queued} == {Status.QUEUED}
    # when: a pass tries them (none fits: each is planned unforced, forced, and offered a rescue)
    with CaptureQueriesContext(connection) as captured:
        assert admit_queued(pool_id=pool.pk) == []
    # then: one layout read and one demand read per try
    assert (reads(captured, LAYOUT_READ), reads(captured, DEMAND_READ)) == (3, 3)


def test_a_try_that_places_reads_the_layout_afresh_and_the_next_try_too(world: World):
    # given: a whole GPU placed, a 4g.40gb and a 3g.40gb waiting for room behind it
    pool = holding_pool(world, hold=False)
    first = ask(world, pool, "7g.80gb")
    waiting = [ask(world, pool, "4g.40gb", b=True), ask(world, pool, "3g.40gb", b=True)]
    assert {a.status for a in waiting} == {Status.QUEUED}
    # when: the GPU is released and one pass tries both
    release(world, first)
    assert [a.pk for a in admit_queued(pool_id=pool.pk)] == [a.pk for a in waiting]
    # then: the second try planned on the layout the first one's placement left: no slot taken twice
    spots = [(p.gpu_id, s) for a in waiting for p in a.placements.all() for s in range(p.start, p.start + p.size)]
    assert spots and len(spots) == len(set(spots))


def test_within_a_try_the_layout_is_read_once_and_afresh_after_a_placement(world: World):
    # given: a pool (no admission) with a 2g.20gb placed and a 1g.10gb approved, about to be placed
    pool = holding_pool(world, hold=False)
    assert ask(world, pool, "2g.20gb").status == Status.ACTIVE
    approved, _ = services.request_allocation(
        tenant_id=world.tenant_b.pk, pool_id=pool.pk, profile="1g.10gb", count=1, lease_hours=1, purpose="try",
        actor=world.charlie,
    )  # fmt: skip
    with read_once_per_try(pool):
        with CaptureQueriesContext(connection) as captured:
            layout = read_pool(pool)
            [gpu] = layout.fleet.gpus()
            gpu.instances.clear()  # a caller changes its copy
            again = read_pool(pool)
            assert recent_demand(pool) is recent_demand(pool)
        # then: one read of each, and the next caller does not see the first one's change
        assert (reads(captured, LAYOUT_READ), reads(captured, DEMAND_READ)) == (1, 1)
        assert [i.profile for i in again.fleet.gpus()[0].instances] == ["2g.20gb"]
        # when: the try places the 1g.10gb
        planned = plan_slices(pool=pool, profile="1g.10gb", count=1)
        assert planned is not None
        record_placements(allocation=approved, slices=planned)
        # then: the next read sees it
        assert sorted(i.profile for i in read_pool(pool).fleet.gpus()[0].instances) == ["1g.10gb", "2g.20gb"]


def approve(world: World, pool: NodePool, profile: str) -> Allocation:
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_b.pk, pool_id=pool.pk, profile=profile, count=1, lease_hours=1, purpose="fresh",
        actor=world.charlie,
    )  # fmt: skip
    assert allocation.status == Status.APPROVED
    return allocation


def test_a_fresh_request_that_fits_nowhere_reads_the_layout_and_the_demand_once(world: World):
    # given: a pool with admission on, its GPU taken whole, and a fresh 1g.10gb approved
    pool = holding_pool(world)
    assert ask(world, pool, "7g.80gb").status == Status.ACTIVE
    fresh = approve(world, pool, "1g.10gb")
    # when: it is provisioned (planned unforced, forced, offered a rescue: three of each before)
    with CaptureQueriesContext(connection) as captured:
        assert provision_allocation(allocation_id=fresh.pk).status == Status.QUEUED
    # then: one layout read and one demand read
    assert (reads(captured, LAYOUT_READ), reads(captured, DEMAND_READ)) == (1, 1)


def test_a_fresh_request_held_reads_the_layout_and_the_demand_once(world: World):
    # given: a pool with admission on, its only GPU free and its demand whole GPUs: a 1g.10gb would break it
    pool = holding_pool(world)
    fresh = approve(world, pool, "1g.10gb")
    # when: it is provisioned (planned unforced, forced, and what it would strand measured: three of each before)
    with CaptureQueriesContext(connection) as captured:
        held = provision_allocation(allocation_id=fresh.pk)
    # then: held, on one layout read and one demand read
    assert (held.status, held.held) == (Status.QUEUED, True)
    assert (reads(captured, LAYOUT_READ), reads(captured, DEMAND_READ)) == (1, 1)


def test_on_kubernetes_a_fresh_request_held_reads_the_layout_and_the_demand_once(world: World, settings: Any):
    # given: the Kubernetes backend (planning talks to no cluster) and the same pool and request
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    settings.FATIA_KUBECONFIG = "unused: planning talks to no cluster"
    pool = holding_pool(world)
    fresh = approve(world, pool, "1g.10gb")
    # when: its placement step runs
    with CaptureQueriesContext(connection) as captured:
        held = start_provisioning(allocation_id=fresh.pk)
    # then: held, on one layout read and one demand read
    assert (held.status, held.held) == (Status.QUEUED, True)
    assert (reads(captured, LAYOUT_READ), reads(captured, DEMAND_READ)) == (1, 1)


def test_a_block_within_a_try_of_the_same_pool_joins_it(world: World):
    # given: a pool (no admission) with a 1g.10gb approved, and a try in progress that read the layout
    pool = holding_pool(world, hold=False)
    approved = approve(world, pool, "1g.10gb")
    with read_once_per_try(pool):
        assert read_pool(pool).fleet.gpus()[0].instances == []
        # when: a block entered inside it (the backend's own, within the pass's try) places the request
        with read_once_per_try(pool):
            planned = plan_slices(pool=pool, profile="1g.10gb", count=1)
            assert planned is not None
            record_placements(allocation=approved, slices=planned)
        # then: the outer block reads the layout afresh, with the placement
        assert [i.profile for i in read_pool(pool).fleet.gpus()[0].instances] == ["1g.10gb"]


def test_a_lender_in_a_full_pool_reads_its_cohorts_quota_rows_three_times(world: World):
    # given: a cohort whose Team B borrows the pool's two GPUs whole; Team A, within its guarantee, asks for a slice
    pool, _ = cohort_pool(world)
    services.set_tenant_quota(
        tenant_id=world.tenant_a.pk, pool_id=pool.pk, compute_slices_limit=21, memory_slices_limit=24,
        actor=world.root,
    )  # fmt: skip
    assert {ask(world, pool, "7g.80gb", b=True).status for _ in range(2)} == {Status.ACTIVE}
    fresh, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk, pool_id=pool.pk, profile="1g.10gb", count=1, lease_hours=1, purpose="lender",
        actor=world.alice,
    )  # fmt: skip
    # when: it is provisioned (no room: it waits, and a borrowed GPU is given notice for it)
    with CaptureQueriesContext(connection) as captured:
        assert provision_allocation(allocation_id=fresh.pk).status == Status.QUEUED
    assert Allocation.objects.filter(reclaimed_for=fresh).count() == 1
    # then: its quota and its cohort's members read in one statement by the reclaim check (two before), once more
    # when it is queued for room, and the members to give notice among
    locked = len([q for q in captured.captured_queries if QUOTA_READ in q["sql"] and "FOR NO KEY UPDATE" in q["sql"]])
    assert reads(captured, QUOTA_READ) - locked == 3
