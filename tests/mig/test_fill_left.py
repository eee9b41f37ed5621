"""ours-hold's fill-left rule (issue 14, allocations/mig/fill_left.py): in a fill, a request that would open an empty
GPU is refused while the whole-GPU requests the rest of the fill brings reach the empty GPUs left."""

from __future__ import annotations

import pytest

from allocations.mig.catalog import load_catalog
from allocations.mig.demand import DemandMix
from allocations.mig.engine import PlacementEngine, empty_fleet
from allocations.mig.fill_left import FillLeftRule, coming
from allocations.mig.fleet import Instance, PlacementRequest
from allocations.mig.policies import HoldingFragmentationAware

H100 = load_catalog().model("NVIDIA H100 80GB HBM3")
# A pool that asked for whole GPUs and 1g.10gb alike (this request included): the kept rule does not flag a 1g.10gb
# on an empty GPU of a 2-GPU pool, and the 7g share of what is still to come (about 2.1 x 7g) covers both empty GPUs.
HALF_WHOLE = {"7g.80gb": 10.0, "1g.10gb": 11.0}


def engine(rule: FillLeftRule, counts: dict[str, float] = HALF_WHOLE, gpus: int = 2) -> PlacementEngine:
    policy = HoldingFragmentationAware()
    policy.FILL_LEFT = rule
    return PlacementEngine(empty_fleet(H100, 1, gpus, pool="p"), policy, DemandMix(counts, 20.0))


def test_the_default_is_the_trusted_share_and_off_places_the_opening_request():
    assert HoldingFragmentationAware.FILL_LEFT == "trusted"  # adopted in session 14 (docs/placement.md)
    e = engine("off")
    assert e.choose(PlacementRequest("1g.10gb", 1, "p")) is not None
    assert e.kept_empty is None


def test_it_refuses_an_opening_request_while_the_fill_still_brings_7g_for_the_empty_gpus():
    e = engine("raw")
    # when: a 1g.10gb would open one of the two empty GPUs
    decision = e.choose(PlacementRequest("1g.10gb", 1, "p"))
    # then: refused, and the engine says why; it is not counted as held compute (the hold budget's)
    assert decision is None
    assert e.kept_empty is not None
    assert (e.kept_empty.profile, e.kept_empty.empty) == ("7g.80gb", 2)
    assert e.kept_empty.coming >= 2
    assert e.held == 0.0


def test_a_placement_that_opens_no_gpu_is_not_asked():
    # given: one GPU in use; the estimate (about 1.6 x 7g for the one empty GPU) would refuse an opening request
    e = engine("raw")
    e.set_layout("node-0000", 0, [Instance("3g.40gb", 4, owner="a")])
    # when: a 1g.10gb goes next to the 3g.40gb
    decision = e.choose(PlacementRequest("1g.10gb", 1, "p"))
    # then: placed there
    assert decision is not None and decision.slots[0].gpu_index == 0
    assert e.kept_empty is None


def test_it_places_an_opening_request_when_the_estimate_falls_short_of_the_empty_gpus():
    # given: the same demand, one GPU full: under one 7g (5.1 compute slices' worth of requests) is still to come
    e = engine("raw")
    e.set_layout("node-0000", 0, [Instance("4g.40gb", 0, owner="a"), Instance("3g.40gb", 4, owner="b")])
    # when: a 4g.40gb opens the last empty GPU
    decision = e.choose(PlacementRequest("4g.40gb", 1, "p"))
    # then: placed
    assert decision is not None and decision.slots[0].gpu_index == 1
    assert e.kept_empty is None


def test_a_7g_is_never_refused():
    e = engine("raw")
    assert e.choose(PlacementRequest("7g.80gb", 1, "p")) is not None


def test_it_never_acts_after_a_release():
    e = engine("raw")
    first = e.place(PlacementRequest("7g.80gb", 1, "p"), "a")
    assert first is not None
    # when: an allocation ends (the pool is no longer filling)
    e.release(first.node, first.slots[0].gpu_index, first.slots[0].start)
    # then: the opening 1g.10gb is placed
    assert e.choose(PlacementRequest("1g.10gb", 1, "p")) is not None
    assert e.kept_empty is None


def test_it_never_refuses_a_forced_request():
    e = engine("raw")
    assert e.choose(PlacementRequest("1g.10gb", 1, "p", force=True)) is not None
    assert e.kept_empty is None


def test_the_trusted_variant_blends_the_7g_share_with_the_prior():
    # given: the same counts; blended with 20 pseudo-requests of the default mix, fewer 7g are expected
    e = engine("trusted")
    # then: placed where the raw share refuses it
    assert e.choose(PlacementRequest("1g.10gb", 1, "p")) is not None
    assert e.kept_empty is None
    raw, _ = coming(H100, HALF_WHOLE, 20.0, 10.0, trusted=False)
    trusted, _ = coming(H100, HALF_WHOLE, 20.0, 10.0, trusted=True)
    assert trusted < raw


@pytest.mark.parametrize("counts", [{}, {"7g.80gb": 0.0}, {"no-such-profile": 3.0}])
def test_without_counts_of_the_model_nothing_is_expected(counts: dict[str, float]):
    assert coming(H100, counts, 0.0, 50.0, trusted=False) == (0.0, 0.0)


def test_what_is_still_to_come_counts_the_pool_and_its_holds():
    # given: one 7g in four requests, mean request (7 + 3 x 1) / 4 = 2.5 compute slices
    counts = {"7g.80gb": 1.0, "1g.10gb": 3.0}
    n, share = coming(H100, counts, 0.0, 25.0, trusted=False)
    # then: 25 slices still to come are 10 requests, of which 2.5 are 7g (70 % of the compute)
    assert n == pytest.approx(2.5)
    assert share == pytest.approx(0.7)


def test_it_refuses_what_the_rollout_veto_would_place_on_an_empty_pool():
    # given: four empty H100s whose tenants ask for whole GPUs and 1g.10gb, half and half (a fixed mix): the rollouts
    # veto holding a 1g.10gb (tests/mig/test_policy_hold.py), but half the requests still to come are 7g
    mix = DemandMix.from_shares({"7g.80gb": 0.5, "1g.10gb": 0.5})
    e = PlacementEngine(empty_fleet(H100, 1, 4), "ours-hold", mix)
    # when / then: the default rule (the trusted share: a fixed mix has no prior to blend) refuses it
    assert e.choose(PlacementRequest("1g.10gb")) is None
    assert e.kept_empty is not None and e.kept_empty.empty == 4
