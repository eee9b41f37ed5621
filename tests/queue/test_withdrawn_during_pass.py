"""A request queued after an admission pass took its locks and withdrawn while the pass runs is never admitted
(PostgreSQL, real threads): the pass tries only the requests it holds locked (services/queue.py `admit_queued`).

Before, the pass read the pool's queued requests again under the pool's lock and tried them all; one queued after
its first lock was not locked, so its withdrawal could commit before its try, whose update (by pk) set the withdrawn
row back to APPROVED and placed it, its quota already given back."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.utils import timezone

from allocations import services
from allocations.models import Allocation, Quota
from tests.conftest import World
from tests.queue.helpers import ask, in_transaction, small_pool, start_pass_behind_pool, until, waiting_on_a_lock

pytestmark = pytest.mark.django_db(transaction=True)
Status = Allocation.Status


def test_a_request_queued_after_the_pass_locked_and_withdrawn_during_it_is_not_admitted(world: World):
    # given: one H100 with a 1g.10gb on it, Team A's 7g.80gb queued (no room), Team B's 1g.10gb approved (it fits)
    assert connection.vendor == "postgresql"
    pool = small_pool(world)
    assert ask(world, pool, "1g.10gb").status == Status.ACTIVE
    whole = ask(world, pool, "7g.80gb")
    assert whole.status == Status.QUEUED
    late, _ = services.request_allocation(
        tenant_id=world.tenant_b.pk, pool_id=pool.pk, profile="1g.10gb", count=1, lease_hours=8, purpose="late",
        actor=world.charlie,
    )  # fmt: skip
    # and: another transaction holds the pool (a placement step), so the pass, started now, locks the queued 7g.80gb
    # and waits for the pool
    passing = start_pass_behind_pool(pool.pk)
    # when: meanwhile Team B's request is queued (given: as its placement step leaves it), and Charlie withdraws it
    # in a transaction that commits only after the pass has got the pool and gone on
    Allocation.objects.filter(pk=late.pk).update(status=Status.QUEUED, queued_at=timezone.now())
    withdrawn, commit = threading.Event(), threading.Event()
    withdrawal = in_transaction(
        lambda: services.release_allocation(allocation_id=late.pk, actor=world.charlie), withdrawn, commit
    )
    withdrawn.wait(20)
    passing.free_pool()
    until(lambda: not passing.thread.is_alive() or waiting_on_a_lock())  # done, or waiting for the withdrawal's lock
    commit.set()
    withdrawal.join()
    passing.thread.join()
    # then: the withdrawal stands; the pass admitted nothing (the 7g.80gb still has no room)
    late.refresh_from_db()
    assert (late.status, late.placements.count()) == (Status.WITHDRAWN, 0)
    assert passing.admitted == [[]]
    # and: Team B's quota holds nothing (the withdrawal gave it back and nothing took it again)
    assert Quota.objects.get(tenant=world.tenant_b, pool=pool).compute_slices_used == 0
