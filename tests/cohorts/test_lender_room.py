"""The room a reclaim frees stays its lender's (issue 15, allocations/cohorts/fence.py): while the notices run and
after the release, no other request (a borrower's, another lender's) is placed in the slots planned for the
lender, and the admission pass after the release gives them to it (PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta

from allocations import services
from allocations.cohorts.fence import Fence, HeldSlot, fence_hit, plan_room, pool_fences
from allocations.models import Allocation, Node, SlicePlacement
from allocations.placement import PlannedSlice
from allocations.services.cohort_handover import hand_over_withdrawn
from allocations.services.cohort_reclaim import reclaim_due_borrowed
from allocations.services.queue import admit_queued
from tests.cohorts.helpers import ask_c, lender_waits, verbs
from tests.conftest import World
from tests.queue.helpers import ask

Status = Allocation.Status


def test_the_planned_room_free_slots_included_is_held_for_the_lender_until_it_is_admitted_there(world: World):
    lender, borrowed, team_c = lender_waits(world)
    pool = lender.pool
    # then: the lender's room is planned where its 4g.40gb goes once the borrowed slices are gone, with the free
    # slots next to them, and audited
    lender.refresh_from_db()
    node_1 = SlicePlacement.objects.filter(allocation=borrowed[0]).values_list("gpu_id", flat=True).get()
    assert lender.reclaim_room == [{"gpu": node_1, "node": "q1-node-1", "index": 0, "start": 0, "size": 4}]
    assert "reclaim_room" in verbs(lender)
    # when: during the grace, a borrower asks for a 1g.10gb and another lender (Team C, within its guarantee) for a
    # 2g.20gb: each would fit only in the free slots 2-3 of the lender's room
    borrower = ask(world, pool, "1g.10gb", b=True)
    other_lender = ask_c(world, team_c, "2g.20gb")
    # then: both wait in the queue, told for whom the room is held; nothing was placed there
    for waiting in (borrower, other_lender):
        assert waiting.status == Status.QUEUED, waiting.status_message
        assert f"held for request #{lender.pk}" in waiting.status_message
    assert not SlicePlacement.objects.filter(allocation__in=[borrower, other_lender]).exists()
    # when: the grace is over: both borrowed slices are taken back and released (their copies queue)
    deadline = Allocation.objects.get(pk=borrowed[0].pk).reclaim_at
    assert reclaim_due_borrowed(now=deadline + timedelta(seconds=1)) == {"reclaimed": 2}
    for allocation in borrowed:
        services.provisioning.teardown_allocation(allocation_id=allocation.pk)
    # and: a fresh request of the borrower comes before the admission pass: the freed room is still held
    late = ask(world, pool, "1g.10gb", b=True)
    assert late.status == Status.QUEUED and f"held for request #{lender.pk}" in late.status_message
    # when: the admission pass runs (the releases asked for it)
    admitted = admit_queued(pool_id=pool.pk)
    # then: the lender is admitted first, into its room, and the fence ends with its wait
    assert [a.pk for a in admitted] == [lender.pk]
    lender.refresh_from_db()
    assert lender.status == Status.ACTIVE and lender.reclaim_room == []
    assert list(SlicePlacement.objects.filter(allocation=lender).values_list("gpu_id", "start")) == [(node_1, 0)]
    # and: the pool is full again: the others still wait, and a second pass admits nothing
    assert admit_queued(pool_id=pool.pk) == []
    assert Allocation.objects.filter(pk__in=[borrower.pk, other_lender.pk, late.pk], status=Status.QUEUED).count() == 3


def test_a_request_that_fits_outside_the_room_is_placed_there_at_once(world: World):
    lender, _, _ = lender_waits(world)
    pool = lender.pool
    # given: a third node joins the pool during the grace
    services.register_node(pool_id=pool.pk, name="q1-node-2", gpu_count=1, actor=world.root)
    # when: the borrower asks for a 1g.10gb
    elsewhere = ask(world, pool, "1g.10gb", b=True)
    # then: it is placed outside the held room, at once
    assert elsewhere.status == Status.ACTIVE
    assert set(elsewhere.placements.values_list("gpu__node__name", flat=True)) == {"q1-node-2"}


def test_a_withdrawn_lender_frees_its_room(world: World):
    lender, _, team_c = lender_waits(world)
    # when: the lender's request is withdrawn
    services.release_allocation(allocation_id=lender.pk, actor=world.alice)
    # then: the room is no longer held, at once; its notices are called off by the hand-over task (no lender waits)
    lender.refresh_from_db()
    assert lender.reclaim_room == []
    assert hand_over_withdrawn(lender_id=lender.pk) == 0
    assert not Allocation.objects.filter(reclaimed_for=lender, reclaim_at__isnull=False).exists()
    # and: Team C's 2g.20gb goes there
    other_lender = ask_c(world, team_c, "2g.20gb")
    assert other_lender.status == Status.ACTIVE, other_lender.status_message
    assert list(other_lender.placements.values_list("gpu__node__name", "start")) == [("q1-node-1", 2)]


def test_on_kubernetes_the_room_is_the_scheduler_s_first_fit_and_a_slice_passes_only_where_it_is_predicted_outside(
    world: World, settings
):
    lender, borrowed, _ = lender_waits(world)
    node_1 = SlicePlacement.objects.filter(allocation=borrowed[0]).values_list("gpu_id", flat=True).get()
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    # when: the room is planned where the scheduler picks the slot (DynamicMIG)
    [held] = plan_room(lender, [b.pk for b in borrowed])
    # then: it is the slot the scheduler's first fit gives a 4g.40gb on that GPU once they are gone
    assert held == HeldSlot(gpu=node_1, node="q1-node-1", index=0, start=0, size=4)
    fences = [Fence(lender_id=lender.pk, slots=(held,))]

    def one(start: int, size: int) -> list[PlannedSlice]:
        return [PlannedSlice(node_1, "q1-node-1", 0, start, size, device_name="")]

    # and: a slice predicted inside it runs into the fence; one predicted outside passes
    assert fence_hit(fences, one(2, 1), predicted=True) == fences[0]
    assert fence_hit(fences, one(6, 1), predicted=True) is None
    # when: a claim on that GPU still waits for the scheduler (the order it is allocated in may shift the slots)
    Allocation.objects.filter(pool=lender.pool, tenant=world.tenant_a, status=Status.ACTIVE).update(
        status=Status.PROVISIONING
    )
    # then: the prediction is not trusted there: the whole GPU is held
    assert fence_hit(fences, one(6, 1), predicted=True) == fences[0]
    assert fence_hit(fences, one(6, 1), predicted=False) is None  # the simulated fleet: our own slot choice


def test_a_room_the_lender_cannot_use_once_freed_is_let_go(world: World):
    lender, borrowed, _ = lender_waits(world)
    pool = lender.pool
    # given: the grace is over and the borrowed slices are gone, but the node of the lender's room left meanwhile
    deadline = Allocation.objects.get(pk=borrowed[0].pk).reclaim_at
    assert reclaim_due_borrowed(now=deadline + timedelta(seconds=1)) == {"reclaimed": 2}
    for allocation in borrowed:
        services.provisioning.teardown_allocation(allocation_id=allocation.pk)
    Node.objects.filter(pool=pool, name="q1-node-1").update(state=Node.State.GONE)
    assert [f.lender_id for f in pool_fences(pool.pk)] == [lender.pk]
    # when: the admission pass cannot place the lender
    assert admit_queued(pool_id=pool.pk) == []
    # then: it still waits, but holds no room any more (audited): nothing it could use is kept from others
    lender.refresh_from_db()
    assert lender.status == Status.QUEUED and lender.reclaim_room == []
    assert pool_fences(pool.pk) == []
    assert verbs(lender).count("reclaim_room") == 2
