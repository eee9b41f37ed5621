"""bench/fairness.py's simulator keeps its own rules: quotas are never passed, a GPU never holds more than fits,
every request that started waited a non-negative time, and the report names the command and the three policies."""

from __future__ import annotations

from pathlib import Path

import pytest

from allocations.mig.catalog import load_catalog
from bench.fairness import MODEL, POLICIES, TENANTS, Req, Sim, demand, main


@pytest.mark.parametrize("policy", POLICIES)
def test_the_simulation_keeps_quotas_and_slots_and_every_start_follows_its_arrival(policy: str) -> None:
    model = load_catalog().model(MODEL)
    reqs = demand(7, 1.0, model)
    sim = Sim(policy, model, [Req(**{**r.__dict__, "where": []}) for r in reqs], 1.0, 1.0)
    result = sim.run()
    # then: no tenant ever held more than its quota, the pool never more than its compute
    assert all(p <= t.quota for p, t in zip(sim.peak_held, TENANTS, strict=True))
    assert sum(sim.peak_held) > 0
    assert sum(sim.held) <= sim.capacity
    assert 0 < result.utilisation <= 1
    assert all(w >= 0 for waits in result.waits.values() for w in waits)
    assert 0 < result.jain <= 1
    # and: only the fail-and-retry baseline fails tries
    assert policy == "fail" or result.failures == 0


def test_the_report_names_its_command_and_each_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "fairness.md"
    assert main(["--quick", "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("Command: `python ")
    for policy in POLICIES:
        assert f"| x 1 | {policy} |" in text and f"| x 1.5 | {policy} |" in text
    assert "Not met, and not reachable without borrowing" in text
