"""Static-MIG reconfiguration: fewest operations, busy instances untouched, valid at every step."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from allocations.mig.fleet import Instance
from allocations.mig.reconfig import Operation, intermediate_layouts, plan_reconfiguration

from .brute import MODELS, max_more, model, valid_layouts

H100 = "NVIDIA H100 80GB HBM3"


def test_it_reuses_a_free_instance_without_any_operation() -> None:
    # given a free 3g.40gb at slot 4
    layout = [Instance("1g.10gb", 0, "a"), Instance("3g.40gb", 4)]
    # when planning for a 3g.40gb
    plan = plan_reconfiguration(model(H100), layout, "3g.40gb")
    # then nothing is destroyed or created
    assert plan is not None and (plan.operations, plan.targets) == ((), (("3g.40gb", 4),))


def test_it_destroys_the_fewest_free_instances_then_creates() -> None:
    # given busy 1g at 0, free 1g at 1, free 2g at 2, free 3g at 4
    layout = [Instance("1g.10gb", 0, "a"), Instance("1g.10gb", 1), Instance("2g.20gb", 2), Instance("3g.40gb", 4)]
    # when two 2g.20gb are requested
    plan = plan_reconfiguration(model(H100), layout, "2g.20gb", count=2)
    # then the free 2g is reused, the 3g destroyed and a 2g created in its place: 2 operations
    assert plan is not None
    assert plan.operations == (Operation("destroy", "3g.40gb", 4), Operation("create", "2g.20gb", 4))
    assert plan.targets == (("2g.20gb", 2), ("2g.20gb", 4))


def test_it_never_touches_a_busy_instance_even_when_that_is_the_only_way() -> None:
    # given a busy 1g.10gb at slot 0
    layout = [Instance("1g.10gb", 0, "a"), Instance("2g.20gb", 2)]
    # when a 4g.40gb (slots 0-3 only) is requested, then there is no plan
    assert plan_reconfiguration(model(H100), layout, "4g.40gb") is None


def test_restore_recreates_destroyed_free_instances_where_they_still_fit() -> None:
    # given a free 2g at 0 and free 2g at 2 on an otherwise empty GPU
    layout = [Instance("2g.20gb", 0), Instance("2g.20gb", 2)]
    # when a 3g.40gb is requested with restore
    plan = plan_reconfiguration(model(H100), layout, "3g.40gb", restore=True)
    # then nothing needs destroying (3g goes to slot 4), so nothing is restored
    assert plan is not None and plan.operations == (Operation("create", "3g.40gb", 4),)
    # and a 4g.40gb needs both 2g destroyed; one 2g comes back at slot 4
    plan = plan_reconfiguration(model(H100), layout, "4g.40gb", restore=True)
    assert plan is not None
    assert plan.operations == (
        Operation("destroy", "2g.20gb", 0),
        Operation("destroy", "2g.20gb", 2),
        Operation("create", "4g.40gb", 0),
        Operation("create", "2g.20gb", 4),
    )
    assert plan.restored == (("2g.20gb", 4),)


@st.composite
def layouts(draw: st.DrawFn) -> tuple[str, list[Instance], str, int]:
    name = draw(st.sampled_from(MODELS))
    choices = sorted(valid_layouts(name), key=lambda lay: sorted(lay))
    lay = sorted(draw(st.sampled_from(choices)))
    free = draw(st.lists(st.booleans(), min_size=len(lay), max_size=len(lay)))
    instances = [Instance(p, s, None if f else f"o{k}") for k, ((p, s), f) in enumerate(zip(lay, free, strict=True))]
    profile = draw(st.sampled_from(model(name).profile_names()))
    return name, instances, profile, draw(st.integers(1, 2))


@settings(max_examples=60, deadline=None)
@given(case=layouts())
def test_plans_are_minimal_leave_busy_instances_alone_and_stay_valid_at_every_step(
    case: tuple[str, list[Instance], str, int],
) -> None:
    # given a layout of busy and free instances on one of the four models (H200: unconfirmed placements)
    name, instances, profile, count = case
    # when planning for `count` instances of `profile`
    plan = plan_reconfiguration(model(name), instances, profile, count)
    # then the plan's size equals the brute-force minimum over every set of free instances to destroy
    free = [i for i in instances if i.free]
    best = None
    for k in range(len(free) + 1):
        for drop in itertools.combinations(free, k):
            rest = frozenset((i.profile, i.start) for i in instances if i not in drop)
            reuse = sum(1 for i in free if i not in drop and i.profile == profile)
            creates = max(0, count - reuse)
            if max_more(name, rest, profile) >= creates:
                cost = k + creates
                best = cost if best is None else min(best, cost)
    assert (None if plan is None else plan.cost) == best
    if plan is None:
        return
    # and busy instances are all still there, none destroyed
    assert all(i in plan.layout_after for i in instances if not i.free)
    assert all(
        op.action == "create" or (op.profile, op.start) in {(i.profile, i.start) for i in free}
        for op in plan.operations
    )
    # and every intermediate layout is valid
    assert all(frozenset(step) in valid_layouts(name) for step in intermediate_layouts(instances, plan))
    assert len(plan.targets) == count
