"""bench/placement_intervals.py and placement_confirm.py --fresh: per-sample records, bootstrap intervals and
session 14's pre-registered decision."""

from __future__ import annotations

from pathlib import Path

import pytest

from allocations.mig.catalog import load_catalog
from bench.placement_confirm import FILL_LEFT, KEPT, TRUSTED, VERDICTS, measure_all
from bench.placement_intervals import Record, bootstrap, cell_table, decide, load, outcomes

H100 = load_catalog().model("NVIDIA H100 80GB HBM3")
PEERS = {"first-fit": 40, "best-fit": 40, "hami": 40}


def record(seed: int, kept: int, fill: int, trusted: int) -> Record:
    # a sample whose optimum is 50 and peers serve 40: each slice a rule serves is 10 points of the gap
    rules = {KEPT: kept, FILL_LEFT: fill, TRUSTED: trusted}
    return Record("H100", 8, 1.0, seed, 50.0, True, dict(PEERS), rules, {})


def test_the_interval_holds_the_mean_and_a_rerun_prints_the_same() -> None:
    values = [0.0, 0.25, 0.5, 1.0, 1.0, -0.5, 0.75]
    low, high = bootstrap(values)
    assert low < sum(values) / len(values) < high
    assert bootstrap(values) == (low, high)
    assert bootstrap([0.5] * 10) == (0.5, 0.5)


def test_a_candidate_with_a_higher_mean_but_one_more_sample_below_a_peer_is_not_adopted() -> None:
    # given fill left 2 slices better on one sample but below the peers on another; the trusted share as kept
    records = [record(0, 45, 47, 45), record(1, 45, 38, 45), record(2, 44, 44, 44)]
    rows = cell_table("H100, 8 GPUs, cold", outcomes(records, H100, False), (KEPT, FILL_LEFT, TRUSTED), KEPT)
    verdict = decide({"H100, 8 GPUs, cold": rows}, "H100, 8 GPUs, cold", KEPT, VERDICTS)
    assert verdict.below == {KEPT: 0, FILL_LEFT: 1, TRUSTED: 0}
    assert verdict.headline[FILL_LEFT] != verdict.headline[KEPT]
    assert verdict.line == "KEEP"


def test_the_qualifying_candidate_with_the_higher_headline_mean_is_adopted() -> None:
    # given both candidates never below a peer, fill left +2 slices on a sample and the trusted share +1
    records = [record(0, 45, 47, 46), record(1, 45, 45, 45)]
    cells = {"H100, 8 GPUs, cold": cell_table("c", outcomes(records, H100, False), (KEPT, FILL_LEFT, TRUSTED), KEPT)}
    assert decide(cells, "H100, 8 GPUs, cold", KEPT, VERDICTS).line == "ADOPT raw"
    # and with fill left below a peer in another cell, the trusted share is adopted
    other = [record(3, 45, 38, 45)]  # 2 slices under the peers: beyond noise (1 slice)
    cells["H200, 8 GPUs, cold"] = cell_table("c", outcomes(other, H100, False), (KEPT, FILL_LEFT, TRUSTED), KEPT)
    assert decide(cells, "H100, 8 GPUs, cold", KEPT, VERDICTS).line == "ADOPT trusted"


def test_a_rerun_with_the_same_file_measures_only_the_samples_not_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "fresh.jsonl"
    tasks = [("H100", 8, 1.0, 7000)]
    measure_all(tasks, (KEPT,), False, out, 1)
    first = load(out.read_text().splitlines())
    measure_all([*tasks, ("H100", 8, 1.0, 7001)], (KEPT,), False, out, 1)
    both = load(out.read_text().splitlines())
    assert [r.seed for r in both] == [7000, 7001]
    assert both[0] == first[0]
    assert "1 of 2 samples already" in capsys.readouterr().out
