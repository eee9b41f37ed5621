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
* ``ours`` (:class:`FragmentationAware`): the placement that strands the least compute in expectation
  under the learnt demand mix, with a small cost for opening an unused GPU on small pools. In the
  spirit of FGD (Weng et al., USENIX ATC '23), adapted to MIG's placement grid.
  Consequences: a whole GPU stays whole while whole-GPU requests are in the mix (breaking it leaves
  a hole that small requests rarely fill), 3g goes to slot 4 and 1g.2x to slot 6 where that keeps the
  rest usable, instances go next to neighbours the mix can complete, and GPUs already in use are
  preferred on ties.
* ``hami`` (:class:`.hami.HamiContiguity`): HAMi's 2026 scoring (largest contiguous free run), the
  benchmark's peer.
* ``ours-hold`` (:class:`HoldingFragmentationAware`): ``ours`` with admission. A request is held (the
  engine answers ``None``) when every placement would strand compute in expectation under the published
  mix, and the request counts of now, with little prior, confirm it for ``ours``' favourite placement by a
  margin that is wider on small pools; in a fill, within a budget of held compute and unless rollouts over
  the fleet veto it; never when the request is forced (it waited long enough). Where allocations end, held
  requests come back, and a hold is priced by how the pool's recent holds of the profile ended
  (:meth:`HoldingFragmentationAware.priced`). Its fill-left rule (:mod:`.fill_left`, ``FILL_LEFT``: the trusted 7g
  share since session 14) also refuses, in a fill, a placement that opens an empty GPU the 7g still to come need.
  Opt-in: the default engine policy serves whatever fits.
* ``ours-rollout`` (:class:`RolloutFragmentationAware`): ``ours`` plus a small search near the end of a
  fill (Monte-Carlo rollouts over the learnt mix, :mod:`.rollout`); never holds what fits.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from . import fill_left, rollout
from .demand import DemandMix
from .fill_left import FillContext, FillLeftRule, KeptEmpty
from .hami import HamiContiguity
from .layout import Geometry, LayoutKey, Option
from .scheduler import driver_order

Rank = tuple[float, ...]


class Policy(Protocol):
    name: str
    uses_demand: bool
    #: True for a policy that may hold a request that fits: its ranks start with 1.0 for a flagged placement,
    #: and the engine answers ``None`` to an unforced request whose best rank is flagged, unless the policy
    #: has a ``holds(HoldContext) -> bool`` hook that declines to confirm it.
    admission: bool

    def rank(self, geom: Geometry, key: LayoutKey, i: int, weights: tuple[float, ...]) -> tuple[Rank, Option] | None:
        """Best option for one more instance of profile ``i`` on a GPU with layout ``key``, and its rank;
        ``None`` when it does not fit."""
        ...


@dataclass(frozen=True, slots=True)
class HoldContext:
    """What a policy with admission weighs before it holds a placement: ``option`` (one instance of profile
    ``i``) on a GPU with layout ``key``; the demand snapshot the ranks used (``mix``) and the request counts
    now (``counts``: a learner's snapshot lags them; a fixed mix's are its own); releases per request lately
    (``churn``); how many more instances of the profile fit in the pool now (``room``); and the pool's GPUs
    of that model (``gpus``); how the pool's earlier holds of the profile ended lately (``held_ended``, of which
    ``held_lost`` no longer fit when retried or forced and ``held_forced`` were placed at their deadline; decayed
    counts, all 0 until a held request comes back, i.e. where no allocation ends)."""

    geom: Geometry
    key: LayoutKey
    option: Option
    i: int
    mix: DemandMix
    counts: Mapping[str, float]
    churn: float
    room: int
    gpus: int
    held_ended: float = 0.0
    held_lost: float = 0.0
    held_forced: float = 0.0
    #: GPUs per layout of the pool's model (``{}`` from a caller that knows only the one GPU: then the hold is
    #: weighed on that GPU alone).
    layouts: Mapping[LayoutKey, int] = field(default_factory=dict)
    #: Compute slices of the requests the engine held since it last saw a release.
    held: float = 0.0


class FirstFit:
    name = "first-fit"
    uses_demand = False
    admission = False

    def rank(self, geom: Geometry, key: LayoutKey, i: int, weights: tuple[float, ...]) -> tuple[Rank, Option] | None:
        options = geom.options(key, i)
        return ((0.0,), options[0]) if options else None


class BestFit:
    name = "best-fit"
    uses_demand = False
    admission = False

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
    """FGD-style fragmentation: expected compute slices of this GPU that the next request, drawn from
    the demand mix, could not use. For each profile q it is the free compute minus what instances of q
    alone could still take. Free instances count as free compute, usable by their own profile only.
    The benchmark reports it; the policy uses the sharper measures below."""
    info = geom.info(key)
    free = geom.model.compute_slices - info.allocated_compute
    fit = geom.fit(key)
    return sum(w * (free - geom.compute[q] * fit[q]) for q, w in enumerate(weights) if w)


class _Memo:
    """A few recent per-(geometry, parameter) memo tables; older ones are dropped so that a long-lived
    engine whose demand mix keeps moving does not grow without bound."""

    def __init__(self, keep: int = 8) -> None:
        self._tables: OrderedDict[Hashable, dict[LayoutKey, float]] = OrderedDict()
        self._keep = keep

    def table(self, key: Hashable) -> dict[LayoutKey, float]:
        found = self._tables.get(key)
        if found is None:
            found = self._tables[key] = {}
            while len(self._tables) > self._keep:
                self._tables.popitem(last=False)
        else:
            self._tables.move_to_end(key)
        return found


_COMPLETION = _Memo()
_FILL = _Memo()
_CONFIRMED = _Memo(4)  # ours-hold's confirmations: kept apart so that they do not evict the ranks' tables


def completion(geom: Geometry, key: LayoutKey, allowed: frozenset[int]) -> int:
    """Most compute slices that instances of the ``allowed`` profiles can still add to this layout."""
    return int(_completion(geom, key, allowed, _COMPLETION.table((id(geom), allowed))))


def _completion(geom: Geometry, key: LayoutKey, allowed: frozenset[int], memo: dict[LayoutKey, float]) -> float:
    found = memo.get(key)
    if found is not None:
        return found
    best = 0.0
    for q in allowed:
        for o in geom.options(key, q):
            best = max(best, geom.compute[q] + _completion(geom, o.after, allowed, memo))
    memo[key] = best
    return best


def stranded(geom: Geometry, key: LayoutKey, allowed: frozenset[int]) -> int:
    """Compute slices of this GPU that no completion with the ``allowed`` profiles can ever use
    (e.g. 3g.40gb at slot 0 strands one slice on an 8-slot GPU: slot 7 only fits 1g.2x, 3g or 7g)."""
    free = geom.model.compute_slices - geom.info(key).allocated_compute
    return free - completion(geom, key, allowed)


def expected_fill(geom: Geometry, key: LayoutKey, weights: tuple[float, ...], persistence: float) -> float:
    """Expected compute slices this GPU still takes while requests keep arriving from the mix.

    Each arrival is drawn from the mix; one that fits is placed where it leaves the most expected fill;
    one that does not fit ends the process with probability ``1 - persistence`` (other GPUs take it,
    or the pool fills up). ``persistence`` near 1 trusts that rare profiles will eventually come;
    near 0 only the next request counts.
    """
    return _fill(geom, key, weights, persistence, _FILL.table((id(geom), weights, persistence)))


def _fill(
    geom: Geometry,
    key: LayoutKey,
    weights: tuple[float, ...],
    persistence: float,
    memo: dict[LayoutKey, float],
) -> float:
    found = memo.get(key)
    if found is not None:
        return found
    gain = miss = 0.0
    compute = geom.compute
    for q, w in enumerate(weights):
        if not w:
            continue
        options = geom.options(key, q)
        if options:
            # The largest fill after an option (a loop, not max() over a generator: the same value, faster).
            best = -1.0
            for o in options:
                value = memo.get(o.after)
                if value is None:
                    value = _fill(geom, o.after, weights, persistence, memo)
                if value > best:
                    best = value
            gain += w * (compute[q] + best)
        else:
            miss += w
    # v = gain + persistence * miss * v, solved for v.
    value = gain / (1.0 - persistence * miss)
    memo[key] = value
    return value


class FragmentationAware:
    """``ours``: keep capacity for the profiles tenants request.

    Rank of a placement (lower is better): the change of the GPU's *expected stranded compute* (free
    compute minus :func:`expected_fill` under the demand mix), plus ``open_cost`` when the GPU holds no
    allocation yet, plus ``TIGHTNESS`` per compute slice the GPU has left free after it (a best-fit pull);
    then GPUs already in use first; then device order (the engine's tie-break). On one GPU the option
    with the lowest change wins, reusing a free instance on ties.

    Chosen on the random-mix family of ``bench/placement.py --family`` (docs/placement.md, "Choosing the
    rank"): the former first criterion, compute stranded *for good* under the mix's profiles, made the
    policy serve less than first-fit on about one mix in six at 8 GPUs (it refuses placements the
    expected fill already prices, on the learnt mix of a young pool that is mostly prior) and is gone.
    ``open_cost`` matters on small pools, where each newly opened GPU is a large share of the capacity:
    :meth:`sized_for` sets it to ``OPEN_COST_GPUS / GPUs`` (0.2 at 8 GPUs, 0.025 at 64). The best-fit
    pull matters when allocations end: the fill model behind the expected value ignores departures, and
    packing GPUs tightly lets whole GPUs empty out; on the tuning draws with heavy-tailed lifetimes it
    moved ``ours`` from 0.7 points below best-fit to 1.1 above, at a cost on fill-until-full at 64 GPUs.
    """

    name = "ours"
    uses_demand = True
    admission = False
    #: The opening cost times the pool's GPUs; tuned on the family's tuning seeds.
    OPEN_COST_GPUS = 1.6
    #: Rank cost per compute slice left free on the GPU; tuned on the departures' tuning seeds.
    TIGHTNESS = 0.1

    def __init__(self, persistence: float = 0.9, open_cost: float = 0.0) -> None:
        self.persistence = persistence
        self.open_cost = open_cost

    def sized_for(self, gpus: int) -> FragmentationAware:
        """This policy for a fleet of ``gpus`` GPUs (the engine calls it once, with its GPU count)."""
        sized = copy.copy(self)
        sized.open_cost = self.OPEN_COST_GPUS / gpus if gpus else 0.0
        return sized

    def rank(self, geom: Geometry, key: LayoutKey, i: int, weights: tuple[float, ...]) -> tuple[Rank, Option] | None:
        options = self.options(geom, key, i)
        if not options:
            return None
        expected_before = self._expected_stranded(geom, key, weights)
        best: tuple[float, int] | None = None
        chosen = options[0]
        for o in options:
            # Rounded so float noise cannot beat device order between equivalent layouts.
            expected = round(self._expected_stranded(geom, o.after, weights) - expected_before, 9)
            cand = (expected, 0 if o.reuse else 1)
            if best is None or cand < best:
                best, chosen = cand, o
        if best is None:
            return None
        opens = 0.0 if geom.info(key).allocated_instances else 1.0
        left = geom.model.compute_slices - geom.info(chosen.after).allocated_compute
        return (round(best[0] + self.open_cost * opens + self.TIGHTNESS * left, 9), opens), chosen

    def options(self, geom: Geometry, key: LayoutKey, i: int) -> tuple[Option, ...]:
        """The ways to host the instance this policy chooses among: all of them."""
        return geom.options(key, i)

    def expected_stranded(self, geom: Geometry, key: LayoutKey, weights: tuple[float, ...]) -> float:
        """Free compute of the layout minus its :func:`expected_fill` under the mix."""
        free = geom.model.compute_slices - geom.info(key).allocated_compute
        return free - expected_fill(geom, key, weights, self.persistence)

    _expected_stranded = expected_stranded


class FragmentationAwareFirstSlot(FragmentationAware):
    """``ours-first-slot``: ``ours`` choosing the GPU only; on it, the slot is the first free legal start in
    the order the driver publishes the devices (:func:`.scheduler.driver_order`).

    For Kubernetes, where a claim pins profile and GPU but the scheduler picks the slot (the first device
    whose counters fit, see :mod:`.scheduler`): the GPU is ranked by what that slot does to it."""

    name = "ours-first-slot"

    def options(self, geom: Geometry, key: LayoutKey, i: int) -> tuple[Option, ...]:
        created = [o for o in geom.options(key, i) if not o.reuse]
        return (min(created, key=lambda o: driver_order(o.start)),) if created else ()


class HoldingFragmentationAware(FragmentationAware):
    """``ours-hold``: ``ours`` that holds a request when placing it would strand compute that the mix is
    expected to use, on every GPU; a forced request (it waited its bound) is placed as ``ours`` would.

    The offline optimum of the random-mix family serves more than any policy that must take what fits:
    it refuses e.g. a 4g whose GPU the mix rarely completes, to serve a 7g later (docs/placement.md,
    "Admission"). Holding such a request is what closes that part of the gap.

    Two tests, both on the change of expected stranded compute that ``ours`` ranks by:

    * the rank flags a placement that strands more than ``HOLD`` under the published mix: ``(flag, *ours'
      rank)``, so a GPU that is not flagged always wins over one that is, and the engine asks :meth:`holds`
      only when every placement is flagged;
    * :meth:`holds` confirms it for that placement with the request counts of now plus only
      ``CONFIRM_PRIOR`` pseudo-requests of the default prior (a learner publishes its mix late and with 20
      of them: a young pool's published mix is mostly prior, and held the one profile a pool asked for, e.g.
      the fourth 1g.20gb of a GPU when 1g.20gb was most of the mix), by more than ``CONFIRM +
      CONFIRM_GPUS / GPUs``: on a small pool a wrong hold is a larger share of what it serves, and fewer
      requests have taught the mix.

    Until the pool sees a release (a fill: the per-GPU value assumes requests keep coming to use the room a hold
    keeps, and a fill ends), two more terms (session 11): the compute held since stays within ``HOLD_BUDGET`` of
    the pool's (a warm learner that trusts its mix held a 3g for every 7g to come, and fewer came), and on pools
    whose counts hold ``VETO_SEEN`` requests, rollouts of that mix over the fleet's layouts
    (:func:`.rollout.hold_gain`; above ``VETO_GPUS`` GPUs over a sample of ``VETO_SAMPLE``, session 12) veto a hold
    that serves less than placing (a 4g held to keep a GPU whole where the 3g that come would complete it). Also
    until a release, :meth:`unflags` lets the engine take ``ours``' favourite when the flag alone put another GPU
    first and the counts of now would not flag it: a
    young pool's published mix is mostly prior, under which pairing two 3g strands a slice, so the flag opened
    a GPU per 3g in a pool that asked for nothing else.

    Where allocations end, a held request comes back (retried after departures, forced at its deadline) and the
    engine tells how it ended (:meth:`.engine.PlacementEngine.hold_ended`): the confirmed change is then priced by
    those outcomes (:meth:`priced`). With nothing ended (no departures, e.g. fill-until-full) the price is the
    change itself, so that rule is unchanged.

    Fill left (:meth:`keeps_empty`, ``FILL_LEFT``; session 13's bench rule, in the engine since session 14): the
    flag never sees a request whose placement opens an empty GPU that a 7g would take whole later, though that is
    most of what the optimum refuses; the engine asks this hook for such placements (:mod:`.fill_left`).

    Chosen on the tuning draws only (docs/placement.md, "Admission"; ``bench/placement_hold_rules.py``, and
    ``bench/placement_hold_outcomes.py`` for the price).
    """

    name = "ours-hold"
    admission = True
    #: Expected stranded compute slices (published mix) above which the rank flags a placement.
    HOLD = 0.1
    #: Pseudo-requests of the default prior added to the request counts for the confirmation.
    CONFIRM_PRIOR = 10.0
    #: Expected stranded compute slices (counts of now) above which a flagged placement is held: this plus
    #: ``CONFIRM_GPUS`` divided by the pool's GPUs of the model.
    CONFIRM = 0.2
    CONFIRM_GPUS = 0.8
    #: Pseudo-outcomes (placed) that the price of a hold starts from (:meth:`priced`): one lost hold alone prices
    #: the next at half the request's compute. Chosen on the departures' tuning draws (1 against 4).
    OUTCOME_PRIOR = 1.0
    #: Until the pool sees a release, the compute held since (this request's included, the first hold excepted) stays
    #: within this share of the pool's compute.
    HOLD_BUDGET = 0.4
    #: Requests the counts of now must hold before the rollouts (:func:`.rollout.hold_gain`) may veto a hold.
    VETO_SEEN = 100.0
    #: Compute slices a hold must gain in the rollouts (mean over the futures) not to be vetoed.
    VETO_MARGIN = 0.0
    #: Pools of more GPUs of the model get the veto on a sample (``VETO_SAMPLE``): near the end of their fill rollouts
    #: over the whole pool walk hundreds of distinct layouts (at 512 GPUs they doubled the mean decision time and
    #: tripled its p99).
    VETO_GPUS = 64
    #: GPUs (in the pool's proportions) the veto's rollouts run on above ``VETO_GPUS``; 0: no veto there (session 11).
    VETO_SAMPLE = 64
    #: Fill left (:mod:`.fill_left`, session 13's bench rule): until the pool sees a release, refuse a request that
    #: would open an empty GPU while the 7g the rest of the fill brings reach the empty GPUs left; ``"raw"``: the 7g
    #: share from the counts of now, ``"trusted"``: blended with the prior; ``"off"``: never. ``"trusted"`` adopted in
    #: session 14 on a fresh hold-out family (docs/placement.md, "Session 14").
    FILL_LEFT: FillLeftRule = "trusted"

    def rank(self, geom: Geometry, key: LayoutKey, i: int, weights: tuple[float, ...]) -> tuple[Rank, Option] | None:
        found = super().rank(geom, key, i, weights)
        if found is None:
            return None
        rank, chosen = found
        change = self._expected_stranded(geom, chosen.after, weights) - self._expected_stranded(geom, key, weights)
        # Rounded as in ``ours``: float noise must not flip a placement between flagged and not.
        return (1.0 if round(change, 9) > self.HOLD else 0.0, *rank), chosen

    def holds(self, ctx: HoldContext) -> bool:
        """Whether to hold ``ctx.option``, which the rank flagged: confirmed with the counts of now; then, until the
        pool has seen a release (a fill), only within the budget and unless the rollouts veto it."""
        if not self.strands(ctx):
            return False
        if ctx.churn > 0:  # allocations end: the budget and the rollouts model a fill, which this is not
            return True
        geom = ctx.geom
        budget = self.HOLD_BUDGET * geom.model.compute_slices * ctx.gpus
        if ctx.held and ctx.held + geom.compute[ctx.i] > budget:  # the first hold is free: a 1-GPU pool may hold a 4g
            return False
        fixed = ctx.mix.prior_weight <= 0
        fleet = self.veto_fleet(ctx)
        if fleet is None or (not fixed and sum(ctx.counts.values()) < self.VETO_SEEN):
            return True
        mix = ctx.mix if fixed else DemandMix(ctx.counts, ctx.mix.prior_weight)
        ours = FragmentationAware(self.persistence, self.open_cost)
        gain = rollout.hold_gain(ours, geom, ctx.key, ctx.option, ctx.i, mix, fleet, self.veto_held(ctx, fleet))
        return gain is None or gain > self.VETO_MARGIN

    def veto_fleet(self, ctx: HoldContext) -> dict[LayoutKey, int] | None:
        """The GPUs per layout the veto's rollouts run on: the pool's own, up to ``VETO_GPUS`` GPUs; above, a sample of
        ``VETO_SAMPLE`` GPUs in the pool's proportions (:func:`.rollout.sample_fleet`: rollouts over the whole pool
        walk hundreds of layouts, and start only near the end of its fill), or none (no veto) when that is 0; none
        without layouts. Session 12: at 512 GPUs without a veto, a mix of 3g and 7g held a 3g for every GPU kept whole
        until the budget (0.4 of the pool's compute) ran out, more than the fill's excess, and served less than
        first-fit."""
        if not ctx.layouts:
            return None
        if ctx.gpus <= self.VETO_GPUS:
            return dict(ctx.layouts)
        return rollout.sample_fleet(ctx.layouts, ctx.key, self.VETO_SAMPLE) if self.VETO_SAMPLE else None

    def veto_held(self, ctx: HoldContext, fleet: Mapping[LayoutKey, int]) -> float:
        """Compute slices the veto's rollouts take from what the fill still offers, for the requests it held already:
        on a sampled fleet, the pool's held compute in the sample's proportion (a held request was part of the fill's
        offer, and the room it left free makes the free compute overstate what is still to come; without this the
        rollouts valued each further 3g held for a 7g at +0.3 slices to the end). On the pool's own GPUs (up to
        ``VETO_GPUS``) none, as tuned in session 11."""
        return ctx.held * sum(fleet.values()) / ctx.gpus if ctx.gpus > self.VETO_GPUS else 0.0

    def strands(self, ctx: HoldContext) -> bool:
        """Whether ``ctx.option`` strands more than ``CONFIRM + CONFIRM_GPUS / GPUs`` with the counts of now, priced
        by how the pool's recent holds of the profile ended (:meth:`priced`)."""
        return round(self.priced(ctx, self.stranded_now(ctx)), 9) > self.CONFIRM + self.CONFIRM_GPUS / max(1, ctx.gpus)

    def priced(self, ctx: HoldContext, change: float) -> float:
        """What holding is worth (compute slices) once held requests come back, i.e. where allocations end: the
        expected stranding ``change`` it avoids, less the request's compute times the chance that it is lost (no
        longer fits when retried or forced): a certain loss, against room whose use is only expected. The chance
        is the share of the pool's recent holds of the profile that were lost, shrunk towards 0 by
        ``OUTCOME_PRIOR`` pseudo-outcomes; none ended (nothing ends, e.g. fill-until-full): ``change``.
        Holds placed only when forced are not priced: on the tuning draws that did not pay
        (``bench/placement_hold_outcomes.py``)."""
        return change - ctx.held_lost / (ctx.held_ended + self.OUTCOME_PRIOR) * ctx.geom.compute[ctx.i]

    def keeps_empty(self, ctx: FillContext) -> KeptEmpty | None:
        """Whether to refuse a placement the engine would make that opens an empty GPU (``FILL_LEFT``, and why); the
        engine asks only for such a placement, and never for a forced request."""
        if self.FILL_LEFT == "off":
            return None
        return fill_left.keeps_empty(ctx, trusted=self.FILL_LEFT == "trusted")

    def unflags(self, ctx: HoldContext) -> bool:
        """Whether the engine may place ``ctx.option``, flagged and preferred by ``ours``' rank, instead of an
        unflagged placement that the flag put first: with the counts of now it would not be flagged (the published
        mix of a young pool is mostly prior), and no allocation has ended yet."""
        return ctx.churn <= 0 and self.stranded_now(ctx) <= self.HOLD

    def stranded_now(self, ctx: HoldContext) -> float:
        """The change of expected stranded compute ``ctx.option`` makes, with the request counts of now plus
        ``CONFIRM_PRIOR`` pseudo-requests of the prior (a fixed mix: its own weights)."""
        geom = ctx.geom
        if ctx.mix.prior_weight <= 0:  # a fixed mix (DemandMix.from_shares): exact, nothing to learn
            weights = ctx.mix.weights(geom.model)
        else:
            weights = DemandMix(ctx.counts, self.CONFIRM_PRIOR).weights(geom.model)
        # Rounded, so that consecutive decisions (the counts move a little with every request) share a memo.
        weights = tuple(round(w, 2) for w in weights)
        memo = _CONFIRMED.table((id(geom), weights, self.persistence))
        before = _fill(geom, ctx.key, weights, self.persistence, memo)
        after = geom.compute[ctx.i] + _fill(geom, ctx.option.after, weights, self.persistence, memo)
        return round(before - after, 9)


class RolloutFragmentationAware(FragmentationAware):
    """``ours-rollout``: ``ours``, except near the end of a fill, where a small search picks the placement:
    Monte-Carlo rollouts of future arrivals from the learnt mix, served by ``ours`` on the fleet's layouts
    (:mod:`.rollout`). It never holds a request that fits.

    The engine calls :meth:`search` with the pool's layouts when one GPU model can host the request; an
    answer of ``None`` (search off: fleet far from full, allocations ending, one candidate) leaves
    ``ours``' choice.
    """

    name = "ours-rollout"

    def search(
        self,
        geom: Geometry,
        i: int,
        mix: DemandMix,
        counts: Mapping[LayoutKey, int],
        ranks: Callable[[int], dict[LayoutKey, tuple[Rank, Option] | None]],
        order: Callable[[LayoutKey], int],
        churn: float = 0.0,
    ) -> tuple[LayoutKey, Option] | None:
        return rollout.search(self, geom, i, mix, counts, ranks, order, churn)


POLICIES: dict[str, Policy] = {
    p.name: p
    for p in (
        FirstFit(),
        BestFit(),
        FragmentationAware(),
        FragmentationAwareFirstSlot(),
        HamiContiguity(),
        HoldingFragmentationAware(),
        RolloutFragmentationAware(),
    )
}


def get_policy(policy: str | Policy) -> Policy:
    if not isinstance(policy, str):
        return policy
    try:
        return POLICIES[policy]
    except KeyError:
        raise ValueError(f"unknown placement policy {policy!r}; known: {', '.join(POLICIES)}") from None
