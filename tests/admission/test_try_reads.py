"""One admission try reads its pool's layout and demand once (issue 14), on PostgreSQL: a queued request that does not
fit is planned unforced, forced, then offered a rescue plan, and each step used to read both again."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from allocations import services
from allocations.models import Allocation
from allocations.placement import plan_slices, read_once_per_try, read_pool, recent_demand
from allocations.services.lifecycle import record_placements
from allocations.services.queue import admit_queued
from tests.admission.helpers import holding_pool
from tests.conftest import World
from tests.queue.helpers import ask, release

pytestmark = pytest.mark.django_db
Status = Allocation.Status

# The statements read_pool and recent_demand run (one of each per read).
LAYOUT_READ = '"allocations_sliceplacement"."blocked_starts" AS "blocked_starts"'
DEMAND_READ = 'SUM("allocations_allocation"."count") AS "n"'


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
