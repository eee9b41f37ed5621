"""The trace diagnostic (bench/placement_trace_trade.py): its split of slice-hours is exact, and it admits as the
departures replay does while recording what fitted when each pod arrived."""

from __future__ import annotations

import pytest

from allocations.mig.catalog import load_catalog
from bench.placement import Pod
from bench.placement_departures import replay_held
from bench.placement_trace_trade import Terms, play

H100 = load_catalog().model("NVIDIA H100 80GB HBM3")
HOUR = 3600


def test_the_four_terms_add_up_to_the_slice_hours_share_of_any_set_of_admitted_pods() -> None:
    # given pods of three profiles and lifetimes that differ by profile and by time
    pods = [
        Pod(shape, k * 60, k * 60 + (k % 7 + 1) * HOUR * (3 if shape == "4g" else 1))
        for k, shape in enumerate(["7g", "4g", "3g", "7g", "4g", "7g", "3g", "7g", "4g", "7g"] * 3)
    ]
    terms = Terms(pods)
    life = [(p.deleted - p.created) / HOUR for p in pods]
    size = {"7g": 7, "4g": 4, "3g": 3}
    offered = sum(size[p.shape] * h for p, h in zip(pods, life, strict=True))
    for admitted in ([0, 1, 2], [3, 8, 13, 21, 29], list(range(len(pods)))):
        # when it splits the share served by those pods
        parts = terms.split(admitted)
        # then skill + profile + when + pod is that share, and the skill is the compute admitted
        assert sum(parts) == pytest.approx(100 * sum(size[pods[k].shape] * life[k] for k in admitted) / offered)
        assert parts[0] == pytest.approx(
            100 * sum(size[pods[k].shape] for k in admitted) / sum(size[p.shape] for p in pods)
        )


def test_the_diagnostic_admits_as_the_replay_and_records_what_fitted_on_arrival() -> None:
    # given one H100 with a 4g running, then a 3g that fits beside it, then a 7g that cannot fit
    pods = [Pod("4g", 0, 10 * HOUR), Pod("3g", 60, 2 * HOUR), Pod("7g", 120, 3 * HOUR)]
    for policy in ("best-fit", "ours-hold"):
        # when the diagnostic replays them
        trade = play(H100, 1, pods, policy)
        started: dict[int, int] = {}
        replay_held(H100, 1, pods, policy, started=started)
        # then it admits what the replay admits, the first two fitted when they arrived, and the 7g found no GPU
        assert trade.started == started == {0: 0, 1: 60}
        assert trade.fitted == {0, 1}
        assert trade.whole == {0: 1, 1: 0, 2: 0}
