"""A lender's room made by moves alone is held (issue 15, allocations/cohorts/fence.py): a request within its
tenant's guarantee in a cohort, refused for fragmentation alone, is rescued by moves (services/compaction.py
rescue_with_moves) and no notice is given; the slot the moves free is kept for it from the plan's start until it
is placed there, and let go when the plan fails (PostgreSQL, simulated fleet)."""

from __future__ import annotations

from django.utils import timezone

from allocations.cohorts.fence import Fence, HeldSlot, pool_fences
from allocations.models import Allocation, MovePlan, NodePool, SliceMove
from allocations.services.moves import advance_move_plan
from allocations.services.provisioning import provision_allocation
from allocations.services.queue import admit_queued
from tests.cohorts.helpers import verbs
from tests.cohorts.layout import cohort_node, put
from tests.compaction.world import where
from tests.conftest import World
from tests.queue.helpers import ask

Status = Allocation.Status


def full_pool(world: World, *, movable: bool) -> tuple[NodePool, Allocation]:
    """Given: two H100s; Team A guaranteed 14 / 16, Team B 4 / 4, in one cohort, nothing borrowed. GPU 0 holds B's
    1g.10gb at start 0 (`movable`) and A's 3g.40gb at 4, GPU 1 A's 4g.40gb at 0. Returns (pool, B's 1g.10gb)."""
    pool = cohort_node(world, slug="mr", gpus=2, a=(14, 16), b=(4, 4))
    three = ask(world, pool, "3g.40gb")
    put(pool, ask(world, pool, "4g.40gb"), 1, 0)
    lone = put(pool, ask(world, pool, "1g.10gb", b=True), 0, 0, movable=movable)
    put(pool, three, 0, 4)
    return pool, lone


def rescued_lender(world: World) -> tuple[NodePool, Allocation, Allocation, MovePlan]:
    """Given (`full_pool`, B's slice movable): A asks for a 4g.40gb (start 0 only): one move of B's slice to GPU 1
    makes room at GPU 0's start 0. Returns (pool, lender, the moved, the plan)."""
    pool, lone = full_pool(world, movable=True)
    lender = ask(world, pool, "4g.40gb")
    assert lender.status == Status.APPROVED and lender.borrowed_compute_slices == 0
    assert not Allocation.objects.exclude(reclaim_at=None).exists()  # moves alone: no notice
    plan = MovePlan.objects.get(for_allocation=lender, status=MovePlan.Status.APPLYING)
    assert [(m.allocation_id, m.to_gpu.index) for m in plan.moves.all()] == [(lone.pk, 1)]
    return pool, lender, lone, plan


def test_the_room_moves_alone_make_is_the_lender_s_until_it_is_placed_there(world: World):
    pool, lender, lone, plan = rescued_lender(world)
    # then: the slot the moves free is held for the lender from the plan's start (audited)
    gpu_0 = pool.nodes.get().gpus.get(index=0).pk
    assert pool_fences(pool.pk) == [Fence(lender.pk, (HeldSlot(gpu_0, "mr-node-0", 0, 0, 4),))]
    assert "reclaim_room" in verbs(lender)
    # when: the move is made (the plan's end queues the lender's provisioning, which has not run yet)
    while plan.status == MovePlan.Status.APPLYING:
        plan = advance_move_plan(plan_id=plan.pk)
    assert plan.status == MovePlan.Status.DONE and where(lone)[0][0] == 1
    # and: B asks for a 3g.40gb within its guarantee: it would fit only at GPU 0's start 0, the freed room
    other = ask(world, pool, "3g.40gb", b=True)
    # then: it waits, told for whom the room is held, and so does it after an admission pass
    assert other.status == Status.QUEUED and f"held for request #{lender.pk}" in other.status_message
    assert admit_queued(pool_id=pool.pk) == []
    assert pool_fences(pool.pk) != []
    # when: the lender's provisioning runs: it gets the room, and the fence ends with its wait
    lender = provision_allocation(allocation_id=lender.pk)
    assert lender.status == Status.ACTIVE and where(lender) == [(0, 0)]
    assert pool_fences(pool.pk) == []


def test_a_failed_rescue_plan_lets_the_room_go(world: World):
    pool, lender, _, plan = rescued_lender(world)
    move = SliceMove.objects.get(plan=plan)
    # given: another request of B's took the move's destination on GPU 1 meanwhile (placed outside the room)
    taken = ask(world, pool, "1g.10gb", b=True)
    assert taken.status == Status.ACTIVE and where(taken)[0][0] == 1
    put(pool, taken, 1, move.to_start)
    # and: B's 2g.20gb goes to GPU 1 as well, not into the room (GPU 0's start 2, the first fit, is held)
    first = ask(world, pool, "2g.20gb", b=True)
    assert first.status == Status.ACTIVE and where(first) == [(1, 4)]
    # when: the plan reaches the move: it fails there
    while plan.status == MovePlan.Status.APPLYING:
        plan = advance_move_plan(plan_id=plan.pk)
    assert plan.status == MovePlan.Status.FAILED
    # then: no room is held for the lender any more: B's next 2g.20gb goes into the slots it held
    assert pool_fences(pool.pk) == []
    other = ask(world, pool, "2g.20gb", b=True)
    assert other.status == Status.ACTIVE and where(other) == [(0, 2)]


def test_a_rescue_started_by_an_admission_pass_keeps_the_room_and_is_not_an_admission(world: World):
    # given: nothing may move yet: A's 4g.40gb waits in the queue, with nothing to take back and no room held
    pool, lone = full_pool(world, movable=False)
    lender = ask(world, pool, "4g.40gb")
    assert lender.status == Status.QUEUED and lender.reclaim_room == []
    # and: idle reclaim flags B's slice (nobody uses it): it may move now
    Allocation.objects.filter(pk=lone.pk).update(idle_since=timezone.now())
    # when: the next admission pass tries the lender: a rescue plan is started for it
    assert admit_queued(pool_id=pool.pk) == []
    # then: it is not counted as admitted (it waits, APPROVED, for the plan's end) and its room is held
    lender.refresh_from_db()
    assert lender.status == Status.APPROVED and "admit" not in verbs(lender)
    assert MovePlan.objects.get(for_allocation=lender).status == MovePlan.Status.APPLYING
    assert [(f.lender_id, [(s.index, s.start) for s in f.slots]) for f in pool_fences(pool.pk)] == [
        (lender.pk, [(0, 0)])
    ]
