"""bench/placement_sweep.py: the table the hold research benches print for a column of tuning draws."""

from __future__ import annotations

import pytest

from allocations.mig.catalog import load_catalog
from bench.placement_family import Outcome, make_sample
from bench.placement_sweep import print_table

H100 = load_catalog().model("NVIDIA H100 80GB HBM3")


def test_a_columns_table_has_a_row_per_rule_with_the_gap_closed_and_the_benchs_own_columns(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # given two draws whose first-fit -> optimum gaps are 10 and 20 compute slices
    peers = {"first-fit": 100, "best-fit": 100, "hami": 100}
    outcomes = [
        Outcome(make_sample(H100, 8, 0.5, 0), 110.0, True, {**peers, "rule": 105}),
        Outcome(make_sample(H100, 8, 0.5, 1), 120.0, True, {**peers, "rule": 99}),
    ]
    # when the table is printed with the worst sample and one column of the bench's own
    print_table(outcomes, ["rule"], "8 GPUs, 2 tuning samples", 0.0, worst=True, columns=[("note", "---", str.upper)])
    lines = capsys.readouterr().out.splitlines()
    # then: per sample 50 % and -5 % closed (mean 22.5 %), pooled 4 of 30, the worst -5 %, and the draw
    # where the rule serves 99 against the peers' 100 is within noise (one slice)
    assert lines[1].startswith("8 GPUs, 2 tuning samples (")
    assert lines[3:] == [
        "| rule | per sample: mean | pooled | worst | below a peer | note |",
        "|---|---:|---:|---:|---:|---|",
        "| rule | 22.5 % | 13.3 % | -5 % | 0 | RULE |",
    ]
