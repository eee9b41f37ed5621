"""The portal's hold budget binds, and an admission pass reads the pool's hold history once (issue 14), on PostgreSQL.

`ours-hold` in a fill (no release) holds only while the compute held stays within HOLD_BUDGET of the pool's; a fresh
engine per decision had held nothing, so the portal tells it the compute of the pool's requests held now, the
request planned excluded (a retried held request must not count against itself). An admission pass reads that, the
outcomes and the churn once for all its tries and keeps them current itself."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from allocations.admission.outcomes import hold_history, read_once_per_pass
from allocations.mig.policies import HoldingFragmentationAware
from allocations.models import Allocation
from allocations.services.admission import end_hold
from allocations.services.queue import admit_queued
from tests.admission.helpers import hold_on, holding_pool
from tests.conftest import World
from tests.queue.helpers import ask

pytestmark = pytest.mark.django_db
Status = Allocation.Status
Outcome = Allocation.HoldOutcome


def fresh(allocation: Allocation) -> Allocation:
    return Allocation.objects.get(pk=allocation.pk)


def test_once_held_requests_reach_the_budget_the_next_one_is_placed_and_a_retried_one_is_still_held(world: World):
    # given: one H100 (7 compute slices: a budget of 0.4 x 7 = 2.8), no release ever, whole GPUs asked for lately;
    # a 1g.10gb would break the only whole GPU, so it is held: the first hold is free, the second fits the budget
    assert HoldingFragmentationAware.HOLD_BUDGET == 0.4
    pool = holding_pool(world)
    first, second = ask(world, pool, "1g.10gb"), ask(world, pool, "1g.10gb", b=True)
    assert [(a.status, a.held) for a in (first, second)] == [(Status.QUEUED, True)] * 2
    assert hold_history(pool, force=False).held == 2.0  # the engine is told the pool holds 2 compute slices
    # when: an admission pass retries both (each planned as if fresh: 1 held besides it, 1 + 1 <= 2.8)
    assert admit_queued(pool_id=pool.pk) == []
    # then: each is held again: a retried request does not count against itself
    assert [(fresh(a).status, fresh(a).held) for a in (first, second)] == [(Status.QUEUED, True)] * 2
    # when: a third 1g.10gb comes: holding it too would hold 3 > 2.8
    third = ask(world, pool, "1g.10gb")
    # then: placed instead (before, a fresh engine held nothing and held it too)
    assert (third.status, third.held) == (Status.ACTIVE, False)


def test_a_pass_reads_the_pools_hold_history_once_for_all_its_tries(world: World):
    # given: a holding pool whose only GPU is taken whole, and five 1g.10gb waiting for room (each try plans unforced)
    pool = holding_pool(world, hold=False)
    whole = ask(world, pool, "7g.80gb", b=True)
    assert whole.status == Status.ACTIVE
    pool = hold_on(world, pool)
    waiting = [ask(world, pool, "1g.10gb") for _ in range(5)]
    assert {(a.status, a.held) for a in waiting} == {(Status.QUEUED, False)}
    # when: a pass tries all five
    with CaptureQueriesContext(connection) as queries:
        assert admit_queued(pool_id=pool.pk) == []
    # then: the outcomes, and the churn with the held requests, read once (before: once per try, 5 each)
    sql = [q["sql"] for q in queries.captured_queries]
    assert len([q for q in sql if "hold_ended_at IS NOT NULL" in q]) == 1
    assert len([q for q in sql if "activated_at IS NOT NULL" in q]) == 1


def test_what_a_pass_keeps_current_reads_as_a_fresh_read_would(world: World):
    # given: two held 1g.10gb in a holding pool, and the pass's history read
    pool = holding_pool(world)
    lost, kept = ask(world, pool, "1g.10gb"), ask(world, pool, "1g.10gb", b=True)
    with read_once_per_pass(pool) as memo:
        assert hold_history(pool, force=False).held == 2.0
        # when: in the pass, one of them no longer fits and waits for room (how keep_hold records it)
        end_hold(fresh(lost), outcome=Outcome.LOST, now=timezone.now())
        Allocation.objects.filter(pk=lost.pk).update(held=False)
        memo.set_held(lost, held=False)
        with CaptureQueriesContext(connection) as queries:
            during = hold_history(pool, force=False)
        assert not queries.captured_queries  # not read again
    # then: what the pass kept is what a read after it gives
    after = hold_history(pool, force=False)
    assert during.held == after.held == float(kept.compute_slices)
    assert during.churn == after.churn
    assert {p: pytest.approx(v) for p, v in during.outcomes.items()} == after.outcomes
    assert after.outcomes["1g.10gb"] == pytest.approx((1.0, 1.0, 0.0))
