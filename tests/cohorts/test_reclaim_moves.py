"""Room for a lender by reclaim and moves together (allocations/cohorts/rescue.py `plan_room`), pure: no database."""

from __future__ import annotations

from allocations.cohorts.rescue import plan_room
from allocations.mig.fleet import Fleet, Gpu, Instance, Node, PlacementRequest
from tests.cohorts.test_reclaim_choice import H100, candidate


def node(*gpus: list[tuple[str, int, str]]) -> Fleet:
    """One node with these GPUs; each GPU's instances as (profile, start, owner)."""
    return Fleet([Node("n0", [Gpu("n0", k, H100, [Instance(p, s, o) for p, s, o in g]) for k, g in enumerate(gpus)])])


def test_one_move_clears_a_gpu_held_by_a_small_slice_nobody_borrows():
    # GPU 0 holds one guaranteed 1g (nothing to take back), GPU 1 has room for it: a 7g needs a whole GPU
    pool = node([("1g.10gb", 0, "5")], [("4g.40gb", 0, "6")])
    request = PlacementRequest("7g.80gb")
    plan = plan_room(pool, request, [], movable={"5"})
    assert plan is not None and plan.reclaims == []
    assert [(m.owner, m.from_gpu, m.to_gpu) for m in plan.moves] == [("5", 0, 1)]
    assert plan.placement is not None and (plan.placement.gpu_index, plan.placement.start) == (0, 0)
    # nothing may move: no plan
    assert plan_room(pool, request, [], movable=set()) is None


def test_a_take_back_and_a_move_together_when_neither_alone_makes_room():
    # GPU 0: a borrowed 1g (tenant 2) and a movable 2g that is not borrowed; GPU 1 has room for the 2g at start 4
    pool = node([("1g.10gb", 0, "1"), ("2g.20gb", 2, "5")], [("4g.40gb", 0, "6")])
    borrowed = candidate(1, 1, 1, age_h=1)
    request = PlacementRequest("7g.80gb")
    plan = plan_room(pool, request, [borrowed], movable={"5"})
    assert plan is not None
    assert plan.reclaims == [borrowed]
    assert [(m.owner, m.to_gpu, m.to_start) for m in plan.moves] == [("5", 1, 4)]
    # its tenant is not above its guarantee: nothing may be taken from it, and moving the 2g alone is not enough
    assert plan_room(pool, request, [borrowed], movable={"5"}, caps={2: (0, 0)}) is None


def test_reclaim_alone_when_it_is_enough_and_no_moves_when_the_request_fits():
    pool = node([("1g.10gb", 0, "1")], [("4g.40gb", 0, "6"), ("1g.10gb", 6, "5")])
    borrowed = candidate(1, 1, 1, age_h=1)
    plan = plan_room(pool, PlacementRequest("7g.80gb"), [borrowed], movable={"1", "5"})
    # taking the borrowed 1g back frees GPU 0 without moving anyone (pick_fitting's answer, unchanged)
    assert plan is not None and plan.reclaims == [borrowed] and plan.moves == ()
    # a 3g fits now at GPU 1's start 4: room is not what it lacks, nothing moves
    assert plan_room(pool, PlacementRequest("3g.40gb"), [], movable={"1", "5"}) is None
