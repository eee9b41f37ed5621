"""Pre-shaping for static MIG: reshape a GPU's free instances for the demand mix while nobody is waiting.

In static MIG a request is served at once when a free instance of its profile exists; otherwise the GPU is
reconfigured (destroy free instances, create the new one, restart the DRA plugin: seconds to minutes, see
:mod:`.reconfig`). Pre-shaping moves that cost into quiet periods: it picks, for one GPU, the free layout that
serves the most of the expected next requests, and returns the operations that get there.

Value of a free layout: the expected number of requests it serves before the first one it cannot, when requests
arrive independently from the learnt mix (:mod:`.demand`) and each served request takes a free instance of its
profile. With free counts ``c`` and mix weights ``w``::

    served(c) = sum over profiles p with c[p] > 0 of  w[p] * (1 + served(c - e_p))

So a layout of only the most requested profile serves the first few requests but is stuck at the first other
one; a layout matching the mix serves longest. The search is exhaustive over the model's valid layouts that keep
every held instance where it is (a few thousand on an 8-slot grid), scoring ``served - op_cost * operations``;
a change is proposed only when it gains at least ``min_gain`` expected requests, so a layout that is already
good is left alone (no churn on noise).

Operations are destroys, then creates: every held instance is kept and both the old and the new layout contain
them, so every intermediate layout is valid (validity is downward closed, :mod:`.layout`), the same rule
:func:`.reconfig.plan_reconfiguration` relies on. Busy or idle, held instances are never touched. Pure Python,
no Django.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from .catalog import GpuModel
from .demand import DemandMix
from .fleet import Instance
from .layout import Geometry, geometry
from .reconfig import Operation

#: Expected requests one operation must buy (an operation costs a plugin restart's share of a reconfiguration).
OP_COST = 0.1
#: Smallest gain in expected requests served worth a reconfiguration.
MIN_GAIN = 0.3


@dataclass(frozen=True, slots=True)
class PreshapePlan:
    """Operations (destroys first) that turn a GPU's free instances into ``layout_after``; the expected number
    of requests the free instances serve before and after."""

    operations: tuple[Operation, ...]
    layout_after: tuple[Instance, ...]
    served_before: float
    served_after: float

    @property
    def gain(self) -> float:
        return self.served_after - self.served_before


def expected_served(geom: Geometry, free: Sequence[str], weights: Sequence[float]) -> float:
    """Expected requests the free instances ``free`` (profile names) serve before the first miss."""
    counts = [0] * len(geom.profiles)
    for name in free:
        counts[geom.index[name]] += 1
    return _served(tuple(counts), tuple(weights))


@functools.lru_cache(maxsize=65_536)
def _served(counts: tuple[int, ...], weights: tuple[float, ...]) -> float:
    total = 0.0
    for i, n in enumerate(counts):
        if n and weights[i] > 0:
            rest = counts[:i] + (n - 1,) + counts[i + 1 :]
            total += weights[i] * (1.0 + _served(rest, weights))
    return total


def plan_preshape(
    model: GpuModel,
    instances: Sequence[Instance],
    mix: DemandMix,
    *,
    allowed: Collection[str] | None = None,
    op_cost: float = OP_COST,
    min_gain: float = MIN_GAIN,
) -> PreshapePlan | None:
    """The free layout that best serves ``mix`` on this GPU, with its operations; ``None`` when no change
    gains ``min_gain`` expected requests. ``allowed`` limits the profiles it creates (a pool's offered ones);
    existing free instances of other profiles may stay or go. Held instances never move."""
    geom = geometry(model)
    problems = geom.violations([(x.profile, x.start) for x in instances])
    if problems:
        raise ValueError(f"invalid layout on {model.name}: {'; '.join(problems)}")
    weights = profile_weights(geom, mix, allowed)
    held = {(x.profile, x.start) for x in instances if not x.free}
    current = {(x.profile, x.start) for x in instances if x.free}
    creatable = set(model.profile_names()) if allowed is None else set(allowed)
    before = expected_served(geom, [p for p, _ in current], weights)
    best: tuple[float, int, tuple[tuple[str, int], ...]] | None = None
    for layout in _layouts(geom):
        if not held <= layout:
            continue
        free = layout - held
        new = free - current
        if any(p not in creatable for p, _ in new):
            continue
        ops = len(current - free) + len(new)
        score = expected_served(geom, [p for p, _ in free], weights) - op_cost * ops
        rank = (score, -ops, tuple(sorted(free)))
        if best is None or rank[:2] > best[:2] or (rank[:2] == best[:2] and rank[2] < best[2]):
            best = rank
    if best is None:
        return None
    target = set(best[2])
    after = expected_served(geom, [p for p, _ in target], weights)
    if target == current or after - before < min_gain:
        return None
    destroys = sorted(current - target, key=lambda x: (x[1], x[0]))
    creates = sorted(target - current, key=lambda x: (x[1], x[0]))
    operations = tuple(Operation("destroy", p, s) for p, s in destroys) + tuple(
        Operation("create", p, s) for p, s in creates
    )
    kept = [x for x in instances if not x.free]
    layout_after = tuple(sorted([*kept, *(Instance(p, s) for p, s in target)], key=lambda x: (x.start, x.profile)))
    return PreshapePlan(operations, layout_after, before, after)


def profile_weights(geom: Geometry, mix: DemandMix, allowed: Collection[str] | None) -> tuple[float, ...]:
    """The mix's share of each of the model's profiles (profile order), only ``allowed`` ones when given."""
    raw = mix.weights(geom.model)
    if allowed is None:
        return raw
    kept = [w if p.name in allowed else 0.0 for p, w in zip(geom.profiles, raw, strict=True)]
    total = sum(kept)
    return tuple(w / total for w in kept) if total > 0 else raw


_LAYOUTS: dict[int, tuple[Geometry, list[frozenset[tuple[str, int]]]]] = {}


def _layouts(geom: Geometry) -> list[frozenset[tuple[str, int]]]:
    """Every valid layout of the model as ``{(profile, start)}``, computed once per geometry."""
    found = _LAYOUTS.get(id(geom))
    if found is not None and found[0] is geom:
        return found[1]
    layouts = [frozenset((p, s) for p, s, _ in geom.describe(key)) for key in geom.all_layouts()]
    _LAYOUTS[id(geom)] = (geom, layouts)
    return layouts
