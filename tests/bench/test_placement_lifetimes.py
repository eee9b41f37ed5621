"""``ours-hold`` weighed in slice-hours (bench/placement_lifetimes.py): the lifetimes it learns, and the holds
it declines."""

from __future__ import annotations

from allocations.mig.catalog import load_catalog
from allocations.mig.demand import DemandLearner
from allocations.mig.engine import PlacementEngine, empty_fleet
from allocations.mig.fleet import PlacementRequest
from allocations.mig.policies import HoldingFragmentationAware, Policy
from bench.placement import Pod
from bench.placement_departures import replay_held
from bench.placement_lifetimes import LifetimeHold, LifetimeLearner

H100 = load_catalog().model("NVIDIA H100 80GB HBM3")
HOUR = 3600.0


def ended(learner: LifetimeLearner, profile: str, hours: list[float], at: float = 0.0) -> None:
    for k, h in enumerate(hours):
        learner.observe_start(f"{profile}-{k}", profile, at)
        learner.observe_end(f"{profile}-{k}", at + h * HOUR)


def test_a_lifetime_counts_the_ages_of_running_requests_once_enough_have_ended() -> None:
    # given two 4g requests that ended after 1 hour each, and one 4g still running since hour 0
    learner = LifetimeLearner()
    ended(learner, "4g.40gb", [1.0, 1.0])
    learner.observe_start("long", "4g.40gb", 0.0)
    learner.advance(10 * HOUR)
    # then two ended requests are too few to tell a lifetime
    assert learner.lifetimes() == {}
    # when a third ends after 1 hour, then the mean counts the running one's 10 hours: (1 + 1 + 1 + 10) / 3
    ended(learner, "4g.40gb", [1.0], at=9 * HOUR)
    assert learner.lifetimes() == {"4g.40gb": 13 * HOUR / 3}
    # while the ended requests alone say 1 hour (biased short: the long one has not ended)
    only = LifetimeLearner(ended_only=True)
    ended(only, "4g.40gb", [1.0, 1.0, 1.0])
    only.observe_start("long", "4g.40gb", 0.0)
    only.advance(10 * HOUR)
    assert only.lifetimes() == {"4g.40gb": HOUR}


def place_4g(learner: DemandLearner, policy: Policy) -> bool:
    # a pool of whole-GPU requests with a few 4g: a lone 4g strands 3 compute slices of its GPU
    for _ in range(9):
        learner.observe("7g.80gb", 10)
        learner.observe("4g.40gb", 1)
        learner.mix()
    engine = PlacementEngine(empty_fleet(H100, 1, 1), policy, learner)
    return engine.place(PlacementRequest("4g.40gb"), "4g") is not None


def test_a_long_lived_request_is_not_held_for_short_lived_ones() -> None:
    # given 4g requests that ran 20 hours and whole GPUs that ran 1 hour
    learner = LifetimeLearner()
    ended(learner, "4g.40gb", [20.0] * 3)
    ended(learner, "7g.80gb", [1.0] * 3)
    # then ours-hold, which counts compute slices, holds the 4g; weighed in slice-hours it places it
    assert not place_4g(DemandLearner(), HoldingFragmentationAware())
    assert place_4g(learner, LifetimeHold(learner))


def test_the_veto_keeps_a_hold_both_counts_agree_on_and_creates_none() -> None:
    # given 4g requests that ran 1 hour and whole GPUs that ran 20: the 4g is held either way
    learner = LifetimeLearner()
    ended(learner, "4g.40gb", [1.0] * 3)
    ended(learner, "7g.80gb", [20.0] * 3)
    assert not place_4g(learner, LifetimeHold(learner))
    # and with nothing ended, the rule is ours-hold's
    fresh = LifetimeLearner()
    assert not place_4g(fresh, LifetimeHold(fresh))


def test_the_replay_teaches_the_learner_when_pods_end_not_when_they_arrive() -> None:
    # given three 1g pods of an hour each, one after the other, and a fourth running 5 hours from hour 3
    pods = [Pod("1g", 0, 3600), Pod("1g", 3600, 7200), Pod("1g", 7200, 10800), Pod("1g", 10800, 28800)]
    learner = LifetimeLearner()
    replay_held(H100, 1, pods, LifetimeHold(learner), demand=learner)
    # then the learner saw the last one run to its end, and nothing is left running
    assert learner.lifetimes() == {"1g.10gb": (3 * HOUR + 5 * HOUR) / 4}
