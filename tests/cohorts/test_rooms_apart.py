"""Two lenders' rooms never share a GPU (issue 15, allocations/cohorts/fence.py `unfenced`): what is taken back or
moved for the second is chosen on the pool without the GPU held for the first, so its notice goes where its own
room can be made, not to a borrowed slice whose release frees nothing it could be given (PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta

from allocations import services
from allocations.cohorts.fence import pool_fences
from allocations.models import Allocation, MovePlan, SlicePlacement
from allocations.services.cohort_handover import hand_over_withdrawn
from allocations.services.cohort_notices import HANDOVER_TASK
from allocations.services.cohort_reclaim import reclaim_due_borrowed
from allocations.services.moves import advance_move_plan
from allocations.services.queue import admit_queued
from tests.cohorts.helpers import sent
from tests.cohorts.layout import cohort_node, put
from tests.compaction.world import where
from tests.conftest import World
from tests.queue.helpers import ask

Status = Allocation.Status


def noticed_for(lender: Allocation) -> list[int]:
    return sorted(Allocation.objects.filter(reclaimed_for=lender).values_list("pk", flat=True))


def test_the_second_lender_s_take_back_and_room_keep_off_the_first_lender_s_gpu(world: World):
    # given: three H100s; Team A is guaranteed the pool, Team B nothing (all it runs is borrowed)
    pool = cohort_node(world, slug="ap", gpus=3, a=(21, 24), b=(0, 0))
    put(pool, ask(world, pool, "3g.40gb"), 0, 4)
    put(pool, ask(world, pool, "3g.40gb"), 1, 4)
    put(pool, ask(world, pool, "3g.40gb"), 2, 0)
    put(pool, ask(world, pool, "1g.10gb"), 2, 5)
    # and: B's borrowed 1g.10gb at GPU 0's start 0, GPU 1's starts 0 and 2, and, youngest, GPU 2's start 4
    b_0 = put(pool, ask(world, pool, "1g.10gb", b=True), 0, 0)
    b_1 = [put(pool, ask(world, pool, "1g.10gb", b=True), 1, start) for start in (0, 2)]
    b_2 = put(pool, ask(world, pool, "1g.10gb", b=True), 2, 4)
    assert b_0.borrowed_compute_slices == b_2.borrowed_compute_slices == 1
    # when: A asks for a 4g.40gb (start 0 only): taking back GPU 0's 1g.10gb makes its room there
    first = ask(world, pool, "4g.40gb")
    assert first.status == Status.QUEUED and noticed_for(first) == [b_0.pk]
    gpu_0 = pool.nodes.get().gpus.get(index=0).pk
    assert first.reclaim_room == [{"gpu": gpu_0, "node": "ap-node-0", "index": 0, "start": 0, "size": 4}]
    # when: A asks for a 2g.20gb: it fits only in the free slots 2-3 of that room, so it waits too
    second = ask(world, pool, "2g.20gb")
    assert second.status == Status.QUEUED and f"held for request #{first.pk}" in second.status_message
    # and: the next admission pass (any release asks for one) still cannot place either, so each seeks room
    assert admit_queued(pool_id=pool.pk) == []
    # then: its notice goes to the youngest borrowed slice whose release makes room off GPU 0 (GPU 1's at start 2),
    # not to the youngest of all (GPU 2's: its release frees no 2g.20gb place), and its room is planned there
    assert noticed_for(second) == [b_1[1].pk]
    b_2.refresh_from_db()
    assert b_2.reclaim_at is None
    gpu_1 = pool.nodes.get().gpus.get(index=1).pk
    second.refresh_from_db()
    assert second.reclaim_room == [{"gpu": gpu_1, "node": "ap-node-0", "index": 1, "start": 2, "size": 2}]
    assert {f.lender_id for f in pool_fences(pool.pk)} == {first.pk, second.pk}
    # when: the grace is over: both are taken back, and the admission pass runs
    assert reclaim_due_borrowed(now=first.created_at + timedelta(minutes=31)) == {"reclaimed": 2}
    for allocation in (b_0, b_1[1]):
        services.provisioning.teardown_allocation(allocation_id=allocation.pk)
    admitted = [a.pk for a in admit_queued(pool_id=pool.pk)]
    # then: each lender is admitted into its own room, the first round
    assert admitted[:2] == [first.pk, second.pk]
    assert (where(first), where(second)) == ([(0, 0)], [(1, 2)])
    assert pool_fences(pool.pk) == []


def test_the_second_lender_s_rescue_moves_no_slice_into_the_first_lender_s_room(world: World):
    # given: four H100s; Team A is guaranteed more than it runs, Team B nothing (all it runs is borrowed)
    pool = cohort_node(world, slug="ad", gpus=4, a=(35, 40), b=(0, 0))
    put(pool, ask(world, pool, "3g.40gb"), 0, 4)
    put(pool, ask(world, pool, "4g.40gb"), 2, 0)
    put(pool, ask(world, pool, "3g.40gb"), 2, 4)
    put(pool, ask(world, pool, "4g.40gb"), 3, 0)
    # and: GPU 0 holds B's borrowed 1g.10gb at start 0 (free 1-3), GPU 1 B's borrowed 2g.20gb at 0 and A's movable
    # 1g.10gb at 6; GPU 3 has room at 4-7
    b_0 = put(pool, ask(world, pool, "1g.10gb", b=True), 0, 0)
    b_1 = put(pool, ask(world, pool, "2g.20gb", b=True), 1, 0)
    lone = put(pool, ask(world, pool, "1g.10gb"), 1, 6, movable=True)
    # when: A asks for a 4g.40gb: taking back GPU 0's 1g.10gb makes its room there, slots 0-3
    first = ask(world, pool, "4g.40gb")
    assert first.status == Status.QUEUED and noticed_for(first) == [b_0.pk]
    # and: A asks for a 7g.80gb: GPU 1 is its room once B's 2g.20gb is taken back and A's 1g.10gb moved
    second = ask(world, pool, "7g.80gb")
    assert second.status == Status.QUEUED and noticed_for(second) == [b_1.pk]
    # then: the move goes to GPU 3, not to the free slots of the first lender's room on GPU 0 (where it would
    # fail when applied, spending the second lender's one rescue)
    plan = MovePlan.objects.get(for_allocation=second)
    assert [(m.allocation_id, m.to_gpu.index) for m in plan.moves.all()] == [(lone.pk, 3)]
    second.refresh_from_db()
    assert [(s["index"], s["start"], s["size"]) for s in second.reclaim_room] == [(1, 0, 8)]
    # and: the plan applies to the end while both rooms are held
    while plan.status == MovePlan.Status.APPLYING:
        plan = advance_move_plan(plan_id=plan.pk)
    assert plan.status == MovePlan.Status.DONE and where(lone)[0][0] == 3


def test_two_lenders_without_notices_of_their_own_are_handed_rooms_on_different_gpus(
    world: World, django_capture_on_commit_callbacks
):
    # given: two H100s, each with Team A's 3g.40gb at start 4 and Team B's borrowed 1g.10gb at start 0
    pool = cohort_node(world, slug="ah", gpus=2, a=(21, 28), b=(0, 0))
    put(pool, ask(world, pool, "3g.40gb"), 0, 4)
    put(pool, ask(world, pool, "3g.40gb"), 1, 4)
    borrowed = [put(pool, ask(world, pool, "1g.10gb", b=True), gpu, 0) for gpu in (0, 1)]
    # and: A asks for two 3g.40gb at once: both borrowed slices get notice for it, its room is slots 0-3 of each GPU
    first = ask(world, pool, "3g.40gb", count=2)
    assert first.status == Status.QUEUED and noticed_for(first) == sorted(b.pk for b in borrowed)
    deadline = Allocation.objects.get(pk=borrowed[0].pk).reclaim_at
    # and: A asks for two more 3g.40gb, one by one: both wait for the same room, with no notice of their own to give
    # (every borrowed slice is on notice already), so the portal plans no room for either
    waiting = [ask(world, pool, "3g.40gb") for _ in range(2)]
    for lender in waiting:
        lender.refresh_from_db()
        assert lender.status == Status.QUEUED and noticed_for(lender) == [] and lender.reclaim_room == []
    # when: the first lender is withdrawn and its notices are handed over (the task queued after commit)
    with django_capture_on_commit_callbacks() as callbacks:
        services.release_allocation(allocation_id=first.pk, actor=world.alice)
    assert HANDOVER_TASK in sent(callbacks)
    assert hand_over_withdrawn(lender_id=first.pk) == 2
    # then: each waiting lender is handed one notice, deadline kept, and a room on the GPU that notice frees: the
    # rooms are on different GPUs (the second is planned without the GPU the first one's room is on)
    rooms = []
    for lender in waiting:
        lender.refresh_from_db()
        [noticed] = noticed_for(lender)
        assert Allocation.objects.get(pk=noticed).reclaim_at == deadline
        gpu = SlicePlacement.objects.filter(allocation_id=noticed).values_list("gpu__index", flat=True).get()
        assert [(s["index"], s["start"], s["size"]) for s in lender.reclaim_room] == [(gpu, 0, 4)]
        rooms.append(gpu)
    assert sorted(rooms) == [0, 1]
    assert {f.lender_id for f in pool_fences(pool.pk)} == {w.pk for w in waiting}
