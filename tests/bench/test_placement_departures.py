"""The departures replay (bench/placement_departures.py) tells the engine how held pods ended, and ``ours-hold``
prices its next holds by it."""

from __future__ import annotations

from allocations.mig.catalog import load_catalog
from allocations.mig.demand import DemandMix
from allocations.mig.policies import HoldingFragmentationAware
from bench.placement import Pod
from bench.placement_departures import replay_held
from bench.placement_hold_outcomes import Unpriced

H100 = load_catalog().model("NVIDIA H100 80GB HBM3")
WHOLE_AND_4G = DemandMix.from_shares({"7g.80gb": 0.9, "4g.40gb": 0.1})


def test_a_long_request_that_its_holds_keep_losing_to_short_whole_gpus_is_placed_instead() -> None:
    # given one H100 and, every 5 hours, a 4g that runs 4 hours, then 10 s later a whole GPU that runs 1,000 s:
    # held (it would strand 3 slices of a GPU the mix fills whole), the 4g is lost at its 15-minute deadline
    pods = []
    for k in range(10):
        t = 5 * 3600 * k
        pods += [Pod("4g", t, t + 4 * 3600), Pod("7g", t + 10, t + 1010)]
    unpriced = replay_held(H100, 1, pods, Unpriced(), demand=WHOLE_AND_4G)
    priced = replay_held(H100, 1, pods, HoldingFragmentationAware(), demand=WHOLE_AND_4G)
    # then session 10's rule serves only the whole GPUs (10 x 7 slices x 1,000 s)
    assert unpriced.admitted == 10 and round(unpriced.slice_hours, 6) == round(10 * 7 * 1000 / 3600, 6)
    # and the priced rule, told by the replay that the first hold was lost, places the 4g from the second on (16
    # slice-hours each; the whole GPU that follows no longer fits): on one GPU a hold must avoid 1 compute slice,
    # and 2.7 less half of 4 is 0.7
    assert priced.admitted == 10
    assert round(priced.slice_hours, 6) == round(7 * 1000 / 3600 + 9 * 4 * 4, 6)
