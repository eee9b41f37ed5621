"""The queue's rules on PostgreSQL (issue 15): queued instead of failed, admission on events, fair order with
decay, priority then FIFO inside a tenant, the starvation bound, withdraw."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from allocations import services
from allocations.models import Allocation, Node, Quota
from allocations.queue_reservation import Reservation, pool_reservation
from allocations.queue_state import pool_queue, queued_in_order
from allocations.services.lifecycle import mark_allocation_failed
from allocations.services.queue import admit_all_queued, admit_queued
from allocations.services.queue_priority import set_allocation_priority
from tenants.errors import InvalidInput, InvalidTransition, NotAllowed
from tenants.models import AuditEvent
from tests.conftest import World
from tests.queue.helpers import ask, backdate, nodes_of, release, small_pool

Status = Allocation.Status
ADMIT = "allocations.tasks.admit_queued_task"


def used(world: World, pool, b: bool = False) -> tuple[int, int]:
    quota = Quota.objects.get(tenant=world.tenant_b if b else world.tenant_a, pool=pool)
    return quota.compute_slices_used, quota.memory_slices_used


def verbs(allocation: Allocation) -> list[str]:
    return list(
        AuditEvent.objects.filter(object_type="allocation", object_id=str(allocation.pk))
        .order_by("id")
        .values_list("verb", flat=True)
    )


def sent(callbacks) -> list[str]:
    return [c.func.__self__.name for c in callbacks if hasattr(c.func, "__self__")]


def test_a_request_that_does_not_fit_waits_queued_with_its_quota_held_and_can_be_withdrawn(world: World):
    # given: the pool's only GPU taken whole
    pool = small_pool(world)
    assert ask(world, pool, "7g.80gb").status == Status.ACTIVE
    # when: Team B asks for one more slice
    waiting = ask(world, pool, "1g.10gb", b=True)
    # then: it waits in the queue instead of failing, its quota held, the step audited
    assert waiting.status == Status.QUEUED
    assert waiting.queued_at is not None
    assert waiting.status_message.startswith("Waiting in Queue pool q1's queue: no free layout fits 1 x 1g.10gb")
    assert used(world, pool, b=True) == (1, 1)
    assert verbs(waiting) == ["request", "auto_approve", "queue"]
    assert not waiting.placements.exists()
    # when: its requester withdraws it
    withdrawn = services.release_allocation(allocation_id=waiting.pk, actor=world.charlie)
    # then: withdrawn, the quota given back
    assert withdrawn.status == Status.WITHDRAWN
    assert used(world, pool, b=True) == (0, 0)


def test_a_release_queues_one_admission_pass_which_admits_what_now_fits_once(
    world: World, django_capture_on_commit_callbacks
):
    # given: a whole GPU held, and two requests queued behind it
    pool = small_pool(world)
    whole = ask(world, pool, "7g.80gb")
    four = ask(world, pool, "4g.40gb", b=True)
    three = ask(world, pool, "3g.40gb", b=True)
    assert (four.status, three.status) == (Status.QUEUED, Status.QUEUED)
    # when: the whole GPU is released
    with django_capture_on_commit_callbacks() as callbacks:
        assert release(world, whole).status == Status.RELEASED
    # then: the release asked for an admission pass through the outbox
    assert ADMIT in sent(callbacks)
    # when: the pass runs
    admitted = admit_queued(pool_id=pool.pk)
    # then: both fit the freed GPU and are active, each admitted once
    assert sorted(a.pk for a in admitted) == sorted([four.pk, three.pk])
    for allocation in (four, three):
        allocation.refresh_from_db()
        assert allocation.status == Status.ACTIVE
        assert verbs(allocation).count("admit") == 1
    # and: a second pass (a redelivered task) admits nothing more
    assert admit_queued(pool_id=pool.pk) == []
    assert used(world, pool, b=True) == (7, 8)


def test_an_admission_pass_leaves_what_still_does_not_fit_exactly_as_it_was(world: World):
    # given: a 4g.40gb held and a 7g.80gb queued
    pool = small_pool(world)
    ask(world, pool, "4g.40gb")
    big = ask(world, pool, "7g.80gb", b=True)
    before = (big.status, big.queued_at, big.status_message, verbs(big))
    # when
    assert admit_queued(pool_id=pool.pk) == []
    # then: nothing changed, not even the audit log
    big.refresh_from_db()
    assert (big.status, big.queued_at, big.status_message, verbs(big)) == before


def test_a_failure_that_frees_slots_and_a_new_node_each_ask_for_an_admission_pass(
    world: World, django_capture_on_commit_callbacks
):
    # given: a full GPU and a queued request
    pool = small_pool(world)
    whole = ask(world, pool, "7g.80gb")
    waiting = ask(world, pool, "7g.80gb", b=True)
    # when: a node joins the pool
    with django_capture_on_commit_callbacks() as callbacks:
        services.register_node(pool_id=pool.pk, name="q1-node-new", gpu_count=1, actor=world.root)
    # then: an admission pass is asked for, and admits the request on the new node
    assert ADMIT in sent(callbacks)
    [admitted] = admit_queued(pool_id=pool.pk)
    assert admitted.pk == waiting.pk and nodes_of(admitted) == {"q1-node-new"}
    # when: the first request fails, with a third one waiting
    third = ask(world, pool, "7g.80gb")
    assert third.status == Status.QUEUED
    with django_capture_on_commit_callbacks() as callbacks:
        mark_allocation_failed(allocation_id=whole.pk, reason="the node broke")
    # then: its cleanup asks for a pass too
    assert ADMIT in sent(callbacks)
    assert [a.pk for a in admit_queued(pool_id=pool.pk)] == [third.pk]


def test_a_release_in_a_pool_without_a_queue_asks_for_nothing(world: World, django_capture_on_commit_callbacks):
    pool = small_pool(world)
    held = ask(world, pool, "1g.10gb")
    with django_capture_on_commit_callbacks() as callbacks:
        release(world, held)
    assert ADMIT not in sent(callbacks)


def test_the_tenant_with_the_smaller_decayed_share_goes_first(world: World, settings):
    # given: Team A has held a 4g.40gb for the last 8 hours (two half-lives), Team B a 3g.40gb only just now
    settings.FATIA_QUEUE_HALF_LIFE_S = 4 * 3600
    pool = small_pool(world)
    a_held = ask(world, pool, "4g.40gb")
    backdate(a_held, activated_h=8)
    ask(world, pool, "3g.40gb", b=True)
    # and: Team A queued a 4g.40gb before Team B did
    a_waiting = ask(world, pool, "4g.40gb")
    b_waiting = ask(world, pool, "4g.40gb", b=True)
    # then: B's share (about 0 of 14) is below A's (4 x 3/4 = 3 of 14): B goes first
    assert [a.pk for a in queued_in_order(pool)] == [b_waiting.pk, a_waiting.pk]
    # when: A's 4g.40gb is released: room for one 4g.40gb
    release(world, a_held)
    admitted = admit_queued(pool_id=pool.pk)
    # then: B's is admitted, A's waits first in line
    assert [a.pk for a in admitted] == [b_waiting.pk]
    assert [(e.allocation.pk, e.position) for e in pool_queue(pool)] == [(a_waiting.pk, 1)]


def test_usage_long_ago_has_decayed_so_the_older_request_goes_first(world: World, settings):
    # given: Team A held the whole GPU for 2 hours, ten half-lives ago; Team B holds a 3g.40gb since an hour
    settings.FATIA_QUEUE_HALF_LIFE_S = 3600
    pool = small_pool(world)
    old = ask(world, pool, "7g.80gb")
    release(world, old)
    backdate(old, activated_h=12, ended_h=10)
    b_held = ask(world, pool, "3g.40gb", b=True)
    backdate(b_held, activated_h=1)
    ask(world, pool, "4g.40gb", b=True)  # the GPU is full
    # and: Team A queued before Team B
    a_waiting = ask(world, pool, "4g.40gb")
    b_waiting = ask(world, pool, "4g.40gb", b=True)
    # then: A's old usage weighs 7 x (2^-10 - 2^-12) = 0.005 slices, B's 3 x (1 - 2^-1) = 1.5: A goes first
    assert [a.pk for a in queued_in_order(pool)] == [a_waiting.pk, b_waiting.pk]
    # and: with a half-life of 100 hours A's use still counts, 7 x (2^-0.1 - 2^-0.12) = 0.09 against B's
    # 3 x (1 - 2^-0.01) = 0.02: B goes first
    settings.FATIA_QUEUE_HALF_LIFE_S = 100 * 3600
    assert [a.pk for a in queued_in_order(pool)] == [b_waiting.pk, a_waiting.pk]


def test_inside_a_tenant_higher_priority_first_then_first_come_first_served(world: World):
    # given: the GPU full, and Team A's two requests queued one after the other
    pool = small_pool(world)
    whole = ask(world, pool, "7g.80gb", b=True)
    first = ask(world, pool, "4g.40gb")
    second = ask(world, pool, "4g.40gb")
    assert [a.pk for a in queued_in_order(pool)] == [first.pk, second.pk]
    # when: a member tries to reorder
    with pytest.raises(NotAllowed):
        set_allocation_priority(allocation_id=second.pk, priority=5, actor=world.alice)
    # and: the manager gives a value out of range
    with pytest.raises(InvalidInput) as bad:
        set_allocation_priority(allocation_id=second.pk, priority=101, actor=world.mallory)
    assert bad.value.errors == {"priority": ["Priority is a whole number from -100 to 100."]}
    # when: the manager puts the second first
    set_allocation_priority(allocation_id=second.pk, priority=5, actor=world.mallory)
    # then: it goes first, and the change is audited
    assert [a.pk for a in queued_in_order(pool)] == [second.pk, first.pk]
    assert AuditEvent.objects.filter(verb="set_priority", object_id=str(second.pk)).get().after == {"priority": 5}
    # when: room for one 4g.40gb frees up
    release(world, whole)
    # then: the second is admitted, the first waits
    assert [a.pk for a in admit_queued(pool_id=pool.pk)] == [second.pk]
    first.refresh_from_db()
    assert first.status == Status.QUEUED
    # and: a running request's priority no longer changes
    with pytest.raises(InvalidTransition):
        set_allocation_priority(allocation_id=second.pk, priority=1, actor=world.mallory)


def starving_setup(world: World):
    """Node 0: Team A's 1g.10gb whose lease ends in 1 h; node 1: Team A's 7g.80gb for 8 h; Team B's 7g.80gb
    queued since two hours."""
    pool = small_pool(world, nodes=2)
    short = ask(world, pool, "1g.10gb", lease_hours=1)
    whole = ask(world, pool, "7g.80gb")
    assert nodes_of(short) == {"q1-node-0"} and nodes_of(whole) == {"q1-node-1"}
    big = ask(world, pool, "7g.80gb", b=True)
    Allocation.objects.filter(pk=big.pk).update(queued_at=timezone.now() - timedelta(hours=2))
    return pool, short, big


def test_past_the_starvation_bound_the_pool_reserves_room_for_the_head_of_line_request(world: World, settings):
    # given: the bound is one hour, and Team B's 7g.80gb has waited two
    settings.FATIA_QUEUE_RESERVE_AFTER_S = 3600
    pool, short, big = starving_setup(world)
    # then: the node whose lease ends first (where the future free layout fits it soonest) is reserved
    assert pool_reservation(pool) == Reservation(allocation_id=big.pk, node="q1-node-0")
    # when: a small request comes that would fit only on that node
    small = ask(world, pool, "1g.10gb")
    # then: it is not placed where it would block the starving request: it waits
    assert small.status == Status.QUEUED
    # when: the short lease ends
    release(world, short)
    admitted = admit_queued(pool_id=pool.pk)
    # then: the starving request gets the node, the small one keeps waiting
    assert [a.pk for a in admitted] == [big.pk]
    assert nodes_of(admitted[0]) == {"q1-node-0"}


def test_a_node_reserved_for_a_borrower_does_not_block_a_request_within_its_guarantee(world: World, settings):
    # given: the same starving 7g.80gb, but it borrows from its cohort (given, not a rule under test: its
    # borrowed part recorded as the cohort accounting records it)
    settings.FATIA_QUEUE_RESERVE_AFTER_S = 3600
    pool, _, big = starving_setup(world)
    Allocation.objects.filter(pk=big.pk).update(borrowed_compute_slices=7, borrowed_memory_slices=8)
    # then: the node is reserved for it, as for a borrower
    assert pool_reservation(pool) == Reservation(allocation_id=big.pk, node="q1-node-0", for_borrower=True)
    # when: Team A, within its guarantee, asks for a slice that fits only on that node
    small = ask(world, pool, "1g.10gb")
    # then: it is placed there: guaranteed capacity is not held back for borrowed slices
    assert small.status == Status.ACTIVE and nodes_of(small) == {"q1-node-0"}


def test_below_the_starvation_bound_small_requests_fill_the_gaps(world: World, settings):
    # given: the same pool, but a bound of three hours
    settings.FATIA_QUEUE_RESERVE_AFTER_S = 3 * 3600
    pool, _, _ = starving_setup(world)
    assert pool_reservation(pool) is None
    # when / then: the small request is placed next to the short lease at once
    small = ask(world, pool, "1g.10gb")
    assert small.status == Status.ACTIVE and nodes_of(small) == {"q1-node-0"}


def test_the_estimated_start_is_slot_aware(world: World):
    # given: on each of two GPUs a 4g.40gb for 8 hours and a 3g.40gb for 1 hour
    pool = small_pool(world, nodes=2)
    for _ in range(2):
        assert ask(world, pool, "4g.40gb", lease_hours=8).status == Status.ACTIVE
        assert ask(world, pool, "3g.40gb", lease_hours=1, b=True).status == Status.ACTIVE
    # when: Team B waits for a 4g.40gb and then a 3g.40gb
    four = ask(world, pool, "4g.40gb", b=True)
    three = ask(world, pool, "3g.40gb", b=True)
    now = timezone.now()
    entries = {e.allocation.pk: e for e in pool_queue(pool, now=now)}
    # then: after 1 hour six slices are free, but not a layout that fits a 4g.40gb (it starts at slot 0 only,
    # held for 8 hours): the 4g.40gb starts in 8 hours, the 3g.40gb in 1
    assert entries[four.pk].position == 1 and entries[three.pk].position == 2
    assert entries[four.pk].estimate is not None and entries[three.pk].estimate is not None
    assert abs((entries[four.pk].estimate.starts_at - now) - timedelta(hours=8)) < timedelta(minutes=1)
    assert abs((entries[three.pk].estimate.starts_at - now) - timedelta(hours=1)) < timedelta(minutes=1)


def test_the_safety_sweep_admits_room_freed_without_an_event(world: World):
    # given: a queued request, and its room freed without a pass (the release committed as it joined the queue)
    pool = small_pool(world)
    whole = ask(world, pool, "7g.80gb")
    waiting = ask(world, pool, "1g.10gb", b=True)
    Allocation.objects.filter(pk=whole.pk).update(status=Status.RELEASED)  # given: its slots no longer held
    # when
    assert admit_all_queued() == {pool.pk: 1}
    # then
    waiting.refresh_from_db()
    assert waiting.status == Status.ACTIVE


def test_a_request_no_layout_of_the_pool_could_ever_hold_fails_instead_of_waiting_for_ever(world: World):
    # given: a node with one GPU and one with two, and a request for two whole GPUs on one node, approved by the
    # manager; then the two-GPU node leaves (a request no node could hold is refused when made: test_never_fits...)
    pool = small_pool(world)
    services.register_node(pool_id=pool.pk, name="q1-wide", gpu_count=2, actor=world.root)
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=pool.pk,
        profile="7g.80gb",
        count=2,
        lease_hours=8,
        purpose="too big",
        actor=world.alice,
    )
    services.approve_allocation(allocation_id=allocation.pk, actor=world.mallory)
    Node.objects.filter(name="q1-wide").update(state=Node.State.GONE)
    # when
    failed = services.provision_allocation(allocation_id=allocation.pk)
    # then: failed with why, the quota given back
    assert failed.status == Status.FAILED
    assert failed.status_message == (
        "Queue pool q1 cannot hold 2 x 7g.80gb even with every GPU free: a request's slices go on one node, where at "
        "most 1 x 7g.80gb fit; the quota was given back. Try fewer slices or a smaller profile."
    )
    assert used(world, pool) == (0, 0)


def test_a_pool_with_no_ready_node_queues_the_request_for_when_one_comes(world: World):
    # given: the pool's only node is not ready
    pool = small_pool(world)
    Node.objects.filter(pool=pool).update(state=Node.State.GONE)
    # when / then: the request waits (a node that comes back may hold it), it does not fail
    assert ask(world, pool, "7g.80gb").status == Status.QUEUED
