"""Placement policies: how to rank the GPUs that can host one more instance of a profile.

A policy looks at one GPU layout at a time and returns ``(rank, option)``: the best way to host the
instance on a GPU with that layout, and a rank (a tuple; lower is better) to compare GPUs. The engine
takes the lowest rank and breaks ties by device order, so ranks only depend on the layout: the engine
can cache them per layout and the cost of a decision does not grow with the number of GPUs.

* ``first-fit``: rank is constant, so the first GPU in device order wins; on it, a free instance of
  the profile if there is one, else the lowest legal slot. This is what the scheduler and NVIDIA's
  DynamicMIG do today.
* ``best-fit``: the GPU left with the least free capacity (compute slices, then memory slots); on it,
  the placement in the tightest hole.
* ``ours`` (:class:`FragmentationAware`): the placement that increases *fragmentation* the least.
  Fragmentation of a layout for a profile q is the free compute that q could not use even if only q
  were requested from now on; weighting by the demand mix gives the expected stranded capacity (the
  MIG analogue of FGD, Weng et al., USENIX ATC '23). Consequences: a whole GPU stays whole while
  whole-GPU requests are in the mix (breaking it strands the rest for them), instances go where
  their neighbours can still be used by the profiles people ask for, and GPUs already in use are
  preferred on ties.
"""

from __future__ import annotations

from typing import Protocol

from .layout import Geometry, LayoutKey, Option

Rank = tuple[float, ...]


class Policy(Protocol):
    name: str
    uses_demand: bool

    def rank(self, geom: Geometry, key: LayoutKey, i: int, weights: tuple[float, ...]) -> tuple[Rank, Option] | None:
        """Best option for one more instance of profile ``i`` on a GPU with layout ``key``, and its rank;
        ``None`` when it does not fit."""
        ...


class FirstFit:
    name = "first-fit"
    uses_demand = False

    def rank(self, geom: Geometry, key: LayoutKey, i: int, weights: tuple[float, ...]) -> tuple[Rank, Option] | None:
        options = geom.options(key, i)
        return ((0.0,), options[0]) if options else None


class BestFit:
    name = "best-fit"
    uses_demand = False

    def rank(self, geom: Geometry, key: LayoutKey, i: int, weights: tuple[float, ...]) -> tuple[Rank, Option] | None:
        options = geom.options(key, i)
        if not options:
            return None
        info = geom.info(key)
        best = options[0]
        if not best.reuse:
            best = min(options, key=lambda o: (_hole(info.occupied, o.start, geom.width), o.start))
        after = geom.info(best.after)
        free_compute = geom.model.compute_slices - after.allocated_compute
        free_slots = geom.width - after.occupied.bit_count()
        return (float(free_compute), float(free_slots)), best


def _hole(occupied: int, start: int, width: int) -> int:
    """Length of the run of free memory slots that contains ``start``."""
    lo = start
    while lo > 0 and not occupied >> (lo - 1) & 1:
        lo -= 1
    hi = start
    while hi < width and not occupied >> hi & 1:
        hi += 1
    return hi - lo


def fragmentation(geom: Geometry, key: LayoutKey, weights: tuple[float, ...]) -> float:
    """Expected compute slices stranded on this GPU for a request drawn from the demand mix.

    For each profile q: free compute minus what instances of q alone could still use. Free instances
    count as free compute (they hold no allocation), and as usable by their own profile only.
    """
    info = geom.info(key)
    free = geom.model.compute_slices - info.allocated_compute
    fit = geom.fit(key)
    total = 0.0
    for q, w in enumerate(weights):
        if w:
            total += w * (free - geom.compute[q] * fit[q])
    return total


def stranded(geom: Geometry, key: LayoutKey, allowed: frozenset[int]) -> int:
    """Compute slices of this GPU that no completion with ``allowed`` profiles can ever use."""
    info = geom.info(key)
    return geom.model.compute_slices - info.allocated_compute - completion(geom, key, allowed)


_COMPLETION: dict[tuple[int, frozenset[int], LayoutKey], int] = {}


