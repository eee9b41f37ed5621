"""Layout validity, checked against a brute-force enumeration of valid layouts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocations.mig.layout import geometry, is_valid_layout, layout_violations

from .brute import MODELS, model, valid_layouts


@pytest.mark.parametrize("name", MODELS)
def test_the_engine_knows_exactly_the_valid_layouts_of_each_model(name: str) -> None:
    # given a model (H200: placements unconfirmed, copied from H100 in the reference)
    geom = geometry(model(name))
    # when the engine enumerates its layouts
    mine = {frozenset((p, s) for p, s, _ in geom.describe(k)) for k in geom.all_layouts()}
    # then they are exactly the brute-force set
    assert mine == valid_layouts(name)


def test_the_four_models_have_the_expected_number_of_layouts() -> None:
    # then the counts are stable facts of the tables (H200 shares H100's unconfirmed grid)
    assert {n: len(valid_layouts(n)) for n in MODELS} == {
        "NVIDIA A100-SXM4-40GB": 2319,
        "NVIDIA H100 80GB HBM3": 2319,
        "NVIDIA H200": 2319,
        "NVIDIA A30": 76,
    }


@settings(max_examples=150, deadline=None)
@given(
    name=st.sampled_from(MODELS),
    picks=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 11)), max_size=9),
)
def test_validity_agrees_with_brute_force_on_arbitrary_instance_sets(name: str, picks: list[tuple[int, int]]) -> None:
    # given any set of (profile, start) pairs, legal or not (H200: unconfirmed placements)
    m = model(name)
    layout = [(m.profiles[i % len(m.profiles)].name, start % m.memory_slices) for i, start in picks]
    # when the engine judges it
    ok = is_valid_layout(m, layout)
    # then it agrees with the enumeration (duplicates are never valid: they overlap)
    assert ok == (len(set(layout)) == len(layout) and frozenset(layout) in valid_layouts(name))


def test_it_never_places_two_instances_on_one_memory_slot() -> None:
    # given 4g.40gb on slots 0-3 and a 2g.20gb asked on slots 2-3
    h100 = model("NVIDIA H100 80GB HBM3")
    # then the layout is refused for the overlap
    assert layout_violations(h100, [("4g.40gb", 0), ("2g.20gb", 2)]) == [
        "2g.20gb at 2 overlaps another instance's memory slots"
    ]


def test_it_refuses_a_start_that_is_not_one_of_the_profiles_placements() -> None:
    # given 1g.10gb at slot 7, which no 1-slot placement covers on 8-slot parts
    h100 = model("NVIDIA H100 80GB HBM3")
    # then the message lists the legal starts
    assert layout_violations(h100, [("1g.10gb", 7)]) == [
        "1g.10gb cannot start at memory slot 7 (legal starts: 0, 1, 2, 3, 4, 5, 6)"
    ]


def test_it_allows_only_one_media_extension_instance_per_gpu() -> None:
    # given A30, where 1g.6gb+me and 2g.12gb+me would both need the GPU's single OFA engine
    a30 = model("NVIDIA A30")
    # then the pair is refused, each alone is fine
    assert layout_violations(a30, [("1g.6gb+me", 0), ("2g.12gb+me", 2)]) == [
        "2 instances with media extensions; at most 1 per GPU"
    ]
    assert is_valid_layout(a30, [("1g.6gb+me", 0), ("1g.6gb", 1), ("2g.12gb", 2)])


def test_it_enforces_max_counts() -> None:
    # given two 1g.10gb+me (max 1) on distinct slots
    h100 = model("NVIDIA H100 80GB HBM3")
    # then the count rule and the media-extension rule are both reported
    assert layout_violations(h100, [("1g.10gb+me", 0), ("1g.10gb+me", 1)]) == [
        "2 instances of 1g.10gb+me; at most 1",
        "2 instances with media extensions; at most 1 per GPU",
    ]


def test_me_all_allows_only_no_media_profiles_beside_it() -> None:
    # given RTX PRO 6000, whose 1g.24gb+me.all takes every media engine
    rtx = model("NVIDIA RTX PRO 6000 Blackwell Server Edition")
    # then a plain 1g beside it is refused and a -me one is accepted
    assert layout_violations(rtx, [("1g.24gb+me.all", 0), ("1g.24gb", 3)]) == [
        "a +me.all instance allows only -me instances beside it"
    ]
    assert is_valid_layout(rtx, [("1g.24gb+me.all", 0), ("1g.24gb-me", 3), ("2g.48gb-me", 6)])


def test_the_reference_guides_sample_layouts_are_valid_on_a100() -> None:
    # given the three A100-40GB layouts the MIG guide shows with -lgi
    a100 = model("NVIDIA A100-SXM4-40GB")
    # then all are valid
    assert is_valid_layout(a100, [("3g.20gb", 0), ("3g.20gb", 4)])
    assert is_valid_layout(a100, [("1g.5gb", 0), ("1g.5gb", 1), ("2g.10gb", 2), ("3g.20gb", 4)])
    assert is_valid_layout(
        a100, [("1g.5gb", 0), ("1g.5gb", 1), ("1g.5gb", 2), ("1g.5gb", 3), ("1g.5gb", 6), ("2g.10gb", 4)]
    )
