"""Pre-shaping: free instances reshaped for the demand mix, held ones untouched, every step valid."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from allocations.mig.demand import DemandMix
from allocations.mig.fleet import Instance
from allocations.mig.layout import geometry, is_valid_layout
from allocations.mig.preshape import MIN_GAIN, OP_COST, expected_served, plan_preshape
from allocations.mig.reconfig import Operation

from .brute import model, valid_layouts

H100 = "NVIDIA H100 80GB HBM3"
SMALL_MIX = DemandMix.from_shares({"1g.10gb": 0.5, "2g.20gb": 0.3, "3g.40gb": 0.2})


def test_the_expected_requests_served_follow_the_mix() -> None:
    geom = geometry(model(H100))
    weights = SMALL_MIX.weights(model(H100))
    # one 1g.10gb serves the next request with probability 0.5; two serve 0.5 + 0.25 more
    assert expected_served(geom, ["1g.10gb"], weights) == 0.5
    assert expected_served(geom, ["1g.10gb", "1g.10gb"], weights) == 0.75
    # a 7g nobody asks for serves nothing
    assert expected_served(geom, ["7g.80gb"], weights) == 0.0


def test_a_whole_free_gpu_is_carved_for_the_mix() -> None:
    # given a free 7g.80gb and a mix of small profiles
    plan = plan_preshape(model(H100), [Instance("7g.80gb", 0)], SMALL_MIX)
    # then it is destroyed and replaced by the mix's shapes
    assert plan is not None
    assert plan.operations == (
        Operation("destroy", "7g.80gb", 0),
        Operation("create", "1g.10gb", 0),
        Operation("create", "1g.10gb", 1),
        Operation("create", "2g.20gb", 2),
        Operation("create", "3g.40gb", 4),
    )
    assert (plan.served_before, round(plan.served_after, 4)) == (0.0, 2.605)


def test_held_instances_stay_and_a_good_layout_is_left_alone() -> None:
    # given a held 3g at 4 and free 1g, 1g, 2g: already the mix's best
    layout = [Instance("3g.40gb", 4, "a"), Instance("1g.10gb", 0), Instance("1g.10gb", 1), Instance("2g.20gb", 2)]
    # then no change is proposed
    assert plan_preshape(model(H100), layout, SMALL_MIX) is None


def test_only_offered_profiles_are_created() -> None:
    # given a free 7g on a pool that offers only 1g.10gb and 3g.40gb
    plan = plan_preshape(model(H100), [Instance("7g.80gb", 0)], SMALL_MIX, allowed={"1g.10gb", "3g.40gb"})
    # then
    assert plan is not None
    assert {op.profile for op in plan.operations if op.action == "create"} <= {"1g.10gb", "3g.40gb"}


MIXES = [
    SMALL_MIX,
    DemandMix.from_shares({"3g.40gb": 0.6, "4g.40gb": 0.2, "7g.80gb": 0.2}),
    DemandMix.from_shares({"1g.20gb": 0.4, "2g.20gb": 0.4, "1g.10gb": 0.2}),
    DemandMix({}, 1.0),  # the default prior
]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_plans_keep_held_instances_stay_valid_and_are_the_best_by_brute_force(data: st.DataObject) -> None:
    # given any valid H100 layout, some of its instances held, and a mix
    m = model(H100)
    layouts = sorted(valid_layouts(H100), key=sorted)
    layout = sorted(data.draw(st.sampled_from(layouts)))
    held_flags = data.draw(st.lists(st.booleans(), min_size=len(layout), max_size=len(layout)))
    instances = [Instance(p, s, "x" if h else None) for (p, s), h in zip(layout, held_flags, strict=True)]
    mix = data.draw(st.sampled_from(MIXES))
    # when
    plan = plan_preshape(m, instances, mix)
    # then the brute-force best score over layouts that keep the held instances
    geom = geometry(m)
    weights = mix.weights(m)
    held = {(x.profile, x.start) for x in instances if not x.free}
    current = {(x.profile, x.start) for x in instances if x.free}

    def score(v: frozenset[tuple[str, int]]) -> float:
        free = v - held
        return expected_served(geom, [p for p, _ in free], weights) - OP_COST * len(free ^ current)

    best = max(score(v) for v in valid_layouts(H100) if held <= v)
    before = expected_served(geom, [p for p, _ in current], weights)
    if plan is None:
        # nothing worth MIN_GAIN: a best-scoring layout is the current one or gains less
        tops = [v for v in valid_layouts(H100) if held <= v and abs(score(v) - best) < 1e-9]
        gains = [expected_served(geom, [p for p, _ in v - held], weights) - before for v in tops]
        assert any(v - held == current or g < MIN_GAIN for v, g in zip(tops, gains, strict=True))
        return
    after = {(x.profile, x.start) for x in plan.layout_after}
    assert abs(score(frozenset(after)) - best) < 1e-9
    assert plan.gain >= MIN_GAIN and abs(plan.served_before - before) < 1e-9
    # held instances untouched, destroys first, every intermediate layout valid
    assert held <= after
    assert all(
        op.action == "destroy" for op in plan.operations[: sum(op.action == "destroy" for op in plan.operations)]
    )
    touched = {(op.profile, op.start) for op in plan.operations}
    assert not touched & held
    now = {(x.profile, x.start) for x in instances}
    for op in plan.operations:
        now = now - {(op.profile, op.start)} if op.action == "destroy" else now | {(op.profile, op.start)}
        assert is_valid_layout(m, sorted(now))
    assert now == after