def completion(geom: Geometry, key: LayoutKey, allowed: frozenset[int]) -> int:
    """Most compute slices that instances of ``allowed`` profiles can add to this layout (free
    instances count as reusable by their own profile)."""
    ck = (id(geom), allowed, key)
    found = _COMPLETION.get(ck)
    if found is not None:
        return found
    best = 0
    for q in allowed:
        for o in geom.options(key, q):
            best = max(best, geom.compute[q] + completion(geom, o.after, allowed))
    _COMPLETION[ck] = best
    return best


_CHAIN: dict[tuple[int, tuple[float, ...], float], dict[LayoutKey, float]] = {}


def expected_fill(geom: Geometry, key: LayoutKey, weights: tuple[float, ...], beta: float) -> float:
    """Expected compute slices this GPU still takes if requests keep arriving from the mix: a request
    that fits is placed where it leaves the most expected fill; one that does not ends the process with
    probability ``1 - beta``."""
    memo = _CHAIN.setdefault((id(geom), weights, beta), {})
    return _fill(geom, key, weights, beta, memo)


def _fill(geom: Geometry, key: LayoutKey, weights: tuple[float, ...], beta: float, memo: dict[LayoutKey, float]) -> float:
    found = memo.get(key)
    if found is not None:
        return found
    gain = 0.0
    miss = 0.0
    for q, w in enumerate(weights):
        if not w:
            continue
        options = geom.options(key, q)
        if not options:
            miss += w
            continue
        gain += w * (geom.compute[q] + max(_fill(geom, o.after, weights, beta, memo) for o in options))
    value = gain / (1.0 - beta * miss) if miss < 1.0 else 0.0
    memo[key] = value
    return value


class FragmentationAware:
    """``ours``: least increase of demand-weighted fragmentation (see the module docstring)."""

    name = "ours"
    uses_demand = True
    threshold = 0.02
    mode = "lex"
    lam = 1.0
    beta = 0.0

    def rank(self, geom: Geometry, key: LayoutKey, i: int, weights: tuple[float, ...]) -> tuple[Rank, Option] | None:
        options = geom.options(key, i)
        if not options:
            return None
        if self.mode == "chain":
            c = geom.model.compute_slices
            e0 = c - geom.info(key).allocated_compute - expected_fill(geom, key, weights, self.beta)
            best2: tuple[float, float, int, Option] | None = None
            f0 = fragmentation(geom, key, weights)
            for o in options:
                e1 = c - geom.info(o.after).allocated_compute - expected_fill(geom, o.after, weights, self.beta)
                d = round(e1 - e0, 9)
                df = round(fragmentation(geom, o.after, weights) - f0, 9)
                cand2 = (d, df, 0 if o.reuse else 1, o)
                if best2 is None or cand2[:3] < best2[:3]:
                    best2 = cand2
            if best2 is None:
                return None
            in_use2 = 0.0 if geom.info(key).allocated_instances else 1.0
            return (best2[0], best2[1], in_use2), best2[3]
        allowed = frozenset(q for q, w in enumerate(weights) if w >= self.threshold)
        before = fragmentation(geom, key, weights)
        lost = stranded(geom, key, allowed)
        best: tuple[float, float, int, Option] | None = None
        for o in options:
            # Rounded so float noise cannot beat device order on equal layouts.
            delta = round(fragmentation(geom, o.after, weights) - before, 9)
            dl = float(stranded(geom, o.after, allowed) - lost) if self.mode != "fgd" else 0.0
            if self.mode == "sum":
                dl, delta = 0.0, round(delta + self.lam * dl, 9)
            cand = (dl, delta, 0 if o.reuse else 1, o)
            if best is None or cand[:3] < best[:3]:
                best = cand
        if best is None:
            return None
        in_use = 0.0 if geom.info(key).allocated_instances else 1.0
        return (best[0], best[1], in_use), best[3]


POLICIES: dict[str, Policy] = {p.name: p for p in (FirstFit(), BestFit(), FragmentationAware())}


def get_policy(policy: str | Policy) -> Policy:
    if not isinstance(policy, str):
        return policy
    try:
        return POLICIES[policy]
    except KeyError:
        raise ValueError(f"unknown placement policy {policy!r}; known: {', '.join(POLICIES)}") from None
