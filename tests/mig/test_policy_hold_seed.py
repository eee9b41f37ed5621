"""``ours-hold`` told the outcomes of holds that ended before its engine was built (issue 14): the portal builds an
engine per decision and seeds it with what its database recorded (allocations/admission/outcomes.py)."""

from __future__ import annotations

import pytest

from allocations.mig.engine import PlacementEngine, empty_fleet
from allocations.mig.fleet import PlacementRequest

from .brute import model
from .test_placement import H100
from .test_policy_hold import WHOLE_AND_4G, stranding_only


def engine() -> PlacementEngine:
    return PlacementEngine(empty_fleet(model(H100), 1, 8), stranding_only(), WHOLE_AND_4G)


def test_seeded_outcomes_price_a_hold_as_the_ones_the_engine_saw_end() -> None:
    # given: one engine that saw 20 held 4g end lost, and a fresh one seeded with those outcomes
    saw = engine()
    for _ in range(20):
        saw.hold_ended("4g.40gb", placed=False)
    seeded = engine()
    seeded.seed_hold_outcomes({"4g.40gb": saw.held_outcomes("4g.40gb")})
    # then: it knows the same, and places the 4g that an engine told nothing holds
    assert seeded.held_outcomes("4g.40gb") == (20.0, 20.0, 0.0)
    assert engine().choose(PlacementRequest("4g.40gb")) is None
    assert seeded.choose(PlacementRequest("4g.40gb")) is not None
    # and: seeded outcomes fade with the requests the engine sees next, as its own do (four half-lives: 1/16)
    for _ in range(1999):
        seeded.choose(PlacementRequest("7g.80gb"))
    assert seeded.held_outcomes("4g.40gb") == pytest.approx((1.25, 1.25, 0.0))
