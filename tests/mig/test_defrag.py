"""Defragmentation plans for a pool."""

from __future__ import annotations

from allocations.mig.defrag import Destroy, Move, plan_defrag
from allocations.mig.fleet import Fleet, Gpu, Instance, Node, PlacementRequest, SlotChoice

from .brute import model

H100 = "NVIDIA H100 80GB HBM3"


def pool(*layouts: list[Instance]) -> Fleet:
    m = model(H100)
    return Fleet([Node("n1", [Gpu("n1", i, m, list(lay)) for i, lay in enumerate(layouts)])])


def test_it_frees_whole_gpus_by_moving_idle_allocations_and_destroying_free_instances() -> None:
    # given: an idle 4g alone on GPU 0, a busy 3g at slot 4 on GPU 1, a free 1g on GPU 2, a full GPU 3
    fleet = pool(
        [Instance("4g.40gb", 0, "x", idle=True)],
        [Instance("3g.40gb", 4, "y")],
        [Instance("1g.10gb", 3)],
        [Instance("7g.80gb", 0, "z")],
    )
    # when planning for whole GPUs
    plan = plan_defrag(fleet)
    # then the 4g joins the 3g, the free 1g goes, and two GPUs become whole
    assert plan is not None
    assert plan.moves == (Move("x", "4g.40gb", "n1", 0, 0, "n1", 1, 0),)
    assert plan.destroys == (Destroy("n1", 2, "1g.10gb", 3),)
    assert (plan.whole_gpus_before, plan.whole_gpus_after, plan.gpus_freed) == (0, 2, 2)
    assert plan.gain["7g.80gb"] == 2


def test_it_never_moves_a_busy_allocation() -> None:
    # given two GPUs each holding one busy 1g
    fleet = pool([Instance("1g.10gb", 0, "a")], [Instance("1g.10gb", 0, "b")])
    # when planning, then there is nothing to do
    plan = plan_defrag(fleet)
    assert plan is not None and plan.empty and plan.gpus_freed == 0


def test_it_makes_room_for_a_blocked_request_with_one_move() -> None:
    # given an idle 1g on GPU 0 and a busy 3g at slot 4 on GPU 1: a 7g fits nowhere
    fleet = pool([Instance("1g.10gb", 2, "x", idle=True)], [Instance("3g.40gb", 4, "y")])
    # when planning for a 7g.80gb
    plan = plan_defrag(fleet, request=PlacementRequest("7g.80gb"))
    # then the idle 1g moves next to the 3g and the 7g takes GPU 0
    assert plan is not None
    assert plan.moves == (Move("x", "1g.10gb", "n1", 0, 2, "n1", 1, 0),)
    assert plan.destroys == ()
    assert plan.placement == SlotChoice("n1", 0, "7g.80gb", 0)


def test_it_prefers_destroying_a_free_instance_to_moving_an_allocation() -> None:
    # given GPU 0 with an idle 1g and GPU 1 with a free 1g, next to a GPU in use
    fleet = pool([Instance("1g.10gb", 0, "x", idle=True)], [Instance("1g.10gb", 0)], [Instance("3g.40gb", 4, "y")])
    # when planning for a 7g
    plan = plan_defrag(fleet, request=PlacementRequest("7g.80gb"))
    # then the free instance goes and nothing moves
    assert plan is not None
    assert (plan.moves, plan.destroys) == ((), (Destroy("n1", 1, "1g.10gb", 0),))
    assert plan.placement == SlotChoice("n1", 1, "7g.80gb", 0)


def test_it_gives_up_when_no_plan_fits_within_the_move_budget() -> None:
    # given two GPUs each with one idle 1g and nowhere else to go
    fleet = pool([Instance("1g.10gb", 0, "a", idle=True)], [Instance("1g.10gb", 0, "b", idle=True)])
    # when a 7g needs a move but none is allowed, then there is no plan
    assert plan_defrag(fleet, request=PlacementRequest("7g.80gb"), max_moves=0) is None
    # and with one move allowed, one 1g joins the other
    plan = plan_defrag(fleet, request=PlacementRequest("7g.80gb"), max_moves=1)
    assert plan is not None and plan.moves == (Move("a", "1g.10gb", "n1", 0, 0, "n1", 1, 1),)


def test_a_request_that_already_fits_needs_an_empty_plan() -> None:
    # given an empty GPU
    fleet = pool([])
    # when planning for a 7g, then nothing changes and the placement is the empty GPU
    plan = plan_defrag(fleet, request=PlacementRequest("7g.80gb"))
    assert plan is not None and plan.empty and plan.placement == SlotChoice("n1", 0, "7g.80gb", 0)
