"""Monte-Carlo rollouts over the learnt mix: where one more instance goes when the end of the fill is near.

``ours`` ranks each GPU layout on its own (expected stranded compute under the mix). Near the end of a
fill the GPUs compete for the same few requests, which a per-GPU rank cannot see. Here each distinct
candidate placement (GPUs deduplicated by layout, every legal slot) is tried on the fleet's multiset of
layouts, then ``SEQUENCES`` sequences of future arrivals drawn from the mix are served by ``ours`` itself
on that multiset; the candidate that serves the most compute on average wins, but replaces ``ours``'
favourite only by more than ``MARGIN`` slices (a smaller edge is as likely the sequences' as the mix's).
Every candidate sees the same sequences (common random numbers), so the comparison is not drowned by
the sequences' own spread, and a decision is deterministic.

The search only runs when it can matter (:func:`search` returns ``None`` otherwise and the engine takes
``ours``' answer):

* the fleet's free compute is within ``HORIZON`` arrivals of demand (earlier, every candidate serves the
  whole horizon and the rollouts cannot tell them apart);
* at least two candidates differ;
* allocations are not ending at more than ``CHURN`` per request lately: the rollouts simulate arrivals
  only (a fill, a burst). Rollouts that also released random allocations at the observed rate did not
  pay on the departures' tuning draws (heavy-tailed lifetimes: one pod can pin a bad choice for hours).

The mix is not taken as exact: each sequence first draws its own mix from a Dirichlet distribution
around the learnt counts plus ``PSEUDO`` requests of the default prior, so a mix known from few requests
spreads the futures the search averages over. (Rollouts over the learner's published mix as if exact did
worse than ``ours`` on a young pool in the family's tuning draws; waiting until the counts outweighed the
prior helped only pools with a past.) A fixed :class:`DemandMix` without prior is taken as exact.
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from .demand import DemandMix, default_shares
from .layout import Geometry, LayoutKey, Option

if TYPE_CHECKING:
    from .policies import FragmentationAware, Rank

#: Future arrival sequences per candidate.
SEQUENCES = 32
#: Arrivals per sequence at most; the search waits until the fleet's free compute is about this many arrivals.
HORIZON = 250
#: Candidates (best by ``ours``' rank of the option) that get rollouts.
CANDIDATES = 30
#: Offered compute in a rollout as a multiple of the fleet's free compute (the family offers 130 %).
LOAD = 1.3
#: Bound on the work of one decision (candidates x sequences x arrivals x distinct layouts): a large fleet
#: with many layouts gets fewer candidates and sequences rather than a slow decision.
WORK = 200_000
SEED = 14
#: Releases per request above which the search stays off: its rollouts know no departures.
CHURN = 0.1
#: Pseudo-requests of the default prior added to the learnt counts when drawing each sequence's mix.
PSEUDO = 6.0
#: Compute slices (mean over the sequences) a candidate must serve beyond ``ours``' favourite to replace it.
MARGIN = 0.25

RankTable = dict[LayoutKey, "tuple[Rank, Option] | None"]


def option_rank(
    policy: FragmentationAware, geom: Geometry, key: LayoutKey, o: Option, weights: tuple[float, ...]
) -> Rank:
    """``ours``' rank of one particular option (``ours`` itself only ranks the best option of a layout)."""
    change = policy.expected_stranded(geom, o.after, weights) - policy.expected_stranded(geom, key, weights)
    opens = 0.0 if geom.info(key).allocated_instances else 1.0
    left = geom.model.compute_slices - geom.info(o.after).allocated_compute
    return round(change + policy.open_cost * opens + policy.TIGHTNESS * left, 9), opens, 0.0 if o.reuse else 1.0


