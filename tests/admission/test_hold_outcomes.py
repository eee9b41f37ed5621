"""A hold priced by how the pool's recent holds ended (issue 14) on PostgreSQL: each end is recorded where it happens
(placed on a retry, forced at the deadline, lost: forced or retried, it no longer fits), read back per profile and
decayed by the pool's requests since, and the placement steps (simulated and Kubernetes) plan with them."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from allocations.admission.due import admit_due_holds
from allocations.admission.outcomes import CHURN_WINDOW, hold_history, recent_churn, recent_hold_outcomes
from allocations.models import Allocation, NodePool
from allocations.placement import plan_slices, plan_slices_for_scheduler
from allocations.services.queue import admit_queued
from tests.admission.helpers import hold_on, holding_pool
from tests.conftest import World
from tests.queue.helpers import ask, release

pytestmark = pytest.mark.django_db
Status = Allocation.Status
Outcome = Allocation.HoldOutcome


def ended_holds(
    world: World, pool: NodePool, profile: str, outcomes: list[str], *, at: datetime | None = None
) -> list[Allocation]:
    """Given, not a rule under test: requests of `profile` in the pool's history whose holds ended so at `at`
    (released; a blank outcome: never held)."""
    at = at or timezone.now()
    return Allocation.objects.bulk_create(
        Allocation(
            tenant=world.tenant_b, pool=pool, requested_by=world.charlie, profile=profile, count=1, lease_hours=1,
            purpose="held history", compute_slices=2, memory_slices=2, status=Status.RELEASED, ended_at=at,
            held_until=at if outcome else None, hold_outcome=outcome, hold_ended_at=at if outcome else None,
        )
        for outcome in outcomes
    )  # fmt: skip


def past_deadline(allocation: Allocation) -> None:
    """Given (the clock): its bound has passed."""
    Allocation.objects.filter(pk=allocation.pk).update(held_until=timezone.now() - timedelta(seconds=1))


@pytest.mark.parametrize(
    ("outcomes", "held"),
    [
        ([Outcome.LOST] * 3 + [Outcome.PLACED], False),  # mostly lost: holding costs more than the room it keeps
        ([Outcome.PLACED] * 4, True),  # the same demand, holds that paid: held as before
    ],
    ids=["mostly-lost", "placed"],
)
def test_a_pool_whose_recent_holds_of_a_profile_were_mostly_lost_no_longer_holds_it(world: World, outcomes, held):
    # given: a pool that holds a 1g.10gb that would break its only whole GPU, and four earlier 1g.10gb holds
    pool = holding_pool(world)
    ended_holds(world, pool, "1g.10gb", outcomes)
    # then: both placement steps (simulated, and Kubernetes' GPU with the scheduler's slot) decide by those outcomes
    assert (plan_slices(pool=pool, profile="1g.10gb", count=1, force=False) is None) is held
    assert (plan_slices_for_scheduler(pool=pool, profile="1g.10gb", count=1, force=False) is None) is held
    # when: a 1g.10gb is asked for
    request = ask(world, pool, "1g.10gb")
    # then: placed at once where most holds were lost, held where they were placed
    assert request.status == (Status.QUEUED if held else Status.ACTIVE)
    assert request.held is held


def test_a_held_request_that_no_longer_fits_when_forced_is_lost_and_stays_lost_once_placed(world: World):
    # given: one GPU with seven 1g.10gb and one empty GPU; admission on; a 1g.10gb held (it would break the empty one)
    pool = holding_pool(world, nodes=2, hold=False)
    for _ in range(7):
        ask(world, pool, "1g.10gb")
    pool = hold_on(world, pool)
    lost = ask(world, pool, "1g.10gb")
    assert lost.held and lost.hold_outcome == ""
    # and: the empty GPU taken whole meanwhile, and the held request's bound passed
    whole = ask(world, pool, "7g.80gb", b=True)
    assert whole.status == Status.ACTIVE
    past_deadline(lost)
    # when: the minute step tries it forced: it no longer fits
    assert admit_due_holds() == {pool.pk: 0}
    # then: lost (it waits for room), recorded in the pass that found it so
    lost.refresh_from_db()
    assert (lost.status, lost.held, lost.hold_outcome) == (Status.QUEUED, False, Outcome.LOST)
    assert lost.hold_ended_at is not None
    ended_at = lost.hold_ended_at
    # when: room comes back and it is placed after all
    release(world, whole)
    assert [a.pk for a in admit_queued(pool_id=pool.pk)] == [lost.pk]
    # then: its hold stays lost, ended when it was (the first end counts), and reads back as one lost 1g.10gb hold
    lost.refresh_from_db()
    assert (lost.status, lost.hold_outcome, lost.hold_ended_at) == (Status.ACTIVE, Outcome.LOST, ended_at)
    assert {p: tuple(round(x, 2) for x in v) for p, v in recent_hold_outcomes(pool).items()} == {
        "1g.10gb": (1.0, 1.0, 0.0)
    }


def test_outcomes_are_counted_per_profile_and_decay_by_the_pools_requests_since(world: World):
    # given: two 2g.20gb holds that ended an hour ago (lost, forced), a 1g.10gb hold placed on a retry since, and
    # 500 requests between the two ends
    pool = holding_pool(world, hold=False)
    start = timezone.now() - timedelta(hours=1)
    ended_holds(world, pool, "2g.20gb", [Outcome.LOST, Outcome.FORCED], at=start)
    ended_holds(world, pool, "1g.10gb", [Outcome.PLACED], at=start + timedelta(minutes=2))
    Allocation.objects.filter(pool=pool).update(created_at=start - timedelta(minutes=1))  # all asked for before
    later = ended_holds(world, pool, "7g.80gb", [""] * 500, at=start)
    Allocation.objects.filter(pk__in=[a.pk for a in later]).update(created_at=start + timedelta(minutes=1))
    # when
    outcomes = recent_hold_outcomes(pool)
    # then: the 2g.20gb holds weigh half each (500 requests since: the half-life), the 1g.10gb one in full
    assert {p: tuple(round(x, 6) for x in v) for p, v in outcomes.items()} == {
        "2g.20gb": (1.0, 0.5, 0.5),
        "1g.10gb": (1.0, 0.0, 0.0),
    }
    # and: another pool's holds are not this pool's
    other = holding_pool(world, slug="other", hold=False)
    assert recent_hold_outcomes(other) == {}


def test_a_plan_that_may_hold_reads_the_outcomes_in_one_query_and_a_forced_one_reads_none(world: World):
    pool = holding_pool(world)
    ended_holds(world, pool, "2g.20gb", [Outcome.LOST, Outcome.PLACED])
    with CaptureQueriesContext(connection) as forced:
        plan_slices(pool=pool, profile="2g.20gb", count=1)
    with CaptureQueriesContext(connection) as unforced:
        plan_slices(pool=pool, profile="2g.20gb", count=1, force=False)
    assert len(unforced) == len(forced) + 2  # the outcomes, and the pool's churn
    assert len([q for q in unforced.captured_queries if "hold_ended_at" in q["sql"]]) == 1
    assert len([q for q in unforced.captured_queries if "activated_at IS NOT NULL" in q["sql"]]) == 1
    assert not [q for q in forced.captured_queries if "hold_ended_at" in q["sql"]]
    assert not [q for q in forced.captured_queries if "activated_at IS NOT NULL" in q["sql"]]


def test_the_pools_churn_counts_allocations_that_ran_and_ended_since_its_last_requests_began(world: World):
    # given: a pool with CHURN_WINDOW + 10 requests over the last hour, created a minute apart
    pool = holding_pool(world)
    start = timezone.now() - timedelta(hours=2)
    Allocation.objects.filter(pool=pool).update(created_at=start - timedelta(days=1))  # its history: long before
    rows = ended_holds(world, pool, "1g.10gb", [""] * (CHURN_WINDOW + 10), at=start)
    for n, row in enumerate(rows):
        Allocation.objects.filter(pk=row.pk).update(created_at=start + timedelta(minutes=n), ended_at=None)
    oldest_in_window = start + timedelta(minutes=10)
    # and: 5 that ran and ended after the window's oldest request, 1 that ended before it, 3 that ended without
    # ever running (withdrawn: they freed nothing), the rest still running
    ran = [r.pk for r in rows[:6]]
    Allocation.objects.filter(pk__in=ran[:5]).update(
        activated_at=start, ended_at=oldest_in_window + timedelta(seconds=1)
    )
    Allocation.objects.filter(pk=ran[5]).update(activated_at=start, ended_at=oldest_in_window - timedelta(seconds=1))
    Allocation.objects.filter(pk__in=[r.pk for r in rows[6:9]]).update(ended_at=oldest_in_window + timedelta(minutes=1))
    # then: 5 releases over the window's requests
    assert recent_churn(pool) == pytest.approx(5 / CHURN_WINDOW)
    assert hold_history(pool, force=False).churn == pytest.approx(5 / CHURN_WINDOW)
    # and: a forced plan, or a pool that does not hold, reads nothing and tells the engine nothing
    assert hold_history(pool, force=True).churn == 0.0
    assert recent_churn(holding_pool(world, slug="fresh", hold=False)) == 0.0


def test_the_admission_page_shows_how_the_pools_recent_holds_ended(world: World):
    # given: a pool whose three recent 1g.10gb holds ended lost, lost and forced
    pool = holding_pool(world)
    client = Client()
    client.force_login(world.root)
    url = f"/manage/pools/{pool.pk}/admission/"
    assert 'id="outcomes-none"' in client.get(url).content.decode()
    ended_holds(world, pool, "1g.10gb", [Outcome.LOST, Outcome.LOST, Outcome.FORCED])
    # when
    page = client.get(url).content.decode()
    # then: one row, as the price weighs them (2 lost of 3 ended plus the placed pseudo-outcome: 50 %)
    row = page[page.index('id="hold-outcomes"') :]
    cells = [
        '<td data-label="Profile">1g.10gb</td>',
        '<td data-label="Ended">3.0</td>',
        '<td data-label="Placed after a release">0.0</td>',
        '<td data-label="Placed at the deadline">1.0</td>',
        '<td data-label="Lost">2.0</td>',
        '<td data-label="Counted as lost">50 %</td>',
    ]
    for cell in cells:
        assert cell in row
