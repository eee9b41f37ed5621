"""bench/placement_confirm.py: where ``ours-hold``'s cold 8-GPU misses come from, and the fill-left candidate."""

from __future__ import annotations

from allocations.mig.catalog import load_catalog
from bench.placement import Pod
from bench.placement_confirm import HELD, FillLeft, Recording, run, serve
from bench.placement_family import Sample, make_sample
from bench.placement_family import serve as family_serve
from bench.placement_fill_left_online import replay_fill_left

H100 = load_catalog().model("NVIDIA H100 80GB HBM3")


def test_the_recording_rule_decides_as_ours_hold_and_sees_its_holds() -> None:
    # given a tuning draw on which ours-hold holds 1g.20gb
    sample = make_sample(H100, 8, 2.0, 2)
    # when the diagnosis replays it
    served, steps = run(sample, Recording())
    # then it serves what ours-hold serves, and records each hold with what its confirmation saw
    assert served == family_serve(sample, "ours-hold")
    held = [s for s in steps if s.outcome == HELD]
    assert held
    assert all(s.profile == "1g.20gb" and s.stranded > s.limit for s in held)


def test_placing_every_hold_changes_what_is_served() -> None:
    sample = make_sample(H100, 8, 2.0, 2)
    kept, steps = run(sample, Recording())
    flipped, _ = run(sample, Recording(), flip=next(s.k for s in steps if s.outcome == HELD))
    placed_all, _ = run(sample, Recording(), never=True)
    assert flipped != kept
    assert placed_all != kept


def test_fill_left_keeps_an_empty_gpu_for_the_7g_the_fill_still_brings() -> None:
    # given 8 H100, four 7g placed, then a 4g, then four more 7g
    requests = ("7g.80gb",) * 4 + ("4g.40gb",) + ("7g.80gb",) * 4
    sample = Sample(H100, 8, 1.0, 0, {}, requests, ())
    # then ours-hold places the 4g on an empty GPU and the last 7g does not fit; fill-left refuses the 4g (a fill of
    # 1.3 x the pool still brings about four 7g for the four empty GPUs) and serves every 7g
    assert serve(sample, Recording(), False) == 4 * 7 + 4 + 3 * 7
    assert serve(sample, FillLeft(), False) == 8 * 7


def test_the_trusted_share_does_not_refuse_for_7g_that_only_a_few_requests_announce() -> None:
    # given the same pool: four 7g, a 4g, four more 7g; the raw counts (four of five requests 7g) expect four more
    requests = ("7g.80gb",) * 4 + ("4g.40gb",) + ("7g.80gb",) * 4
    sample = Sample(H100, 8, 1.0, 0, {}, requests, ())
    # then blended with the learner's prior (20 pseudo-requests of the default mix) they expect fewer 7g than the four
    # empty GPUs: the 4g is placed, as ours-hold places it
    assert serve(sample, FillLeft(trusted=True), False) == serve(sample, Recording(), False)


def test_online_fill_left_refuses_only_before_the_pools_first_release() -> None:
    # given 8 H100: four 7g for ten hours, then a 4g, then four more 7g, all within a minute
    long = 10 * 3600
    pods = [Pod("7g", k, long) for k in range(4)] + [Pod("4g", 10, long)] + [Pod("7g", 20 + k, long) for k in range(4)]
    # when replayed online, the 4g is refused (it queues as a held request) and every 7g starts
    served, engine = replay_fill_left(H100, 8, pods, FillLeft())
    assert engine.refused == 1 and served.admitted == 8
    kept, _ = replay_fill_left(H100, 8, pods, None)
    assert served.slice_hours > kept.slice_hours
    # but after a release (the first 7g ends before the 4g arrives) fill left no longer acts
    pods[0] = Pod("7g", 0, 5)
    _, engine = replay_fill_left(H100, 8, pods, FillLeft())
    assert engine.refused == 0
