"""The departures replay (bench/placement_departures.py) tells the engine how held pods ended, and ``ours-hold``
prices its next holds by it; the report (bench/placement_departures_report.py) puts the compute admitted beside
slice-hours."""

from __future__ import annotations

import pytest

from allocations.mig.catalog import load_catalog
from allocations.mig.demand import DemandMix
from allocations.mig.policies import HoldingFragmentationAware
from bench.placement import Pod
from bench.placement_departures import MEAN_LIFETIME_S, compute_share, poisson_pods, replay, replay_held
from bench.placement_departures_report import at_least, spread, worst
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


def test_the_compute_admitted_counts_slices_not_lifetimes_whether_a_policy_holds_or_not() -> None:
    # given one H100, a whole GPU for 10 hours, a 1g that arrives while it runs, and a 1g after it ended
    hour = 3600
    pods = [Pod("7g", 0, 10 * hour), Pod("1g", 10, 10 + hour), Pod("1g", 11 * hour, 12 * hour)]
    for policy in ("first-fit", "ours-hold"):  # placed on arrival (run_online), and with a queue (replay_held)
        admits: dict[int, int] = {}
        # when the report replays them
        served = replay(H100, 1, pods, policy, admits)
        # then the second pod is refused: 71 of 72 slice-hours, but 8 of the 9 compute slices offered
        assert admits == {0: 0, 2: 11 * hour}
        assert served.share == pytest.approx(71 / 72)
        assert compute_share(pods, admits) == pytest.approx(8 / 9)


def test_the_report_pairs_runs_by_draw_and_gives_the_peers_own_spread_as_the_noise() -> None:
    # given three draws: first-fit 2 points below best-fit, then 3 above, then level
    first, best = [0.60, 0.73, 0.70], [0.62, 0.70, 0.70]
    # then first-fit is at least best-fit on 2 runs, its worst run is 2 points below, and the spread is -2 / +3
    assert at_least(first, best) == 2
    assert worst(first, best) == "-2.00"
    assert spread(first, best) == "-2.00 / +3.00"


def test_the_8_hour_poisson_draws_are_new_draws_and_the_1_hour_draws_are_those_of_before() -> None:
    # given the same cell drawn with the default mean lifetime (1 h), that mean spelt out, and 8 h
    one = poisson_pods(H100, 16, 0.5, 3, "pareto", 40)
    # then the 1 h draw is the one every 1 h figure was made on (its first pods, pinned before session 13)
    assert one[:3] == [Pod("2g", 0, 1209), Pod("2g", 41, 1335), Pod("2g", 118, 1462)]
    assert poisson_pods(H100, 16, 0.5, 3, "pareto", 40, MEAN_LIFETIME_S) == one
    # and the 8 h draw has its own mix and arrivals, not the 1 h draw stretched in time (session 12: 2g, 2g, 2g at
    # 8 x the 1 h times)
    eight = poisson_pods(H100, 16, 0.5, 3, "pareto", 40, 8 * MEAN_LIFETIME_S)
    assert [p.shape for p in eight] != [p.shape for p in one]
