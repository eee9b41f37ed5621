"""``ours-hold``: ``ours`` with admission (issue 14). Holds only what would strand compute, never a forced
request; ``ours`` itself never refuses a request that fits. A hold that the published mix flags is confirmed
with the request counts of now, by a wider margin on a small pool; until the pool sees a release, holds stay
within a budget of the pool's compute and rollouts over the fleet may veto them, and a flag the counts of now
do not confirm does not push a request onto a worse GPU."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocations.mig import rollout
from allocations.mig.demand import DemandLearner, DemandMix
from allocations.mig.engine import PlacementEngine, empty_fleet
from allocations.mig.fleet import PlacementRequest
from allocations.mig.layout import geometry
from allocations.mig.policies import HoldContext, HoldingFragmentationAware

from .brute import MODELS, max_more, model, valid_layouts
from .test_placement import H100

# A pool whose tenants ask for whole GPUs and 4g: a 4g leaves three compute slices that only a 3g, 2g or 1g
# could use, and the mix has none of them.
WHOLE_AND_4G = DemandMix.from_shares({"7g.80gb": 0.9, "4g.40gb": 0.1})


def stranding_only() -> HoldingFragmentationAware:
    """``ours-hold`` without its fill-left rule, for the tests of the stranding rule's own terms (the price, the veto),
    which fill left would otherwise pre-empt on an empty pool (fill left: tests/mig/test_fill_left.py)."""
    policy = HoldingFragmentationAware()
    policy.FILL_LEFT = "off"
    return policy


def test_it_holds_a_request_that_would_strand_compute_and_places_it_when_forced() -> None:
    # given an empty H100 pool whose mix is whole GPUs and a few 4g
    engine = PlacementEngine(empty_fleet(model(H100), 1, 8), "ours-hold", WHOLE_AND_4G)
    # when a 4g.40gb arrives, then it is held: every GPU would keep 3 slices nobody in the mix can use
    assert engine.choose(PlacementRequest("4g.40gb")) is None
    # and a whole GPU, which strands nothing, is placed
    assert engine.choose(PlacementRequest("7g.80gb")) is not None
    # when the 4g has waited long enough (forced), then it is placed where ours would put it
    forced = engine.choose(PlacementRequest("4g.40gb", force=True))
    plain = PlacementEngine(empty_fleet(model(H100), 1, 8), "ours", WHOLE_AND_4G).choose(PlacementRequest("4g.40gb"))
    assert forced is not None and plain is not None
    assert (forced.node, forced.slots) == (plain.node, plain.slots)


def test_a_gpu_that_does_not_strand_wins_over_a_held_one() -> None:
    # given an H100 pool with one GPU holding a 4g.40gb at slot 0, under a mix of 4g and 3g
    fleet = empty_fleet(model(H100), 1, 8)
    engine = PlacementEngine(fleet, "ours-hold", DemandMix.from_shares({"4g.40gb": 0.5, "3g.40gb": 0.5}))
    first = engine.place(PlacementRequest("4g.40gb"), "a")
    assert first is not None
    # when a 3g.40gb arrives, then it completes that GPU (nothing stranded) instead of being held
    d = engine.choose(PlacementRequest("3g.40gb"))
    assert d is not None and (d.node, d.gpu_index) == (first.node, first.gpu_index) and d.start == 4
    assert d.rank[0] == 0.0


OPS = st.lists(st.tuples(st.integers(0, 99), st.booleans(), st.booleans()), max_size=25)


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(MODELS), policy=st.sampled_from(["ours", "ours-hold"]), ops=OPS)
def test_layouts_stay_valid_and_only_an_unforced_request_under_admission_is_refused_when_it_fits(
    name: str, policy: str, ops: list[tuple[int, bool, bool]]
) -> None:
    # given a 2-node x 2-GPU fleet of one of the four models, under a mix that makes holds likely
    m = model(name)
    profiles = [p.name for p in m.profiles]
    mix = DemandMix.from_shares({profiles[-1]: 0.8, profiles[0]: 0.2})
    engine = PlacementEngine(empty_fleet(m, 2, 2), policy, mix)
    gpus = [(f"node-{n:04d}", g) for n in range(2) for g in range(2)]
    for a, force, release in ops:
        # when placing (forced or not) and releasing at random
        profile = profiles[a % len(profiles)]
        layouts = [frozenset((i.profile, i.start) for i in engine.instances(*g)) for g in gpus]
        fits = any(max_more(name, lay, profile) > 0 for lay in layouts)
        decision = engine.place(PlacementRequest(profile, force=force), f"o{a}")
        # then a request that fits is refused only by the admission policy, and never when forced
        if decision is None and fits:
            assert policy == "ours-hold" and not force
        assert decision is None or fits
        if release:
            node, gpu = gpus[a % len(gpus)]
            held = [i for i in engine.instances(node, gpu) if i.owner is not None]
            if held:
                engine.release(node, gpu, held[0].start)
        # and every GPU's layout is valid
        for g in gpus:
            assert frozenset((i.profile, i.start) for i in engine.instances(*g)) in valid_layouts(name)


def test_it_is_deterministic() -> None:
    # given two engines on the same H100 pool and the same learnt mix
    sequence = ["4g.40gb", "1g.10gb", "7g.80gb", "3g.40gb", "1g.20gb", "2g.20gb", "4g.40gb", "1g.10gb"] * 6
    runs = []
    for _ in range(2):
        engine = PlacementEngine(empty_fleet(model(H100), 2, 8), "ours-hold")
        # when both see the same requests
        runs.append([engine.place(PlacementRequest(p), f"r{k}") for k, p in enumerate(sequence)])
    # then they take the same decisions, holds included
    assert runs[0] == runs[1]


def _stale_learner(profile: str, n: int) -> DemandLearner:
    """A learner that saw ``n`` requests of ``profile`` but still publishes its first snapshot (the prior), as
    a young pool's learner does between republishing."""
    learner = DemandLearner(min_interval=10**6)
    for _ in range(n):
        learner.observe(profile)
    return learner


