"""bench/placement_confirm.py: where ``ours-hold``'s cold 8-GPU misses come from, and the fill-left candidate."""

from __future__ import annotations

from allocations.mig.catalog import load_catalog
from bench.placement_confirm import HELD, FillLeft, Recording, run, serve
from bench.placement_family import Sample, make_sample
from bench.placement_family import serve as family_serve

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
