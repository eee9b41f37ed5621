"""The demand mix and its learner."""

from __future__ import annotations

import pytest

from allocations.mig.demand import DemandLearner, DemandMix, default_shares

from .brute import model

H100 = "NVIDIA H100 80GB HBM3"


def test_the_default_mix_favours_small_slices_and_ignores_media_variants() -> None:
    # given H100's profiles
    shares = default_shares(model(H100))
    # then the prior is the documented one, +me excluded
    assert shares == pytest.approx(
        {
            "1g.10gb": 0.30,
            "1g.10gb+me": 0.0,
            "1g.20gb": 0.10,
            "2g.20gb": 0.25,
            "3g.40gb": 0.12,
            "4g.40gb": 0.08,
            "7g.80gb": 0.15,
        }
    )


def test_a_learner_without_requests_uses_the_default_mix() -> None:
    # given a fresh learner
    learner = DemandLearner()
    # then its weights are the prior's
    assert learner.mix().weights(model(H100)) == pytest.approx((0.30, 0.0, 0.10, 0.25, 0.12, 0.08, 0.15))


def test_the_learner_follows_what_tenants_request() -> None:
    # given a learner with a prior of 20 pseudo-requests
    learner = DemandLearner(half_life=1e9, prior_weight=20.0)
    # when 180 requests for 3g.40gb arrive
    for _ in range(180):
        learner.observe("3g.40gb")
    # then 3g.40gb weighs (180 + 20 * 0.12) / 200
    assert learner.mix().weights(model(H100))[4] == pytest.approx((180 + 2.4) / 200)


def test_old_requests_fade_with_the_half_life() -> None:
    # given a learner with a half-life of 10 requests and no prior
    learner = DemandLearner(half_life=10, prior_weight=0.0, republish_distance=0.0)
    # when 10 requests for 1g then 10 for 2g arrive
    for _ in range(10):
        learner.observe("1g.10gb")
    for _ in range(10):
        learner.observe("2g.20gb")
    # then the older 1g requests count half as much, in total, as the newer 2g ones
    w = learner.mix().weights(model(H100))
    assert w[0] / w[3] == pytest.approx(0.5)


def test_it_keeps_the_same_snapshot_until_the_mix_moves_noticeably() -> None:
    # given a learner with a prior of 100 pseudo-requests that republishes past an L1 distance of 0.05
    learner = DemandLearner(prior_weight=100.0, republish_distance=0.05)
    first = learner.mix()
    # when one request arrives (L1 distance 2/101, under 0.05)
    learner.observe("1g.10gb")
    # then the snapshot (and the engine's caches keyed on it) stays
    assert learner.mix() is first
    # and after many more it changes
    for _ in range(20):
        learner.observe("1g.10gb")
    assert learner.mix() is not first


def test_a_fixed_mix_from_shares_has_no_prior() -> None:
    # given a mix of only 7g requests
    mix = DemandMix.from_shares({"7g.80gb": 3})
    # then all the weight is on 7g
    assert mix.weights(model(H100)) == (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0)