def test_the_counts_of_now_decide_a_hold_that_the_published_prior_flags() -> None:
    # given an empty H100 pool whose learner has not republished: its published mix is the default prior, under
    # which a 1g.20gb breaks a GPU that whole-GPU requests would have taken
    prior_only = PlacementEngine(empty_fleet(model(H100), 1, 8), "ours-hold", _stale_learner("1g.20gb", 0))
    # when the pool has asked for nothing yet, then a 1g.20gb is held (nothing but the prior to go by)
    assert prior_only.choose(PlacementRequest("1g.20gb")) is None
    # when the pool has asked for 40 x 1g.20gb, then the next one is placed: the counts say it is what comes
    mostly_1g = PlacementEngine(empty_fleet(model(H100), 1, 8), "ours-hold", _stale_learner("1g.20gb", 40))
    assert mostly_1g.choose(PlacementRequest("1g.20gb")) is not None
    # when it has asked for 40 whole GPUs, then a 1g.20gb is held, and placed once forced
    whole = PlacementEngine(empty_fleet(model(H100), 1, 8), "ours-hold", _stale_learner("7g.80gb", 40))
    assert whole.choose(PlacementRequest("1g.20gb")) is None
    assert whole.choose(PlacementRequest("1g.20gb", force=True)) is not None


def test_a_small_pool_needs_a_larger_expected_loss_to_hold() -> None:
    # given an empty H100 GPU, a 1g.20gb at slot 4, and a pool that asked for 40 x 1g.20gb
    geom = geometry(model(H100))
    empty = geom.named_key(())
    i = geom.index["1g.20gb"]
    option = next(o for o in geom.options(empty, i) if o.start == 4)
    policy = HoldingFragmentationAware()

    def held(gpus: int) -> bool:
        ctx = HoldContext(geom, empty, option, i, DemandMix({}, 20.0), {"1g.20gb": 40.0}, 0.0, 8, gpus)
        return policy.holds(ctx)

    # when the same placement is weighed in a pool of 64 GPUs and of 8, then only the large pool holds it
    # (threshold 0.2 + 0.8 / GPUs compute slices: about 0.21 against 0.3)
    assert held(64) and not held(8)


