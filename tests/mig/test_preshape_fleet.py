"""Pool-wide pre-shaping scored by evidence (allocations/mig/preshape_fleet.py): a GPU changes only where the
pool's free instances then cover more of the next requests; busy GPUs and needed large instances stay."""

from __future__ import annotations

from allocations.mig.catalog import load_catalog
from allocations.mig.fleet import Instance
from allocations.mig.layout import geometry
from allocations.mig.preshape_fleet import coverage, plan_fleet_preshape

H100 = load_catalog().model("NVIDIA H100 80GB HBM3")
WHOLE = [Instance("7g.80gb", 0)]
BALANCED = [Instance("1g.10gb", 0), Instance("1g.10gb", 1), Instance("2g.20gb", 2), Instance("3g.40gb", 4)]


def test_coverage_counts_what_the_free_instances_serve_of_the_expected_requests() -> None:
    assert coverage({"1g.10gb": 3, "7g.80gb": 5}, {"1g.10gb": 8.0, "7g.80gb": 2.0}) == 3 + 2


def test_a_pool_that_already_covers_the_mix_is_left_alone() -> None:
    # given: four GPUs with a free 7g.80gb each, and a mix of whole GPUs only
    gpus = [list(WHOLE) for _ in range(4)]
    # when / then
    assert plan_fleet_preshape(H100, gpus, {"7g.80gb": 1.0}, horizon=4) == []


def test_a_missing_profile_is_made_where_it_costs_least_and_every_step_is_valid() -> None:
    # given: 1g.10gb is all anyone asks for; GPU 0 holds a busy 3g.40gb beside free balanced instances, GPU 1 a
    # free 7g.80gb, GPU 2 the balanced carve
    gpus = [
        [Instance("3g.40gb", 4, owner="a"), Instance("1g.10gb", 0), Instance("1g.10gb", 1), Instance("2g.20gb", 2)],
        list(WHOLE),
        list(BALANCED),
    ]
    # when
    changes = plan_fleet_preshape(H100, gpus, {"1g.10gb": 1.0}, horizon=16, max_gpus=3)
    # then: each change adds 1g.10gb, keeps the held instance, and passes the MIG rules at every step
    assert changes
    geom = geometry(H100)
    for change in changes:
        before = gpus[change.position]
        assert all(x in change.layout_after for x in before if not x.free)
        layout = [(x.profile, x.start) for x in before]
        for op in change.operations:
            if op.action == "destroy":
                layout.remove((op.profile, op.start))
            else:
                layout.append((op.profile, op.start))
            assert not geom.violations(layout)
        made = sum(1 for x in change.layout_after if x.free and x.profile == "1g.10gb")
        assert made > sum(1 for x in before if x.free and x.profile == "1g.10gb")
        assert change.gain >= 1.0


def test_busy_gpus_are_never_touched_and_a_needed_whole_gpu_stays() -> None:
    # given: half the requests want a whole GPU and the pool has exactly one free 7g.80gb; GPU 0 is busy
    gpus = [list(BALANCED), list(WHOLE), list(BALANCED)]
    # when
    changes = plan_fleet_preshape(H100, gpus, {"1g.10gb": 0.5, "7g.80gb": 0.5}, busy={0}, horizon=4, max_gpus=3)
    # then
    assert all(change.position not in (0, 1) for change in changes)


def test_whole_free_gpus_can_be_kept_as_they_are() -> None:
    # given: 1g.10gb is all anyone asks for; GPU 0 holds a busy 3g.40gb, GPU 1 holds nothing
    gpus = [[Instance("3g.40gb", 0, owner="a"), Instance("3g.40gb", 4)], list(WHOLE)]
    # when
    kept = plan_fleet_preshape(H100, gpus, {"1g.10gb": 1.0}, horizon=8, keep_free_gpus=True)
    free_too = plan_fleet_preshape(H100, gpus, {"1g.10gb": 1.0}, horizon=8)
    # then: only the GPU that holds something is reshaped when whole free GPUs are kept
    assert [c.position for c in kept] == [0]
    assert 1 in {c.position for c in free_too}
