"""The must-accept reference of issue 14's family, and ``ours-hold`` replayed with a queue."""

from __future__ import annotations

from collections import Counter

from allocations.mig.catalog import load_catalog
from allocations.mig.demand import DemandMix
from allocations.mig.offline import offline_optimum
from bench.placement import Pod
from bench.placement_departures import replay, replay_held
from bench.placement_family import Sample, make_sample, serve
from bench.placement_reference import must_accept_optimum

H100 = load_catalog().model("NVIDIA H100 80GB HBM3")


def test_a_request_that_fits_must_be_taken_where_the_optimum_refuses_it() -> None:
    # given one H100 and a 4g then a whole-GPU request
    requests = ("4g.40gb", "7g.80gb")
    # when the reference must place what fits, then it serves the 4g and the whole GPU no longer fits
    result = must_accept_optimum(H100, 1, requests)
    assert (result.value, result.exact) == (4, True)
    # while the offline optimum refuses the 4g and serves the whole GPU
    assert offline_optimum(H100, 1, Counter(requests)).value == 7


def test_it_picks_the_placement_that_keeps_room_for_what_comes() -> None:
    # given one H100 and 1g, 4g, 2g: first-fit puts the 1g at slot 0, where the 4g (slot 0 only) then fails
    requests = ("1g.10gb", "4g.40gb", "2g.20gb")
    assert serve(Sample(H100, 1, 1.0, 0, {}, requests, ()), "first-fit") == 3
    # when the reference places the 1g with hindsight (slot 4, the 2g at 6), then all three fit: 7 slices
    assert must_accept_optimum(H100, 1, requests).value == 7


def test_it_lies_between_every_accepting_policy_and_the_optimum_on_a_family_sample() -> None:
    # given a small family sample (8 H100s)
    sample = make_sample(H100, 8, 1.0, 0)
    # when the reference searches with a narrow beam
    ref = must_accept_optimum(H100, 8, sample.requests, beam=50)
    # then it serves no more than the offline optimum, and no less than first-fit on this draw
    assert ref.value <= offline_optimum(H100, 8, Counter(sample.requests)).value
    assert ref.value >= serve(sample, "first-fit")


def test_a_held_pod_waits_then_is_forced_or_lost() -> None:
    # given one H100 under ours-hold, a mix of whole GPUs and a few 4g (a lone 4g strands 3 slices)
    mix = DemandMix.from_shares({"7g.80gb": 0.9, "4g.40gb": 0.1})
    # when a 4g arrives alone, then it is held and forced after the bound: admitted, its whole hour served
    alone = replay_held(H100, 1, [Pod("4g", 0, 3600)], "ours-hold", wait_s=60, demand=mix)
    assert (alone.admitted, alone.slice_hours, alone.offered_slice_hours) == (1, 4.0, 4.0)
    # when a whole-GPU request takes the GPU while the 4g waits, then the 4g no longer fits and is lost
    both = replay_held(H100, 1, [Pod("4g", 0, 3600), Pod("7g", 10, 3610)], "ours-hold", wait_s=60, demand=mix)
    assert (both.admitted, both.slice_hours, both.offered_slice_hours) == (1, 7.0, 11.0)
    # and without admission the 4g takes the GPU first and the whole GPU is lost
    plain = replay(H100, 1, [Pod("4g", 0, 3600), Pod("7g", 10, 3610)], "ours")
    assert (plain.admitted, plain.slice_hours) == (1, 4.0)