def test_a_request_for_several_instances_is_held_and_placed_when_forced() -> None:
    # given an empty H100 node whose mix is whole GPUs and a few 4g
    engine = PlacementEngine(empty_fleet(model(H100), 1, 8), "ours-hold", WHOLE_AND_4G)
    # when two 4g.40gb are asked for on one node, then they are held (each would strand 3 slices)
    assert engine.choose(PlacementRequest("4g.40gb", count=2)) is None
    # and placed, both, once forced
    forced = engine.choose(PlacementRequest("4g.40gb", count=2, force=True))
    assert forced is not None and len(forced.slots) == 2


def test_a_profile_whose_holds_were_lost_lately_is_placed_and_one_whose_holds_came_back_is_still_held() -> None:
    # given an empty H100 node whose mix is whole GPUs and a few 4g: a 4g is held (see above)
    def engine() -> PlacementEngine:
        return PlacementEngine(empty_fleet(model(H100), 1, 8), stranding_only(), WHOLE_AND_4G)

    lost = engine()
    assert lost.choose(PlacementRequest("4g.40gb")) is None
    # when the pool's held 4g came back and no longer fit, 20 times, then holding one is priced as losing it
    for _ in range(20):
        lost.hold_ended("4g.40gb", placed=False)
    assert lost.choose(PlacementRequest("4g.40gb")) is not None
    # when instead they were placed on a retry after a departure, then the 4g is still held
    retried = engine()
    for _ in range(20):
        retried.hold_ended("4g.40gb", placed=True)
    assert retried.choose(PlacementRequest("4g.40gb")) is None
    # and outcomes of another profile's holds do not price this one's
    other = engine()
    for _ in range(20):
        other.hold_ended("3g.40gb", placed=False)
    assert other.choose(PlacementRequest("4g.40gb")) is None


def test_a_hold_is_priced_by_the_share_of_the_profiles_holds_that_were_lost() -> None:
    # given an H100 GPU, a 4g at slot 0, under whole GPUs and a few 4g (2.7 compute slices stranded in expectation)
    geom = geometry(model(H100))
    empty = geom.named_key(())
    i = geom.index["4g.40gb"]
    option = next(o for o in geom.options(empty, i) if o.start == 0)
    policy = HoldingFragmentationAware()

    def held(ended: float, lost: float, forced: float) -> bool:
        counts = dict(WHOLE_AND_4G.counts)
        ctx = HoldContext(geom, empty, option, i, WHOLE_AND_4G, counts, 0.5, 8, 8, ended, lost, forced)
        return policy.holds(ctx)

    # then with no hold ended (nothing departs: fill-until-full) it is held, as before any outcome was known
    assert held(0.0, 0.0, 0.0)
    # and a lost share costs the request's 4 compute slices: 4 of 40 lost (0.4) is held, 30 of 40 (2.9) is not
    assert held(40.0, 4.0, 0.0) and not held(40.0, 30.0, 0.0)
    # and holds that were all placed, even all when forced, do not stop it
    assert held(40.0, 0.0, 40.0)


def test_the_outcomes_of_holds_fade_as_requests_pass() -> None:
    # given a pool whose held 4g were all lost lately
    engine = PlacementEngine(empty_fleet(model(H100), 1, 8), "ours-hold", WHOLE_AND_4G)
    for _ in range(20):
        engine.hold_ended("4g.40gb", placed=False)
    ended, lost, forced = engine.held_outcomes("4g.40gb")
    assert (ended, lost, forced) == (20.0, 20.0, 0.0)
    # when 2,000 requests pass (four half-lives), then those outcomes weigh a sixteenth (lost share 1.25 / 2.25), and
    # a 4g is held again
    for _ in range(2000):
        engine.choose(PlacementRequest("7g.80gb"))
    assert engine.held_outcomes("4g.40gb") == pytest.approx((1.25, 1.25, 0.0))
    assert engine.choose(PlacementRequest("4g.40gb")) is None


