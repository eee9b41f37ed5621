"""A held request another transaction holds (its withdrawal in progress) does not count against the hold budget
(issue 14; PostgreSQL, real threads): allocations/admission/outcomes.py `recent_churn_and_held` skips it.

Before, the plan counted it as held (it still read QUEUED and held, the withdrawal uncommitted) while the admission
pass could not try it (the pass takes later arrivals with SKIP LOCKED): a request the budget would have let the pool
hold was placed instead, for good, because of room nobody was going to take."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from allocations import services
from allocations.admission.outcomes import hold_history
from allocations.models import Allocation
from tests.admission.helpers import holding_pool
from tests.conftest import World
from tests.queue.helpers import ask, in_transaction, start_pass_behind_pool

pytestmark = pytest.mark.django_db(transaction=True)
Status = Allocation.Status


def fresh(allocation: Allocation) -> Allocation:
    return Allocation.objects.get(pk=allocation.pk)


def withdrawing(world: World, allocation: Allocation) -> tuple[threading.Thread, threading.Event]:
    """Charlie's withdrawal of `allocation`, in progress: it holds the row until the returned event is set."""
    locked, commit = threading.Event(), threading.Event()
    thread = in_transaction(
        lambda: services.release_allocation(allocation_id=allocation.pk, actor=world.charlie), locked, commit
    )
    locked.wait(20)
    return thread, commit


def test_a_held_request_being_withdrawn_does_not_count_and_the_next_one_is_held(world: World):
    # given: one H100 without releases (a budget of 0.4 x 7 = 2.8 compute slices), two 1g.10gb held
    assert connection.vendor == "postgresql"
    pool = holding_pool(world)
    first, second = ask(world, pool, "1g.10gb"), ask(world, pool, "1g.10gb", b=True)
    assert [(a.status, a.held) for a in (first, second)] == [(Status.QUEUED, True)] * 2
    # and: Charlie is withdrawing the second one (uncommitted)
    thread, commit = withdrawing(world, second)
    try:
        # then: the plan is told the pool holds the first alone
        assert hold_history(pool, force=False).held == 1.0
        # when: a third 1g.10gb comes
        third = ask(world, pool, "1g.10gb")
        # then: held (1 + 1 <= 2.8); before, the second still counted and it was placed
        assert (third.status, third.held) == (Status.QUEUED, True)
    finally:
        commit.set()
        thread.join()
    assert fresh(second).status == Status.WITHDRAWN


def test_a_pass_does_not_count_a_held_request_it_could_not_lock(world: World):
    # given: a holding pool (one H100 without releases, budget 2.8) with two 1g.10gb held
    pool = holding_pool(world)
    first, third = ask(world, pool, "1g.10gb"), ask(world, pool, "1g.10gb")
    assert [(a.status, a.held) for a in (first, third)] == [(Status.QUEUED, True)] * 2
    # and: another transaction holds the pool (a placement step), so the pass, started now, locks both and waits
    passing = start_pass_behind_pool(pool.pk)
    # when: meanwhile a second 1g.10gb is held (as that placement step leaves it) and Charlie starts withdrawing it,
    # so the pass, once it has the pool, skips it (SKIP LOCKED)
    second, _ = services.request_allocation(
        tenant_id=world.tenant_b.pk, pool_id=pool.pk, profile="1g.10gb", count=1, lease_hours=8, purpose="late",
        actor=world.charlie,
    )  # fmt: skip
    now = timezone.now()
    Allocation.objects.filter(pk=second.pk).update(
        status=Status.QUEUED, queued_at=now, held=True, held_until=now + timedelta(minutes=15)
    )
    thread, commit = withdrawing(world, second)
    passing.free_pool()
    passing.thread.join()
    commit.set()
    thread.join()
    # then: each retry counted the other alone (1 + 1 <= 2.8): both held again; before, the second counted too and
    # the first was placed (1 + 1 + 1 > 2.8)
    assert passing.admitted == [[]]
    assert [(fresh(a).status, fresh(a).held) for a in (first, third)] == [(Status.QUEUED, True)] * 2
    assert fresh(second).status == Status.WITHDRAWN
