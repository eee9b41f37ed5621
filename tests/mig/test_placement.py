"""Placement policies and the engine's index."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocations.mig.demand import DemandMix
from allocations.mig.engine import InvalidLayout, PlacementEngine, choose_placement, empty_fleet, fits_now
from allocations.mig.fleet import Fleet, Gpu, Instance, Node, PlacementRequest

from .brute import MODELS, max_more, model, valid_layouts

H100 = "NVIDIA H100 80GB HBM3"


def fleet_of(*layouts: list[Instance], pool: str = "default", node: str = "n1") -> Fleet:
    m = model(H100)
    return Fleet([Node(node, [Gpu(node, i, m, list(lay)) for i, lay in enumerate(layouts)], pool)])


def where(fleet: Fleet, profile: str, policy: str, **kw: object) -> tuple[str, int, int] | None:
    d = choose_placement(fleet, PlacementRequest(profile, **kw), policy)  # type: ignore[arg-type]
    return None if d is None else (d.node, d.gpu_index, d.start)


def test_first_fit_takes_the_first_gpu_in_device_order_and_its_lowest_slot() -> None:
    # given two empty GPUs
    fleet = fleet_of([], [])
    # when first-fit places 3g.40gb
    # then it lands on GPU 0 at slot 0, as DynamicMIG would
    assert where(fleet, "3g.40gb", "first-fit") == ("n1", 0, 0)


def test_best_fit_takes_the_gpu_left_with_the_least_free_capacity() -> None:
    # given a GPU with 4g.40gb and one with a 1g.10gb
    fleet = fleet_of([Instance("4g.40gb", 0, "a")], [Instance("1g.10gb", 0, "b")])
    # when best-fit places 2g.20gb
    # then it goes next to the 4g (1 slice left there instead of 4)
    assert where(fleet, "2g.20gb", "best-fit") == ("n1", 0, 4)


def test_ours_puts_3g_on_slot_4_where_it_strands_nothing() -> None:
    # given an empty GPU: 3g at slot 0 would strand slot 7 (only 1g.2x, 3g or 7g reach it)
    fleet = fleet_of([])
    # when our policy places 3g.40gb, then it picks slot 4
    assert where(fleet, "3g.40gb", "ours") == ("n1", 0, 4)
    assert where(fleet, "3g.40gb", "first-fit") == ("n1", 0, 0)


def test_ours_puts_the_double_memory_1g_on_the_last_slot_pair() -> None:
    # given an empty GPU
    fleet = fleet_of([])
    # when our policy places 1g.20gb, then it takes slots 6-7, which only 1g.2x, 3g or 7g can use
    assert where(fleet, "1g.20gb", "ours") == ("n1", 0, 6)


def test_ours_keeps_a_whole_gpu_free_and_fills_the_one_in_use() -> None:
    # given an empty GPU first in device order and a GPU holding 3g.40gb at slot 4
    fleet = fleet_of([], [Instance("3g.40gb", 4, "a")])
    # when a 1g.10gb is placed
    # then first-fit breaks the whole GPU, ours fills the used one
    assert where(fleet, "1g.10gb", "first-fit") == ("n1", 0, 0)
    assert where(fleet, "1g.10gb", "ours") == ("n1", 1, 0)


def test_ours_pairs_a_4g_with_a_3g_on_the_same_gpu() -> None:
    # given an empty GPU and one with 4g.40gb at slot 0
    fleet = fleet_of([], [Instance("4g.40gb", 0, "a")])
    # when a 3g.40gb is placed with our policy, then it completes the 4g's GPU (7 of 7 slices)
    assert where(fleet, "3g.40gb", "ours") == ("n1", 1, 4)


def test_it_reuses_a_free_instance_of_the_requested_profile() -> None:
    # given a GPU with a free 2g.20gb at slot 2 (static MIG)
    fleet = fleet_of([Instance("2g.20gb", 2)])
    # when first-fit places a 2g.20gb
    d = choose_placement(fleet, PlacementRequest("2g.20gb"), "first-fit")
    # then it reuses the free one instead of creating at slot 0
    assert d is not None and (d.start, d.slots[0].reuse) == (2, True)


def test_it_answers_none_when_the_profile_fits_nowhere() -> None:
    # given a full GPU
    fleet = fleet_of([Instance("7g.80gb", 0, "a")])
    # then no policy finds room
    assert [where(fleet, "1g.10gb", p) for p in ("first-fit", "best-fit", "ours")] == [None, None, None]


def test_it_only_considers_the_requested_pool_and_model() -> None:
    # given one empty GPU in pool "a" and one in pool "b"
    m = model(H100)
    fleet = Fleet([Node("na", [Gpu("na", 0, m)], "a"), Node("nb", [Gpu("nb", 0, m)], "b")])
    # then a request for pool b lands in pool b, and a profile of another model fits nowhere
    assert where(fleet, "1g.10gb", "first-fit", pool="b") == ("nb", 0, 0)
    assert where(fleet, "1g.18gb", "first-fit") is None
    assert where(fleet, "1g.10gb", "first-fit", model="NVIDIA H200") is None


def test_several_instances_of_one_request_go_to_one_node() -> None:
    # given node n1 with room for one 4g and node n2 with two empty GPUs
    m = model(H100)
    fleet = Fleet(
        [
            Node("n1", [Gpu("n1", 0, m), Gpu("n1", 1, m, [Instance("1g.10gb", 0, "a")])]),
            Node("n2", [Gpu("n2", 0, m), Gpu("n2", 1, m)]),
        ]
    )
    # when two 4g.40gb are requested together
    d = choose_placement(fleet, PlacementRequest("4g.40gb", count=2), "first-fit")
    # then both go to n2, one per GPU
    assert d is not None
    assert [(s.node, s.gpu_index, s.start) for s in d.slots] == [("n2", 0, 0), ("n2", 1, 0)]


def test_commit_and_release_keep_the_layouts_and_owners() -> None:
    # given an engine on one empty GPU
    engine = PlacementEngine(fleet_of([]), "first-fit")
    # when placing two instances and releasing the first as a free instance (static MIG)
    first = engine.place(PlacementRequest("4g.40gb"), "alice")
    engine.place(PlacementRequest("3g.40gb"), "bob")
    assert first is not None
    engine.release("n1", 0, first.start, destroy=False)
    # then the layout shows the free 4g and bob's 3g, and only the free 4g is available
    assert engine.instances("n1", 0) == [Instance("4g.40gb", 0, None), Instance("3g.40gb", 4, "bob")]
    assert engine.fits_now() == {
        "1g.10gb": 0,
        "1g.10gb+me": 0,
        "1g.20gb": 0,
        "2g.20gb": 0,
        "3g.40gb": 0,
        "4g.40gb": 1,
        "7g.80gb": 0,
    }
    # and with reconfiguration allowed the free 4g's slots count as unoccupied
    assert engine.fits_now(reconfigure=True)["1g.10gb"] == 4


def test_it_refuses_a_fleet_with_an_invalid_layout() -> None:
    # given a GPU reported with overlapping instances
    fleet = fleet_of([Instance("4g.40gb", 0, "a"), Instance("2g.20gb", 2, "b")])
    # when building an engine, then it names the GPU and the broken rule
    with pytest.raises(InvalidLayout) as e:
        PlacementEngine(fleet)
    assert str(e.value) == "n1 GPU 0 (NVIDIA H100 80GB HBM3): 2g.20gb at 2 overlaps another instance's memory slots"


OPS = st.lists(
    st.tuples(st.sampled_from(["place", "place", "place", "release", "free"]), st.integers(0, 99), st.integers(0, 99)),
    max_size=25,
)


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(MODELS), policy=st.sampled_from(["first-fit", "best-fit", "ours"]), ops=OPS)
def test_every_layout_the_engine_produces_is_valid_and_its_what_if_is_exact(
    name: str, policy: str, ops: list[tuple[str, int, int]]
) -> None:
    # given a 2-node x 2-GPU fleet of one of the four models (H200: placements unconfirmed)
    m = model(name)
    profiles = [p.name for p in m.profiles]
    engine = PlacementEngine(empty_fleet(m, 2, 2), policy, DemandMix())
    gpus = [(f"node-{n:04d}", g) for n in range(2) for g in range(2)]
    for op, a, b in ops:
        # when placing, releasing (dynamic) or freeing (static) at random
        if op == "place":
            profile = profiles[a % len(profiles)]
            decision = engine.place(PlacementRequest(profile), f"o{a}")
            layouts = [frozenset((i.profile, i.start) for i in engine.instances(*g)) for g in gpus]
            if decision is None:
                # then "no room" is true: no GPU can take one more
                assert all(max_more(name, lay, profile) == 0 for lay in layouts)
        else:
            node, gpu = gpus[a % len(gpus)]
            held = [i for i in engine.instances(node, gpu) if i.owner is not None]
            if held:
                engine.release(node, gpu, held[b % len(held)].start, destroy=op == "release")
        # then every GPU's layout is one of the valid layouts
        for g in gpus:
            lay = frozenset((i.profile, i.start) for i in engine.instances(*g))
            assert lay in valid_layouts(name)
        # and the what-if matches brute force (free instances of a profile count for that profile)
        expected = dict.fromkeys(profiles, 0)
        for g in gpus:
            insts = engine.instances(*g)
            lay = frozenset((i.profile, i.start) for i in insts)
            for p in profiles:
                expected[p] += max_more(name, lay, p) + sum(1 for i in insts if i.free and i.profile == p)
        assert engine.fits_now() == expected
        assert fits_now(engine.snapshot()) == expected
