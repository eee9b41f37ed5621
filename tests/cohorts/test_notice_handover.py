"""Notices handed over (issue 15, services/cohort_handover.py): a lender admitted elsewhere (or withdrawn) before its
notices are carried out hands them to a waiting lender whose room they make; the deadline is kept, the room is held
for the new lender, and it is admitted by that deadline (PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta

from allocations import services
from allocations.models import Allocation, SlicePlacement
from allocations.services.cohort_handover import hand_over_withdrawn
from allocations.services.cohort_notices import HANDOVER_TASK
from allocations.services.cohort_reclaim import reclaim_due_borrowed
from allocations.services.queue import admit_queued
from tests.cohorts.helpers import lender_waits, sent, verbs
from tests.conftest import World
from tests.queue.helpers import ask, release

Status = Allocation.Status


def test_a_notice_handed_over_keeps_its_deadline_and_the_second_lender_is_admitted_by_it(world: World):
    lender, borrowed, _ = lender_waits(world)
    pool = lender.pool
    deadline = Allocation.objects.get(pk=borrowed[0].pk).reclaim_at
    node_1 = SlicePlacement.objects.filter(allocation=borrowed[0]).values_list("gpu_id", flat=True).get()
    # given: Team A asks for a second 4g.40gb: no room, and every borrowed slice is on notice for the first lender,
    # so it has no notice of its own to give
    second = ask(world, pool, "4g.40gb")
    assert second.status == Status.QUEUED
    assert not Allocation.objects.filter(reclaimed_for=second).exists()
    # when: Team A's first 4g.40gb (node 0, start 0) ends, and the admission pass admits the first lender there
    first_4g = Allocation.objects.filter(pool=pool, tenant=world.tenant_a, profile="4g.40gb", status=Status.ACTIVE)
    release(world, first_4g.get())
    assert [a.pk for a in admit_queued(pool_id=pool.pk)] == [lender.pk]
    # then: the notices are the second lender's now, due at the time their owners were told, and audited
    for allocation in borrowed:
        allocation.refresh_from_db()
        assert allocation.reclaimed_for_id == second.pk and allocation.reclaim_at == deadline
        assert "reclaim_handover" in verbs(allocation)
        assert "reclaim_cancel" not in verbs(allocation)
    # and: the room their release makes is held for the second lender
    second.refresh_from_db()
    assert second.reclaim_room == [{"gpu": node_1, "node": "q1-node-1", "index": 0, "start": 0, "size": 4}]
    # when: the deadline passes: they are taken back, and the admission pass runs
    assert reclaim_due_borrowed(now=deadline + timedelta(seconds=1)) == {"reclaimed": 2}
    for allocation in borrowed:
        services.provisioning.teardown_allocation(allocation_id=allocation.pk)
    admitted = admit_queued(pool_id=pool.pk)
    # then: the second lender is admitted into that room, by the first lender's deadline, not a new grace later
    assert [a.pk for a in admitted] == [second.pk]
    assert list(SlicePlacement.objects.filter(allocation=second).values_list("gpu_id", "start")) == [(node_1, 0)]


def test_notices_no_waiting_lender_needs_are_called_off(world: World):
    lender, borrowed, _ = lender_waits(world)
    pool = lender.pool
    # when: the lender is admitted elsewhere, no other lender waiting
    first_4g = Allocation.objects.filter(pool=pool, tenant=world.tenant_a, profile="4g.40gb", status=Status.ACTIVE)
    release(world, first_4g.get())
    assert [a.pk for a in admit_queued(pool_id=pool.pk)] == [lender.pk]
    # then: the borrowers keep their slices, told so
    for allocation in borrowed:
        allocation.refresh_from_db()
        assert allocation.reclaim_at is None and allocation.reclaimed_for_id is None
        assert "reclaim_cancel" in verbs(allocation)


def test_a_withdrawn_lenders_notices_are_handed_over_after_commit_deadline_kept(
    world: World, django_capture_on_commit_callbacks
):
    lender, borrowed, _ = lender_waits(world)
    pool = lender.pool
    deadline = Allocation.objects.get(pk=borrowed[0].pk).reclaim_at
    node_1 = SlicePlacement.objects.filter(allocation=borrowed[0]).values_list("gpu_id", flat=True).get()
    # given: a second lender of Team A waits for a 4g.40gb, with no notice of its own to give
    second = ask(world, pool, "4g.40gb")
    assert second.status == Status.QUEUED
    # when: the first lender is withdrawn
    with django_capture_on_commit_callbacks() as callbacks:
        services.release_allocation(allocation_id=lender.pk, actor=world.alice)
    # then: the hand-over is queued through the outbox, not done under the withdrawal's quota lock
    assert HANDOVER_TASK in sent(callbacks)
    # when: the task runs
    assert hand_over_withdrawn(lender_id=lender.pk) == 2
    # then: the notices are the second lender's, due when their owners were told, audited as a hand-over
    for allocation in borrowed:
        allocation.refresh_from_db()
        assert allocation.reclaimed_for_id == second.pk and allocation.reclaim_at == deadline
        assert verbs(allocation)[-1] == "reclaim_handover"
        assert "reclaim_cancel" not in verbs(allocation)
    # and: the room they free is held for the second lender
    second.refresh_from_db()
    assert second.reclaim_room == [{"gpu": node_1, "node": "q1-node-1", "index": 0, "start": 0, "size": 4}]
    # and: running it again changes nothing (the task is idempotent)
    assert hand_over_withdrawn(lender_id=lender.pk) == 0
    assert [verbs(a)[-1] for a in borrowed] == ["reclaim_handover", "reclaim_handover"]
    # when: the deadline passes: they are taken back, and the admission pass places the second lender in that room
    assert reclaim_due_borrowed(now=deadline + timedelta(seconds=1)) == {"reclaimed": 2}
    for allocation in borrowed:
        services.provisioning.teardown_allocation(allocation_id=allocation.pk)
    assert [a.pk for a in admit_queued(pool_id=pool.pk)] == [second.pk]
    assert list(SlicePlacement.objects.filter(allocation=second).values_list("gpu_id", "start")) == [(node_1, 0)]