def search(
    policy: FragmentationAware,
    geom: Geometry,
    i: int,
    mix: DemandMix,
    counts: Mapping[LayoutKey, int],
    ranks: Callable[[int], RankTable],
    order: Callable[[LayoutKey], int],
    churn: float = 0.0,
) -> tuple[LayoutKey, Option] | None:
    """The layout (any GPU with it) and the option for one more instance of profile ``i``, or ``None`` when
    the search does not apply (then ``ours``' own choice stands).

    ``counts``: GPUs per layout; ``ranks(q)``: the engine's cache of ``policy``'s ranks for profile ``q``;
    ``order(key)``: the device order of the first GPU with that layout (the tie-break after the rank);
    ``churn``: allocations released per request lately.
    """
    if churn > CHURN:
        return None
    weights = mix.weights(geom.model)
    mean_compute = sum(w * c for w, c in zip(weights, geom.compute, strict=True))
    free = sum(n * (geom.model.compute_slices - geom.info(k).allocated_compute) for k, n in counts.items())
    arrivals = math.ceil(LOAD * free / mean_compute) if mean_compute else 0
    if not 0 < arrivals <= HORIZON:
        return None
    options = [(key, o) for key in counts for o in geom.options(key, i)]
    candidates = sorted(
        ((option_rank(policy, geom, key, o, weights), order(key), key, o) for key, o in options),
        key=lambda c: (c[0], c[1]),
    )
    per_candidate = arrivals * len(counts)
    n_cand = max(2, min(CANDIDATES, WORK // (SEQUENCES * per_candidate)))
    candidates = candidates[:n_cand]
    if len(candidates) < 2:
        return None
    sequences = max(4, min(SEQUENCES, WORK // (n_cand * per_candidate)))
    futures = _futures(geom, mix, arrivals, sequences)
    served = []
    for _, _, key, o in candidates:
        total = 0
        for seq in futures:
            state = dict(counts)
            _move(state, key, o.after)
            total += _serve(policy, geom, state, seq, weights, ranks)
        served.append(total / len(futures))
    # Candidates are in rank order: ``ours``' favourite is first and keeps the decision unless another
    # serves MARGIN compute slices more on average (a smaller edge is as likely the sample's as the mix's).
    k = max(range(len(served)), key=lambda n: (served[n] - (0.0 if n == 0 else MARGIN), -n))
    return candidates[k][2], candidates[k][3]


def _futures(geom: Geometry, mix: DemandMix, arrivals: int, sequences: int) -> list[list[int]]:
    """Arrival sequences (profile indexes), each from its own mix drawn around the learnt one."""
    rng = random.Random(SEED)  # noqa: S311 - a simulation, and a fixed seed keeps decisions reproducible
    profiles = range(len(geom.profiles))
    if mix.prior_weight <= 0:  # a fixed mix (DemandMix.from_shares): taken as exact
        return [rng.choices(profiles, mix.weights(geom.model), k=arrivals) for _ in range(sequences)]
    prior = default_shares(geom.model)
    alpha = [mix.counts.get(p.name, 0.0) + PSEUDO * prior[p.name] for p in geom.model.profiles]
    out = []
    for _ in range(sequences):
        draw = [rng.gammavariate(a, 1.0) if a > 0 else 0.0 for a in alpha]
        out.append(rng.choices(profiles, draw if sum(draw) > 0 else alpha, k=arrivals))
    return out


def _move(state: dict[LayoutKey, int], old: LayoutKey, new: LayoutKey) -> None:
    state[old] -= 1
    if not state[old]:
        del state[old]
    state[new] = state.get(new, 0) + 1


def _serve(
    policy: FragmentationAware,
    geom: Geometry,
    state: dict[LayoutKey, int],
    seq: list[int],
    weights: tuple[float, ...],
    ranks: Callable[[int], RankTable],
) -> int:
    """Compute slices ``policy`` serves from ``seq`` on the multiset ``state`` (changed in place)."""
    served = 0
    compute = geom.compute
    # Each profile's table is fetched once per sequence, not per arrival (session 13: the fetch was a tenth of a veto).
    tables: list[RankTable | None] = [None] * len(compute)
    # Profiles that fit some layout of ``state``; once one fits none it never will again in this sequence (layouts
    # only gain instances here, and an instance never makes room), so its later arrivals skip the scan.
    fits = [True] * len(compute)
    for q in seq:
        if not fits[q]:
            continue
        table = tables[q]
        if table is None:
            table = tables[q] = ranks(q)
        best_rank: Rank | None = None
        best: Option | None = None
        best_key: LayoutKey = ()
        for key in state:
            try:
                r = table[key]
            except KeyError:
                r = table[key] = policy.rank(geom, key, q, weights)
            if r is not None and (best_rank is None or r[0] < best_rank):
                best_rank, best, best_key = r[0], r[1], key
        if best is None:
            fits[q] = False
        else:
            served += compute[q]
            left = state[best_key] - 1
            if left:
                state[best_key] = left
            else:
                del state[best_key]
            after = best.after
            state[after] = state.get(after, 0) + 1
    return served


#: Rank tables of :func:`hold_gain`'s rollouts, per (geometry, weights, opening cost, profile); a few recent ones.
_HOLD_RANKS: OrderedDict[tuple[int, tuple[float, ...], float, int], RankTable] = OrderedDict()


def hold_gain(
    policy: FragmentationAware,
    geom: Geometry,
    key: LayoutKey,
    option: Option,
    i: int,
    mix: DemandMix,
    counts: Mapping[LayoutKey, int],
    withheld: float = 0.0,
) -> float | None:
    """Compute slices a pool is expected to serve more if it holds one instance of profile ``i`` (``option`` on a
    GPU with layout ``key``) than if it places it; negative when placing pays. The same future arrivals (drawn as in
    :func:`search`, around ``mix``: a learner's counts plus ``PSEUDO`` of the prior, or a fixed mix as exact) are
    served by ``policy`` ranking under ``mix`` (``ours``, not a holding policy: the rollouts hold nothing), on the
    fleet's layouts (``counts``: GPUs per layout) after the placement and without it. The fill ends after
    ``LOAD`` x the free compute is offered: a hold that the per-GPU value of ``ours`` favours can still lose when
    the requests that would use the kept room are too few for all the GPUs that keep it. ``None`` when that is
    more than ``HORIZON`` arrivals (a large pool: long rollouts, and the per-GPU value tells as much there).
    ``withheld``: compute slices this fill has held already (scaled to ``counts``' GPUs): the futures then offer no more
    than a fill of ``LOAD`` x the fleet's compute still has to, after what it placed and held (a held request was part
    of the fill's offer, and the room it left free is not more to come); whether the rollouts run at all is decided
    without it, as without holds."""
    weights = tuple(round(w, 2) for w in mix.weights(geom.model))
    mean_compute = sum(w * c for w, c in zip(weights, geom.compute, strict=True))
    free = sum(n * (geom.model.compute_slices - geom.info(k).allocated_compute) for k, n in counts.items())
    arrivals = math.ceil(LOAD * free / mean_compute) if mean_compute else 0
    if not 0 < arrivals <= HORIZON:
        return None
    allocated = sum(counts.values()) * geom.model.compute_slices - free
    arrivals = math.ceil(min(LOAD * free, LOAD * (allocated + free) - allocated - withheld) / mean_compute)
    if arrivals <= 0:  # the fill has held all it still offers: placing serves the request, holding nothing
        return -float(geom.compute[i])

    def ranks(q: int) -> RankTable:
        table_key = (id(geom), weights, policy.open_cost, q)
        table = _HOLD_RANKS.get(table_key)
        if table is None:
            table = _HOLD_RANKS[table_key] = {}
            while len(_HOLD_RANKS) > 64:
                _HOLD_RANKS.popitem(last=False)
        return table

    sequences = max(4, min(SEQUENCES, WORK // (2 * arrivals * len(counts))))
    gain = 0
    for seq in _futures(geom, mix, arrivals, sequences):
        held = dict(counts)
        placed = dict(counts)
        _move(placed, key, option.after)
        gain += _serve(policy, geom, held, seq, weights, ranks)
        gain -= geom.compute[i] + _serve(policy, geom, placed, seq, weights, ranks)
    return gain / sequences


def sample_fleet(counts: Mapping[LayoutKey, int], key: LayoutKey, size: int) -> dict[LayoutKey, int]:
    """A fleet of ``size`` GPUs in the proportions of ``counts`` (GPUs per layout): one GPU with layout ``key`` (the one
    a decision is about) plus the other GPUs apportioned by largest remainder (ties by layout, so the sample is
    deterministic). The rollouts of :func:`hold_gain` on a large pool run on it: a hold's effect is local to its GPU,
    and what the fill's end offers its partners scales with the fleet, so a miniature in the same proportions tells
    the same story at the cost of a pool of ``size`` GPUs. ``counts`` itself when it is no larger."""
    total = sum(counts.values())
    if total <= size:
        return dict(counts)
    others = dict(counts)
    others[key] -= 1
    rest = total - 1
    quota = {k: n * (size - 1) / rest for k, n in others.items() if n}
    out = {k: int(q) for k, q in quota.items()}
    left = size - 1 - sum(out.values())
    for k in sorted(quota, key=lambda k: (out[k] - quota[k], k))[:left]:
        out[k] += 1
    out[key] = out.get(key, 0) + 1
    return {k: n for k, n in out.items() if n}
