"""HAMi's MIG scoring (largest contiguous free run, backtracking fallback), the benchmark's peer policy,
checked against brute force over the valid layouts of tests/mig/brute.py."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from allocations.mig.fleet import Instance
from allocations.mig.hami import best_option, largest_free_run, place_all
from allocations.mig.layout import geometry

from .brute import MODELS, Layout, model, valid_layouts
from .test_placement import H100, fleet_of, where


def run_of(name: str, layout: Layout) -> int:
    """Longest run of free memory slots, from the catalog's placement sizes (not the engine's masks)."""
    m = model(name)
    used = set()
    for profile, start in layout:
        size = next(pl.size for pl in m.profile(profile).placements if pl.start == start)
        used |= set(range(start, start + size))
    best = run = 0
    for slot in range(m.memory_slices):
        run = 0 if slot in used else run + 1
        best = max(best, run)
    return best


def test_largest_free_run_counts_the_longest_gap() -> None:
    # given slots 0, 3 and 4 taken on an 8-slot GPU, then the longest gap is slots 5-7
    assert largest_free_run(0b00011001, 8) == 3
    assert largest_free_run(0, 8) == 8
    assert largest_free_run(0xFF, 8) == 0


def test_hami_puts_a_1g_at_the_edge_of_the_free_region() -> None:
    # given a GPU with 3g.40gb at slot 4: free slots 0-3
    fleet = fleet_of([Instance("3g.40gb", 4, "a")])
    # when HAMi places 1g.10gb, then it takes slot 0 (the edge), leaving 1-3 contiguous; so does first-fit
    assert where(fleet, "1g.10gb", "hami") == ("n1", 0, 0)
    # and with 1g.10gb at slot 0 already, the next one goes to slot 1 (slots 2-3 stay together for a 2g)
    fleet = fleet_of([Instance("3g.40gb", 4, "a"), Instance("1g.10gb", 0, "b")])
    assert where(fleet, "1g.10gb", "hami") == ("n1", 0, 1)


def test_hami_packs_the_most_used_gpu_first() -> None:
    # given an empty GPU first in device order and one holding a 4g.40gb
    fleet = fleet_of([], [Instance("4g.40gb", 0, "a")])
    # when HAMi (binpack) places 2g.20gb, then it goes next to the 4g
    assert where(fleet, "2g.20gb", "hami") == ("n1", 1, 4)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(MODELS), pick=st.integers(0, 10_000), profile=st.integers(0, 30))
def test_hami_keeps_the_largest_run_that_any_placement_could_keep(name: str, pick: int, profile: int) -> None:
    # given any valid layout of one of the four models (H200: placements unconfirmed) and any profile
    m = model(name)
    geom = geometry(m)
    layouts = sorted(valid_layouts(name), key=sorted)
    layout = layouts[pick % len(layouts)]
    p = m.profiles[profile % len(m.profiles)].name
    key = geom.named_key(tuple(sorted((n, s, False) for n, s in layout)))
    # when HAMi chooses where one more instance goes
    chosen = best_option(geom, key, geom.index[p])
    # then it finds room exactly when some valid layout adds it, and no valid addition keeps a longer run
    additions = [
        v for v in valid_layouts(name) if layout < v and len(v - layout) == 1 and next(iter(v - layout))[0] == p
    ]
    assert (chosen is None) == (not additions)
    if chosen is not None:
        after = frozenset((n, s) for n, s, _ in geom.describe(chosen.after))
        assert after in additions
        assert run_of(name, after) == max(run_of(name, v) for v in additions)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(MODELS), wanted=st.lists(st.integers(0, 30), min_size=1, max_size=5))
def test_place_all_finds_a_layout_whenever_one_exists(name: str, wanted: list[int]) -> None:
    # given an empty GPU and several instances for it (the greedy pass may fail; backtracking must not)
    m = model(name)
    geom = geometry(m)
    names = [m.profiles[w % len(m.profiles)].name for w in wanted]
    # when HAMi places them all
    placed = place_all(geom, (), [geom.index[n] for n in names])
    # then it succeeds exactly when some valid layout holds that multiset, and the result is valid
    need = Counter(names)
    possible = any(Counter(p for p, _ in v) == need for v in valid_layouts(name))
    assert (placed is not None) == possible
    if placed is not None:
        final = frozenset((n, s) for n, s, _ in geom.describe(placed[-1].after))
        assert final in valid_layouts(name) and Counter(p for p, _ in final) == need


def test_place_all_backtracks_when_the_greedy_choice_blocks_a_later_instance() -> None:
    # given an empty H100 and a 3g.40gb with two 2g.20gb for it (2g starts at 0, 2 or 4 only)
    geom = geometry(model(H100))
    wanted = [geom.index["2g.20gb"], geom.index["2g.20gb"], geom.index["3g.40gb"]]
    # when the greedy pass puts the 3g at slot 0 (both starts keep a run of 4; lowest start wins), one 2g
    # finds no start; then backtracking moves the 3g to slot 4 and both 2g fit below it
    placed = place_all(geom, (), wanted)
    assert placed is not None
    final = sorted((n, s) for n, s, _ in geom.describe(placed[-1].after))
    assert final == [("2g.20gb", 0), ("2g.20gb", 2), ("3g.40gb", 4)]
    # and a 4g.40gb next to a 4g.40gb fits nowhere, greedy or not
    assert place_all(geom, (), [geom.index["4g.40gb"], geom.index["4g.40gb"]]) is None
