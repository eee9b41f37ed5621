"""bench/placement_trust.py: ``ours-hold`` whose fill pull follows how much the learnt mix is trusted."""

from __future__ import annotations

from allocations.mig.catalog import load_catalog
from allocations.mig.demand import DemandLearner
from allocations.mig.engine import empty_fleet
from allocations.mig.fleet import PlacementRequest
from allocations.mig.policies import FragmentationAware
from bench.placement_trust import TrustEngine, TrustPull

H100 = load_catalog().model("NVIDIA H100 80GB HBM3")


def pulls_over(learner: DemandLearner, requests: int) -> list[float]:
    engine = TrustEngine(empty_fleet(H100, 8, 8), TrustPull("step", 0.3, 2.0), learner)
    seen = []
    for k in range(requests):
        engine.place(PlacementRequest("1g.10gb"), f"r{k}")
        assert isinstance(engine.policy, TrustPull)
        seen.append(engine.policy.TIGHTNESS)
    return seen


def test_a_cold_learner_pulls_hard_until_its_counts_outweigh_twice_the_prior() -> None:
    # given a learner from its prior (20 pseudo-requests), when 45 requests of 1g arrive in a fill
    pulls = pulls_over(DemandLearner(), 45)
    # then the first 40 (counts of now at most 2 x 20, decayed a little) see 0.3, the last ours' 0.1
    assert pulls[:40] == [0.3] * 40
    assert pulls[-1] == FragmentationAware.TIGHTNESS


def test_a_warm_learner_keeps_ours_pull_from_the_start() -> None:
    # given a learner that saw 100 requests before
    learner = DemandLearner()
    for _ in range(100):
        learner.observe("3g.40gb")
    # when the fill starts, then its pull is ours' own
    assert pulls_over(learner, 3) == [FragmentationAware.TIGHTNESS] * 3


def test_the_linear_rule_falls_with_the_prior_share() -> None:
    rule = TrustPull("linear", 0.3)
    # the prior alone: the full pull; counts equal to the prior: half of the extra; a release: ours' own
    assert rule.pull_for(0.0, 20.0) == 0.3
    assert rule.pull_for(20.0, 20.0) == 0.2
    rule.fill_over()
    assert rule.pull_for(0.0, 20.0) == FragmentationAware.TIGHTNESS
