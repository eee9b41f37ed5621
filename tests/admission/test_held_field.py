"""`Allocation.held` is the truth of "held" (issue 14): set by the hold, cleared in the same transaction by whatever
ends it (placement, forcing, a forced request that must wait for room instead, withdrawal, failure), and what every
reader goes by: the queue API, the allocation API, the dashboard, the due-hold step and the starvation bound."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.test import Client
from django.utils import timezone

from allocations import services
from allocations.admission.due import admit_due_holds
from allocations.models import Allocation, NodePool
from allocations.queue_reservation import pool_reservation
from allocations.services.admission import pools_with_due_holds
from allocations.services.queue import admit_queued
from tests.admission.helpers import hold_on, holding_pool
from tests.conftest import World
from tests.queue.helpers import ask, release

pytestmark = pytest.mark.django_db
Status = Allocation.Status


def fresh(allocation: Allocation) -> Allocation:
    return Allocation.objects.get(pk=allocation.pk)


def past_its_bound(allocation: Allocation) -> None:
    """Given, not a rule under test: the clock has passed the request's deadline."""
    Allocation.objects.filter(pk=allocation.pk).update(held_until=timezone.now() - timedelta(seconds=1))


def test_a_held_request_is_marked_held_and_a_request_waiting_for_room_is_not(world: World):
    pool = holding_pool(world)
    held = ask(world, pool, "1g.10gb")
    assert (held.status, fresh(held).held) == (Status.QUEUED, True)
    # the pool's GPU taken whole, the next small request waits for room, not by choice
    release(world, held)
    ask(world, pool, "7g.80gb")
    waiting = ask(world, pool, "1g.10gb", b=True)
    assert (waiting.status, fresh(waiting).held) == (Status.QUEUED, False)


def test_a_pass_that_holds_it_again_keeps_it_held_and_a_good_place_clears_it(world: World):
    # given: one GPU full of seven 1g.10gb, one empty GPU, and a 1g.10gb held because its only place breaks that one
    pool = holding_pool(world, nodes=2, hold=False)
    smalls = [ask(world, pool, "1g.10gb") for _ in range(7)]
    pool = hold_on(world, pool)
    held = ask(world, pool, "1g.10gb", b=True)
    # when: a pass runs before any release (its try is rolled back)
    assert admit_queued(pool_id=pool.pk) == []
    # then: still held
    assert fresh(held).held is True
    # when: a release makes a good place and the pass places it
    release(world, smalls[0])
    assert [a.pk for a in admit_queued(pool_id=pool.pk)] == [held.pk]
    # then: placed, no longer held
    assert (fresh(held).status, fresh(held).held) == (Status.ACTIVE, False)


def test_forced_at_its_bound_it_is_no_longer_held(world: World):
    pool = holding_pool(world)
    held = ask(world, pool, "1g.10gb")
    past_its_bound(held)
    assert admit_due_holds() == {pool.pk: 1}
    assert (fresh(held).status, fresh(held).held) == (Status.ACTIVE, False)


def test_forced_when_it_no_longer_fits_it_waits_for_room_not_held_and_is_not_due_again(world: World):
    # given: a held 1g.10gb, then the pool's GPU taken whole by another tenant's request (it strands nothing)
    pool = holding_pool(world)
    held = ask(world, pool, "1g.10gb")
    assert ask(world, pool, "7g.80gb", b=True).status == Status.ACTIVE
    past_its_bound(held)
    # when: the minute step runs its pass: forced, it fits nowhere
    assert admit_due_holds() == {pool.pk: 0}
    # then: it waits for room, its deadline kept (it stays planned forced), no longer held nor due
    now = fresh(held)
    assert (now.status, now.held, now.held_until is not None) == (Status.QUEUED, False, True)
    assert "held to keep room" not in now.status_message
    assert pools_with_due_holds() == []


def test_withdrawn_or_failed_it_is_no_longer_held(world: World):
    pool = holding_pool(world)
    first = ask(world, pool, "1g.10gb")
    second = ask(world, pool, "1g.10gb", b=True)
    assert fresh(first).held and fresh(second).held
    services.release_allocation(allocation_id=first.pk, actor=world.alice)
    services.mark_allocation_failed(allocation_id=second.pk, reason="The node left.")
    assert [(a.status, a.held) for a in (fresh(first), fresh(second))] == [
        (Status.WITHDRAWN, False),
        (Status.FAILED, False),
    ]


def test_the_database_refuses_a_held_request_that_is_not_queued(world: World):
    pool = holding_pool(world)
    held = ask(world, pool, "1g.10gb")
    with pytest.raises(IntegrityError), transaction.atomic():
        Allocation.objects.filter(pk=held.pk).update(status=Status.APPROVED)


def test_the_apis_and_the_dashboard_read_the_field(world: World):
    # given: a held request, and its message stripped of the phrase (the field, not the words, says held)
    pool = holding_pool(world)
    held = ask(world, pool, "1g.10gb")
    Allocation.objects.filter(pk=held.pk).update(status_message="Waiting in the queue.")
    # then: the queue API and the allocation API say held
    api = world.client(world.alice)
    [row] = api.get("/api/v1/queue/", {"pool": pool.slug}).json()
    assert (row["held"], row["held_until"] is not None) == (True, True)
    assert api.get(f"/api/v1/allocations/{held.pk}/").json()["held"] is True
    # and: the dashboard's queued 1g.10gb is said to be held
    client = Client()
    client.force_login(world.alice)
    page = client.get(f"/dashboard/?pool={pool.pk}").content.decode()
    assert '<td class="num" data-queued>1 <small class="dash-held" data-held' in page
    assert "(1 held)</small>" in page


def test_a_held_request_gets_no_starvation_reservation(world: World, settings):
    # given: a held request that has been queued longer than the starvation bound
    settings.FATIA_QUEUE_RESERVE_AFTER_S = 60
    pool = holding_pool(world)
    held = ask(world, pool, "1g.10gb")
    Allocation.objects.filter(pk=held.pk).update(queued_at=timezone.now() - timedelta(hours=2))
    # then: no node is reserved for it: it fits now and its own bound places it
    assert pool_reservation(pool) is None
    # and: the same request not held (given: admission off and the mark cleared, as its next pass would), the
    # bound reserves its node
    services.update_node_pool(pool_id=pool.pk, admission=NodePool.Admission.OFF, actor=world.root)
    Allocation.objects.filter(pk=held.pk).update(held=False)
    reservation = pool_reservation(pool)
    assert reservation is not None and reservation.allocation_id == held.pk
