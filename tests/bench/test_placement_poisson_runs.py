"""bench/placement_poisson_runs.py splits a run's slice-hours into the compute admitted (skill) and the admitted
pods' lifetimes (luck), and names the pod that decides most between two policies."""

from __future__ import annotations

import pytest

from allocations.mig.catalog import load_catalog
from bench.placement import Pod
from bench.placement_poisson_runs import Run, decider, play

H100 = load_catalog().model("NVIDIA H100 80GB HBM3")
HOUR = 3600


def test_a_run_records_what_it_admitted_and_splits_its_share_into_compute_admitted_and_luck() -> None:
    # given one H100, a whole GPU for an hour, a 1g that arrives while it runs, and a 1g after it ended
    pods = [Pod("7g", 0, HOUR), Pod("1g", 10, 10 + HOUR), Pod("1g", 2 * HOUR, 3 * HOUR)]
    # when first-fit replays them
    run = play(H100, 1, pods, "first-fit")
    # then the second pod is refused, and the others start when they arrive
    assert run.started == {0: 0, 2: 2 * HOUR}
    # and 8 of the 9 compute slices offered were admitted; every pod runs an hour, so that is the share: no luck
    assert run.skill == pytest.approx(8 / 9) and run.share == pytest.approx(8 / 9)
    assert run.luck == pytest.approx(0.0)


def test_the_decider_is_the_pod_admitted_by_one_policy_only_whose_lifetime_counts_most() -> None:
    # given a whole GPU that runs 100 hours and two 1g of an hour: 702 slice-hours, 78 hours per slice on average
    pods = [Pod("7g", 0, 100 * HOUR), Pod("1g", 10, 10 + HOUR), Pod("1g", 20, 20 + HOUR)]
    long_one = Run(share=700 / 702, skill=7 / 9, started={0: 0})
    short_ones = Run(share=2 / 702, skill=2 / 9, started={1: 10, 2: 20})
    # when the runs are compared, then the long pod decides: 7 x (100 - 78) of 702 slice-hours, for the first
    term, k = decider(pods, long_one, short_ones)
    assert k == 0 and term == pytest.approx(100 * 7 * (100 - 702 / 9) / 702)
    # and the other way round it counts against
    assert decider(pods, short_ones, long_one)[0] == pytest.approx(-term)
