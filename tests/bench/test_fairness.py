"""bench/fairness.py's simulator keeps its own rules: quotas are never passed without borrowing, borrowing stays
within what the cohort lends, a GPU never holds more than fits, every request that started waited a non-negative
time, a lender gets borrowed slices back after exactly the grace, and the report names the command, each demand
shape and each policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from allocations.mig.catalog import load_catalog
from bench.fairness import (
    FIT_SHARES,
    GPUS_PER_NODE,
    GRACE_MIN,
    MODEL,
    NODES,
    POLICIES,
    PROVISION_S,
    SHAPES,
    TENANTS,
    Req,
    Sim,
    at,
    demand,
    fresh,
    main,
)
from bench.fairness_premise import fitted_guarantees, overcommit


@pytest.mark.parametrize("policy", POLICIES)
def test_the_simulation_keeps_quotas_and_slots_and_every_start_follows_its_arrival(policy: str) -> None:
    model = load_catalog().model(MODEL)
    sim = Sim(policy, model, fresh(demand(7, 1.0, model, "greedy")), 1.0).run()
    result = sim.result("greedy", 7)
    # then: without borrowing no tenant ever held more than its quota; with it, the pool as a whole
    if policy not in ("borrow", "moves"):
        assert all(p <= t.quota for p, t in zip(sim.peak_held, TENANTS, strict=True))
    assert 0 < sim.peak_total <= sim.capacity
    assert 0 < result.utilisation <= 1
    assert all(w >= 0 for waits in result.waits.values() for w in waits)
    assert 0 < result.jain <= 1
    # and: only the fail-and-retry baseline fails tries, only borrowing takes anything back
    assert policy == "fail" or result.failures == 0
    assert policy in ("borrow", "moves") or result.reclaims == 0
    assert policy == "moves" or result.moves == 0


def test_a_lender_gets_the_room_back_after_exactly_the_grace() -> None:
    # given: nlp asks for the whole pool at once (3 x 7g.80gb within its guarantee, 5 borrowed from the others);
    # an hour later vision, which has lent all of its guarantee, asks for one 1g.10gb
    model = load_catalog().model(MODEL)
    big = model.profile("7g.80gb")
    reqs = [Req(pk, 1, "7g.80gb", big.compute_slices, 0.0, 20 * 3600, memory=big.memory_slices) for pk in range(1, 9)]
    small = model.profile("1g.10gb")
    reqs.append(Req(9, 0, "1g.10gb", small.compute_slices, 3600.0, 3600, memory=small.memory_slices))
    # when
    sim = Sim("borrow", model, reqs, 1.0).run()
    # then: the borrowed parts were recorded, one whole GPU was taken back at the end of the grace, vision started
    # then, and the rest of nlp's reclaimed request went back to its backlog
    assert sorted(r.borrowed for r in reqs[:8]) == [(0, 0)] * 3 + [(7, 8)] * 5
    assert reqs[8].start == 3600 + GRACE_MIN * 60
    assert (reqs[8].noticed, sim.reclaims) == (True, 1)
    (rest,) = [r for r in sim.reqs if r.resumed]
    assert (rest.tenant, rest.profile, rest.run_s) == (1, "7g.80gb", 20 * 3600 - (3600 + GRACE_MIN * 60))


def test_a_move_makes_room_for_a_lender_when_nothing_borrowed_is_in_the_way() -> None:
    # given: speech runs a 1g.10gb at start 0 of every GPU, within its guarantee, for 20 hours (placed there by
    # the test: the layout is the point); an hour in, nlp asks for a 7g.80gb within its guarantee
    model = load_catalog().model(MODEL)
    big = model.profile("7g.80gb")
    held = [Req(pk, 2, "1g.10gb", 1, 0.0, 20 * 3600, memory=1) for pk in range(1, NODES * GPUS_PER_NODE + 1)]
    lender = Req(99, 1, "7g.80gb", big.compute_slices, 3600.0, 3600, memory=big.memory_slices)
    starts = {}
    for policy in ("borrow", "moves"):
        reqs = fresh([*held, lender])
        sim = Sim(policy, model, reqs, 1.0)
        for r, gpu in zip(reqs, sim.engine.snapshot().gpus(), strict=False):
            decision = at(gpu.node, gpu.index, r.profile, 0)
            sim.engine.commit(decision, str(r.pk))
            sim.charged[2] += r.compute
            sim.charged_memory[2] += r.memory
            sim.started(r, 0.0, decision)
        sim.reqs = reqs[-1:]  # only the lender arrives
        sim.run()
        starts[policy] = (reqs[-1].start, sim.moves, sim.reclaims)
    # then: with reclaim alone it waits until the 1g.10gb end; with moves, one of them moves next to another
    # and the lender starts one provisioning time later (the move's)
    assert starts == {"borrow": (20 * 3600, 0, 0), "moves": (3600 + PROVISION_S, 1, 0)}


def test_a_borrower_that_does_not_fit_queues_and_the_smaller_borrower_behind_it_starts_backfill() -> None:
    # given: nlp holds 3 x 7g.80gb (its whole guarantee) all day, and speech a 1g.10gb on each other GPU until 1 h
    # (placed by the test); then nlp asks, past its guarantee, for a 7g.80gb (no GPU is empty) and a 1g.10gb
    model = load_catalog().model(MODEL)
    big, small = model.profile("7g.80gb"), model.profile("1g.10gb")
    held = [Req(pk, 1, "7g.80gb", big.compute_slices, 0.0, 40 * 3600, memory=big.memory_slices) for pk in (1, 2, 3)]
    held += [Req(pk, 2, "1g.10gb", 1, 0.0, 3600, memory=small.memory_slices) for pk in range(4, 9)]
    blocked = Req(9, 1, "7g.80gb", big.compute_slices, 60.0, 3600, memory=big.memory_slices)
    behind = Req(10, 1, "1g.10gb", small.compute_slices, 120.0, 3600, memory=small.memory_slices)
    reqs = fresh([*held, blocked, behind])
    sim = Sim("borrow", model, reqs, 1.0)
    for r, gpu in zip(reqs[:8], sim.engine.snapshot().gpus(), strict=True):
        decision = at(gpu.node, gpu.index, r.profile, 0)
        sim.engine.commit(decision, str(r.pk))
        sim.charged[r.tenant] += r.compute
        sim.charged_memory[r.tenant] += r.memory
        sim.started(r, 0.0, decision)
    sim.reqs = reqs[8:]  # only nlp's two borrowers arrive
    sim.run()
    # then: as in the portal's queue, the 7g.80gb waits in the pool's queue without blocking its tenant's next
    # request, which starts on arrival; the 7g.80gb starts when speech's 1g.10gb free whole GPUs, borrowed again
    blocked, behind = reqs[8:]
    assert behind.start == 120.0 and behind.borrowed == (1, 1)
    assert blocked.start == 3600.0 and blocked.borrowed == (big.compute_slices, big.memory_slices)
    assert not blocked.within and not sim.queue
    assert (sim.charged[1], sim.charged_memory[1]) == (21, 24)  # both borrowers ended: nlp holds its guarantee


def test_without_borrowing_nothing_is_lent_and_the_lender_starts_at_once() -> None:
    model = load_catalog().model(MODEL)
    big, small = model.profile("7g.80gb"), model.profile("1g.10gb")
    reqs = [Req(pk, 1, "7g.80gb", big.compute_slices, 0.0, 20 * 3600, memory=big.memory_slices) for pk in range(1, 9)]
    reqs.append(Req(9, 0, "1g.10gb", small.compute_slices, 3600.0, 3600, memory=small.memory_slices))
    sim = Sim("fair", model, reqs, 1.0).run()
    assert sim.peak_held[1] == TENANTS[1].quota
    assert reqs[8].start == 3600


def test_the_report_names_its_command_each_shape_and_each_policy(tmp_path: Path) -> None:
    out = tmp_path / "fairness.md"
    assert main(["--days", "1", "--seeds", "1", "--out", str(out)]) == 0  # the smallest run: CI time is short
    text = out.read_text()
    assert text.startswith("Command: `python ")
    for shape in SHAPES:
        assert f"### {shape} (offered load " in text
        assert f"- {shape}, borrow: utilisation " in text and f"- {shape}, moves: utilisation " in text
        assert f"- {shape}: the most any policy could gain over fifo" in text
    for policy in POLICIES:  # each shape under both sets of guarantees: as configured, and fitted
        assert text.count(f"| {policy} | ") == 2 * len(SHAPES)
    assert "### The target's premise: do the guarantees fit the pool?" in text


def test_the_configured_guarantees_over_commit_the_pool_and_the_fitted_ones_fit_their_shares() -> None:
    model = load_catalog().model(MODEL)
    failed, example = overcommit(model, NODES * GPUS_PER_NODE, [(t.mix, t.quota, t.memory_quota) for t in TENANTS])
    assert failed > 0 and example is not None
    for spec, share in zip(TENANTS, FIT_SHARES, strict=True):
        compute, memory = fitted_guarantees(model, spec.mix, share)
        # less than configured: some use of the configured guarantee does not fit the tenant's share of GPUs
        assert 0 < compute < spec.quota and 0 < memory < spec.memory_quota


def test_a_lender_without_notices_of_its_own_does_not_count_on_another_lenders_notices() -> None:
    # given: nlp holds the whole pool (3 x 7g.80gb within its guarantee, 5 borrowed); an hour in vision asks for a
    # 1g.10gb (a 7g.80gb gets notice for it), ten minutes later speech asks for a 1g.10gb, within its guarantee
    model = load_catalog().model(MODEL)
    big, small = model.profile("7g.80gb"), model.profile("1g.10gb")
    reqs = [Req(pk, 1, "7g.80gb", big.compute_slices, 0.0, 20 * 3600, memory=big.memory_slices) for pk in range(1, 9)]
    reqs.append(Req(9, 0, "1g.10gb", small.compute_slices, 3600.0, 3600, memory=small.memory_slices))
    reqs.append(Req(10, 2, "1g.10gb", small.compute_slices, 4200.0, 3600, memory=small.memory_slices))
    # when
    sim = Sim("borrow", model, reqs, 1.0).run()
    # then: as in the portal (services/cohort_reclaim.py reclaim_room_for, on the pool as it is, without the GPUs
    # other lenders' rooms are on), speech gave notice of its own instead of waiting on vision's; vision's notice
    # freed a whole GPU, so both started when it ran out and speech's notice was called off
    assert (reqs[8].start, reqs[9].start) == (3600 + GRACE_MIN * 60, 3600 + GRACE_MIN * 60)
    assert (reqs[8].noticed, reqs[9].noticed, sim.reclaims) == (True, True, 1)
