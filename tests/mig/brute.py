"""Brute-force references for the MIG tests, written from the rules in the reference (§2), not from
the engine's code: enumerate every set of (profile, placement) pairs and keep the valid ones."""

from __future__ import annotations

import functools
from collections import Counter

from allocations.mig.catalog import GpuModel, load_catalog

Layout = frozenset[tuple[str, int]]

#: The models the issue asks the property tests to cover. H200's placements are unconfirmed in the
#: reference (start offsets copied from H100); tests that use it say so.
MODELS = ("NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A30")


def model(name: str) -> GpuModel:
    return load_catalog().model(name)


def rules_hold(m: GpuModel, layout: Layout) -> bool:
    """Count, media-extension and compute rules (placement legality and overlap are checked while
    enumerating)."""
    counts = Counter(name for name, _ in layout)
    if any(n > m.profile(name).max_count for name, n in counts.items()):
        return False
    media = [name for name, _ in layout if "+me" in name]
    if len(media) > 1:
        return False
    if any(name.endswith("+me.all") for name in media) and any(
        not n.endswith("-me") for n, _ in layout if n not in media
    ):
        return False
    return sum(m.profile(name).compute_slices for name, _ in layout) <= m.compute_slices


@functools.cache
def valid_layouts(name: str) -> frozenset[Layout]:
    """Every valid layout of a model, by exhaustive search over (profile, placement) pairs."""
    m = model(name)
    pairs = [(p.name, pl.start, set(range(pl.start, pl.start + pl.size))) for p in m.profiles for pl in p.placements]
    found: set[Layout] = set()

    def walk(k: int, chosen: tuple[tuple[str, int], ...], used: frozenset[int]) -> None:
        if k == len(pairs):
            layout = frozenset(chosen)
            if rules_hold(m, layout):
                found.add(layout)
            return
        walk(k + 1, chosen, used)
        profile, start, slots = pairs[k]
        if not slots & used:
            walk(k + 1, (*chosen, (profile, start)), used | slots)

    walk(0, (), frozenset())
    return frozenset(found)


def max_more(name: str, layout: Layout, profile: str) -> int:
    """Most instances of ``profile`` that can be added to ``layout``, by scanning all valid layouts."""
    best = -1
    for v in valid_layouts(name):
        if layout <= v and all(p == profile for p, _ in v - layout):
            best = max(best, len(v - layout))
    return best