def test_holds_stay_within_a_budget_of_the_pools_compute_until_a_release() -> None:
    # given an empty pool of 2 H100 GPUs (14 compute slices) whose mix is whole GPUs and a few 4g
    engine = PlacementEngine(empty_fleet(model(H100), 1, 2), "ours-hold", WHOLE_AND_4G)
    # when a 4g.40gb arrives, then it is held (4 slices, within 0.4 x 14)
    assert engine.choose(PlacementRequest("4g.40gb")) is None
    # when another arrives, then it is placed: 8 slices held would pass the budget
    placed = engine.place(PlacementRequest("4g.40gb"), "a")
    assert placed is not None
    # when an allocation ends, then the budget starts again and the next 4g.40gb is held
    engine.release(placed.node, placed.gpu_index, placed.start)
    assert engine.choose(PlacementRequest("4g.40gb")) is None


def test_rollouts_over_the_fleet_veto_a_hold_that_the_gpu_alone_favours() -> None:
    # given an empty pool of 4 H100 GPUs whose tenants ask for whole GPUs and 1g.10gb, half and half
    mix = DemandMix.from_shares({"7g.80gb": 0.5, "1g.10gb": 0.5})
    geom = geometry(model(H100))
    empty = geom.named_key(())
    i = geom.index["1g.10gb"]
    engine = PlacementEngine(empty_fleet(model(H100), 1, 4), stranding_only(), mix)
    decision = engine.choose(PlacementRequest("1g.10gb"))
    # when a 1g.10gb arrives, then on its GPU alone it strands more than the pool accepts (a whole GPU would take
    # the GPU it breaks)
    assert decision is not None
    option = next(o for o in geom.options(empty, i) if o.start == decision.start)
    alone = HoldContext(geom, empty, option, i, mix, mix.counts, 0.0, 28, 4)
    assert HoldingFragmentationAware().holds(alone)
    # but the pool places it: over the fleet, the 1g.10gb that come fill the GPU it opens, and the whole GPUs that
    # come are too few to need it
    assert decision.rank[0] == 1.0


def test_a_flag_that_the_counts_of_now_would_not_set_does_not_open_a_gpu_in_a_fill() -> None:
    # given a pool of 8 H100 GPUs with a 3g.40gb at slot 4 on the first, whose learner has seen 30 x 3g.40gb but
    # still publishes the prior, under which pairing two 3g strands a slice that 1g and 2g would have used
    engine = PlacementEngine(empty_fleet(model(H100), 1, 8), "ours-hold", _stale_learner("3g.40gb", 30))
    first = engine.place(PlacementRequest("3g.40gb", force=True), "a")
    assert first is not None and first.start == 4
    # when the next 3g.40gb arrives, then it pairs with the first, as ``ours`` ranks it, instead of opening a GPU
    d = engine.choose(PlacementRequest("3g.40gb"))
    assert d is not None and (d.gpu_index, d.start) == (first.gpu_index, 0) and d.rank[0] == 0.0
    # and the flag alone would have opened a GPU: under the published prior, pairing is flagged and an empty GPU not
    geom = geometry(model(H100))
    i = geom.index["3g.40gb"]
    prior = DemandMix({}, 20.0).weights(model(H100))
    policy = HoldingFragmentationAware().sized_for(8)
    paired = policy.rank(geom, geom.named_key((("3g.40gb", 4, False),)), i, prior)
    opened = policy.rank(geom, geom.named_key(()), i, prior)
    assert paired is not None and opened is not None
    assert paired[0][0] == 1.0 and opened[0][0] == 0.0


