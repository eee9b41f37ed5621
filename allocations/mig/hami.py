"""``hami``: the MIG placement scoring HAMi merged in 2026, as a peer for the benchmark.

Written from the rule as HAMi describes it (Project-HAMi/HAMi issue #2831 and pull request #2855,
"score MIG placements and add backtracking fallback"), not from its code:

* on one GPU, prefer the placement that leaves the largest contiguous run of free memory slots (a
  small instance goes to the edge of a free region, so 2g/3g/4g still find room); ties go to the
  lowest start, so the choice is deterministic;
* several instances for one GPU are placed largest first, each greedily by that score; when the
  greedy pass cannot place them all, a backtracking search over every placement order decides.

Across GPUs HAMi ranks devices by its scheduler policy; we use its ``binpack`` policy (the GPU left
with the least free compute first), the one meant for packing, then the contiguity score. Free
(static MIG) instances count as occupied: they are not free memory until destroyed.
"""

from __future__ import annotations

from collections.abc import Sequence

from .layout import Geometry, LayoutKey, Option

Rank = tuple[float, ...]


def largest_free_run(occupied: int, width: int) -> int:
    """Length of the longest run of free memory slots in the ``occupied`` bitmask."""
    best = run = 0
    for slot in range(width):
        if occupied >> slot & 1:
            run = 0
        else:
            run += 1
            best = max(best, run)
    return best


def best_option(geom: Geometry, key: LayoutKey, i: int) -> Option | None:
    """HAMi's choice for one more instance of profile ``i``: a free instance of it first (no new memory
    taken), else the placement that keeps the largest free run, lowest start on ties."""
    options = geom.options(key, i)
    if not options:
        return None
    if options[0].reuse:
        return options[0]
    return min(options, key=lambda o: (-largest_free_run(geom.info(o.after).occupied, geom.width), o.start))


def place_all(geom: Geometry, key: LayoutKey, profiles: Sequence[int]) -> list[Option] | None:
    """Place every profile index of ``profiles`` on one GPU: greedy (largest first, best contiguity),
    then backtracking over all options when the greedy pass fails. ``None`` when no assignment exists.
    The returned options are in the order they were placed (each ``after`` is the layout so far)."""
    order = sorted(profiles, key=lambda i: (-geom.size[i], -geom.compute[i], i))
    greedy: list[Option] = []
    current = key
    for i in order:
        chosen = best_option(geom, current, i)
        if chosen is None:
            break
        greedy.append(chosen)
        current = chosen.after
    else:
        return greedy
    return _search(geom, key, order, 0)


def _search(geom: Geometry, key: LayoutKey, order: Sequence[int], k: int) -> list[Option] | None:
    if k == len(order):
        return []
    ranked = sorted(
        geom.options(key, order[k]),
        key=lambda o: (not o.reuse, -largest_free_run(geom.info(o.after).occupied, geom.width), o.start),
    )
    for o in ranked:
        rest = _search(geom, o.after, order, k + 1)
        if rest is not None:
            return [o, *rest]
    return None


class HamiContiguity:
    """Policy adapter for the engine: rank = (free compute left on the GPU, minus the largest free run)."""

    name = "hami"
    uses_demand = False
    admission = False

    def rank(self, geom: Geometry, key: LayoutKey, i: int, weights: tuple[float, ...]) -> tuple[Rank, Option] | None:
        chosen = best_option(geom, key, i)
        if chosen is None:
            return None
        after = geom.info(chosen.after)
        free_compute = geom.model.compute_slices - after.used_compute
        return (float(free_compute), float(-largest_free_run(after.occupied, geom.width))), chosen
