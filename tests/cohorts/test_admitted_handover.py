"""An admitted lender's notices are handed over all or none (issue 15; PostgreSQL, real threads): when another
transaction holds one of their borrowed allocations, the admission pass leaves them all standing and hands them over
after commit (services/cohort_handover.py `hand_over_admitted`), as for a withdrawn lender.

Before, the pass handed over (or called off) the free ones alone (SKIP LOCKED) and left the held one standing for the
admitted lender, which the due sweep then called off: the waiting lender got one of the two notices its room needs
and had to give another, a new grace later. And the heirs are only queued requests the pass holds: before, it could
hand them to one queued since its first lock, and wait for that row's lock to write the room (after the pool's: out of
the lock order)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.utils import timezone

from allocations import services
from allocations.models import Allocation
from allocations.services.cohort_handover import notices_left
from allocations.services.cohort_notices import HANDOVER_TASK
from allocations.services.cohort_reclaim import reclaim_borrowed
from allocations.services.outbox import has_open_message
from allocations.services.queue import admit_queued
from allocations.services.queue_priority import set_allocation_priority
from allocations.tasks import hand_over_notices_task
from tests.cohorts.helpers import lender_waits, verbs
from tests.conftest import World
from tests.queue.helpers import ask, in_transaction, release, start_pass_behind_pool, until, waiting_on_a_lock

pytestmark = pytest.mark.django_db(transaction=True)
Status = Allocation.Status


def test_an_admitted_lender_hands_its_notices_over_all_or_none(world: World):
    # given: a lender whose two borrowed 1g.10gb are on notice, and a second lender of Team A waiting for a 4g.40gb
    # with no notice of its own (it needs both borrowed slices back: together they free start 0 of node 1)
    assert connection.vendor == "postgresql"
    lender, borrowed, _ = lender_waits(world)
    pool = lender.pool
    deadline = Allocation.objects.get(pk=borrowed[0].pk).reclaim_at
    second = ask(world, pool, "4g.40gb")
    assert second.status == Status.QUEUED
    # and: another transaction holds one of the borrowed allocations (its owner releasing it, a due sweep)
    held, done = threading.Event(), threading.Event()
    holder = in_transaction(
        lambda: Allocation.objects.select_for_update(no_key=True).filter(pk=borrowed[0].pk).get(), held, done
    )
    held.wait(20)
    try:
        # when: Team A's first 4g.40gb ends and an admission pass admits the first lender in its place
        first_4g = Allocation.objects.get(pool=pool, tenant=world.tenant_a, profile="4g.40gb", status=Status.ACTIVE)
        release(world, first_4g)
        assert [a.pk for a in admit_queued(pool_id=pool.pk)] == [lender.pk]
        # then: neither notice is called off; they stand for the admitted lender, the hand-over queued after commit
        # (before: the free one went to the second lender alone, the held one stayed the admitted lender's)
        assert {Allocation.objects.get(pk=b.pk).reclaimed_for_id for b in borrowed} == {lender.pk}
        assert not any("reclaim_cancel" in verbs(b) for b in borrowed)
        assert has_open_message(HANDOVER_TASK, lender.pk)
        # and: the admitted lender holds no room any more
        lender.refresh_from_db()
        assert lender.reclaim_room == []
        # and: the due step leaves the free one to the hand-over (it calls off no notice of a lender that stopped
        # waiting while its hand-over is queued)
        assert reclaim_borrowed(allocation_id=borrowed[1].pk) == "unchanged"
        # and: the hand-over task, run while the allocation is still held, changes nothing and runs again
        assert hand_over_notices_task.apply(args=[lender.pk]).failed()
        assert notices_left(lender.pk)
    finally:
        done.set()
        holder.join()
    # when: it runs again once the other transaction is done (the outbox sends it again)
    assert hand_over_notices_task.apply(args=[lender.pk]).successful()
    # then: both notices are the second lender's, due when their owners were told
    for allocation in borrowed:
        allocation.refresh_from_db()
        assert (allocation.reclaimed_for_id, allocation.reclaim_at) == (second.pk, deadline)
        assert verbs(allocation)[-1] == "reclaim_handover"
    assert not notices_left(lender.pk)


def test_the_pass_hands_notices_only_to_waiting_lenders_it_holds(world: World):
    # given: a lender whose two borrowed 1g.10gb are on notice, and room for it now (Team A's first 4g.40gb ended)
    lender, borrowed, _ = lender_waits(world)
    pool = lender.pool
    release(world, Allocation.objects.get(pool=pool, tenant=world.tenant_a, profile="4g.40gb", status=Status.ACTIVE))
    late, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk, pool_id=pool.pk, profile="4g.40gb", count=1, lease_hours=8, purpose="late",
        actor=world.alice,
    )  # fmt: skip
    # and: another transaction holds the pool (a placement step), so the pass, started now, locks the lender and waits
    passing = start_pass_behind_pool(pool.pk)
    # when: meanwhile a second 4g.40gb of Team A queues (as that placement step leaves it: a lender the notices' room
    # would fit) and its manager sets its priority, holding its row while the pass goes on
    Allocation.objects.filter(pk=late.pk).update(status=Status.QUEUED, queued_at=timezone.now())
    changing, change_done = threading.Event(), threading.Event()
    priority = in_transaction(
        lambda: set_allocation_priority(allocation_id=late.pk, priority=5, actor=world.mallory), changing, change_done
    )
    changing.wait(20)
    passing.free_pool()
    until(lambda: not passing.thread.is_alive() or waiting_on_a_lock())
    # then: the pass finished without waiting for the row it does not hold (it waited behind the priority change to
    # write the room it handed over, after the pool's lock: out of the lock order, a deadlock where the other
    # transaction then wants a lock the pass holds)
    finished = not passing.thread.is_alive()
    change_done.set()
    priority.join()
    passing.thread.join()
    assert finished
    assert passing.admitted == [[lender.pk]]
    # and: the notices were called off, not handed to the request it does not hold (that one gives its own at its try)
    for allocation in borrowed:
        allocation.refresh_from_db()
        assert allocation.reclaimed_for_id is None and "reclaim_cancel" in verbs(allocation)