def test_once_allocations_end_the_flag_orders_placement_again() -> None:
    # given the same pool, where an allocation has ended since (the release rate is no longer zero)
    engine = PlacementEngine(empty_fleet(model(H100), 1, 8), "ours-hold", _stale_learner("3g.40gb", 30))
    first = engine.place(PlacementRequest("3g.40gb", force=True), "a")
    gone = engine.place(PlacementRequest("1g.10gb", force=True), "b")
    assert first is not None and gone is not None
    engine.release(gone.node, gone.gpu_index, gone.start)
    # when the next 3g.40gb arrives, then the unflagged GPU wins again (session 10's rule, for departures)
    d = engine.choose(PlacementRequest("3g.40gb"))
    assert d is not None and (d.gpu_index, d.start) != (first.gpu_index, 0) and d.rank[0] == 0.0


def test_above_64_gpus_rollouts_over_a_sample_of_the_pool_veto_a_hold_that_the_gpu_alone_favours() -> None:
    # given an empty pool of 128 H100 GPUs whose tenants ask for whole GPUs and 1g.10gb, half and half
    mix = DemandMix.from_shares({"7g.80gb": 0.5, "1g.10gb": 0.5})
    engine = PlacementEngine(empty_fleet(model(H100), 16, 8), stranding_only(), mix)
    # when a 1g.10gb arrives, then it is placed although its GPU alone would hold it (the rank flags it): rollouts
    # over 64 GPUs in the pool's proportions see the 1g.10gb that come fill the GPU it opens
    decision = engine.choose(PlacementRequest("1g.10gb"))
    assert decision is not None and decision.rank[0] == 1.0
    # and without the sample (session 11: no veto above 64 GPUs) it was held
    no_sample = stranding_only()
    no_sample.VETO_SAMPLE = 0
    assert PlacementEngine(empty_fleet(model(H100), 16, 8), no_sample, mix).choose(PlacementRequest("1g.10gb")) is None


def test_above_64_gpus_the_veto_counts_what_the_fill_has_held_already() -> None:
    # given an empty pool of 128 H100 GPUs (896 compute slices) whose tenants ask for 3g.40gb and whole GPUs, 7 to 3
    mix = DemandMix.from_shares({"3g.40gb": 0.7, "7g.80gb": 0.3})
    fresh = PlacementEngine(empty_fleet(model(H100), 16, 8), "ours-hold", mix)
    # when a 3g.40gb arrives first, then it is held: the whole GPUs to come need the GPU it would break
    assert fresh.choose(PlacementRequest("3g.40gb")) is None
    # but when the fill has already held 300 compute slices (within the budget of 0.4 x 896), then it is placed: a fill
    # of 130 % of the pool's compute has only 1,165 - 300 slices left to offer, too few whole GPUs to need every GPU
    engine = PlacementEngine(empty_fleet(model(H100), 16, 8), "ours-hold", mix)
    engine.held = 300.0
    decision = engine.choose(PlacementRequest("3g.40gb"))
    assert decision is not None and decision.rank[0] == 1.0


def test_a_sampled_fleet_keeps_the_pools_proportions_and_the_gpu_decided_on() -> None:
    geom = geometry(model(H100))
    empty = geom.named_key(())
    one = geom.named_key((("3g.40gb", 4, False),))
    whole = geom.named_key((("7g.80gb", 0, False),))
    # given 512 GPUs: 300 empty, 200 with a 3g.40gb, 12 with a whole GPU
    pool = {empty: 300, one: 200, whole: 12}
    # when 64 are sampled around a GPU with a whole GPU, then 64 in the same proportions, that GPU's layout included
    sample = rollout.sample_fleet(pool, whole, 64)
    assert sum(sample.values()) == 64
    assert sample[empty] in (37, 38) and sample[one] == 25 and sample[whole] in (1, 2)
    # and a pool no larger than the sample is itself
    assert rollout.sample_fleet({empty: 3, one: 1}, one, 64) == {empty: 3, one: 1}
