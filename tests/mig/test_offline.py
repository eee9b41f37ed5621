"""The offline optimum used as the benchmark's bound."""

from __future__ import annotations

import itertools
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from allocations.mig.offline import gpu_configurations, offline_optimum

from .brute import model, valid_layouts

A30 = "NVIDIA A30"
A30_PLAIN = ("1g.6gb", "2g.12gb", "4g.24gb")


def test_the_h100_has_the_expected_configurations_of_3g_and_4g() -> None:
    # given H100 and only the 3g and 4g profiles
    configs = gpu_configurations(model("NVIDIA H100 80GB HBM3"), ["3g.40gb", "4g.40gb"])
    # then the distinct instance counts are: none, one 3g, two 3g, one 4g, 4g + 3g
    assert configs == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)]


def test_two_3g_per_gpu_serve_6_slices_but_4g_plus_3g_serve_7() -> None:
    # given 2 H100s and demand for four 3g and two 4g
    result = offline_optimum(model("NVIDIA H100 80GB HBM3"), 2, {"3g.40gb": 4, "4g.40gb": 2})
    # then the optimum pairs each 4g with a 3g: 14 slices, proven
    assert (result.value, result.optimal) == (14, True)
    assert result.placed == {"3g.40gb": 2, "4g.40gb": 2}


@settings(max_examples=25, deadline=None)
@given(demand=st.tuples(st.integers(0, 6), st.integers(0, 4), st.integers(0, 2)))
def test_the_optimum_equals_brute_force_on_two_a30s(demand: tuple[int, int, int]) -> None:
    # given two A30s and a demand for their plain profiles
    want = dict(zip(A30_PLAIN, demand, strict=True))
    m = model(A30)
    plain = [lay for lay in valid_layouts(A30) if all(p in A30_PLAIN for p, _ in lay)]
    # when brute force tries every pair of layouts
    best = 0
    for a, b in itertools.product(plain, repeat=2):
        used = Counter(p for p, _ in a) + Counter(p for p, _ in b)
        if all(used[p] <= want[p] for p in used):
            best = max(best, sum(m.profile(p).compute_slices * n for p, n in used.items()))
    # then the branch and bound finds the same value
    assert offline_optimum(m, 2, want).value == best
