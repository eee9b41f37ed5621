"""``python bench/placement_hold_spread.py [--gpus 8 64] [--alphas 0.5 2] [--warm] [--rules NAME ...]``: a young
learner's holds in a fill told apart by how sure the counts are (issue 14, session 12). TUNING draws only (as
``bench/placement_hold_rules.py``: H100, Dirichlet 0.5 and 2, seeds 0-39 at 8 GPUs and 0-19 at 64; ``--alphas 0.2``
the concentrated tuning draws; ``--warm`` learners that first saw the sample's 500-request history).

Why: session 11's gates (``bench/placement_hold_young.py``) delayed every young learner's holds and lost on the cold
columns, because early holds pay on average. These variants keep the kept rule and, in a fill with a learnt mix,
weigh a hold by the UNCERTAINTY of the mix instead: the posterior of the mix is Dirichlet(counts of now +
``CONFIRM_PRIOR`` x the default shares), and ``K`` draws of it (common random numbers: the same seed every
decision, so that a decision does not depend on the ones before) are priced as the confirmation prices the counts:

* ``share >= q``: hold only when the placement strands more than the confirmation's threshold under at least a
  share ``q`` of the draws (i.e. a lower credible bound of the stranding above the threshold); ``point + share``
  also needs the point estimate (the kept confirmation) to hold;
* ``mean of draws``: the stranding averaged over the draws instead of the stranding of the averaged mix;
* ``jackknife`` / ``own + 1`` (deterministic, no draws): the kept confirmation must still hold with one request
  fewer of any profile seen, or with one more of the request's own profile (a hold that one request flips is not
  sure);
* ``kept-for likely``: the profiles the hold keeps room for (larger than the request, fewer fit after the
  placement) must be likely to come in numbers before the pool fills: in at least a share ``q`` of the draws the
  expected arrivals of those profiles while the pool's free compute fills, times ``x``, reach the other GPUs
  that still have room for them.

The gates apply only while the counts hold fewer than ``young_seen`` requests (100: a warm learner is untouched,
and a long fill pays the draws' cost only at its start). Prints per variant: per-sample mean and pooled share of
the first-fit -> optimum gap closed, samples below a peer beyond noise, and the mean / p99 CPU time of one test
(where it ran: a young fill). docs/placement.md ("Admission", "Session 12: ... how sure the counts are") quotes it;
none was adopted (the one row ahead in every column run is a draw-seed artefact: other seeds of the same rule lose).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, not installed

from allocations.mig.catalog import load_catalog  # noqa: E402
from allocations.mig.demand import DemandMix, default_shares  # noqa: E402
from allocations.mig.layout import LayoutKey  # noqa: E402
from allocations.mig.policies import HoldContext, HoldingFragmentationAware, _fill  # noqa: E402
from bench.placement_hold_rules import ALPHAS, SEEDS  # noqa: E402
from bench.placement_hold_young import Young  # noqa: E402
from bench.placement_sweep import print_table, serve, sweep  # noqa: E402


class Spread(HoldingFragmentationAware):
    """The kept rule plus, in a young fill with a learnt mix, one of the posterior tests above."""

    def __init__(
        self,
        mode: str,
        q: float = 0.5,
        draws: int = 32,
        point: bool = False,
        scarce: float = 1.0,
        young_seen: float = 100.0,
        seed: int = 12,
    ) -> None:
        super().__init__()
        self.mode = mode
        self.q = q
        self.draws = draws
        self.point = point
        self.scarce = scarce
        self.young_seen = young_seen
        self.seed = seed
        self.times: list[float] = []

    def young(self, ctx: HoldContext) -> bool:
        return ctx.churn <= 0 and ctx.mix.prior_weight > 0 and sum(ctx.counts.values()) < self.young_seen

    def posterior(self, ctx: HoldContext) -> list[tuple[float, ...]]:
        """``draws`` draws of Dirichlet(counts of now + CONFIRM_PRIOR x the default shares), same seed each call."""
        model = ctx.geom.model
        prior = default_shares(model)
        alphas = [ctx.counts.get(p.name, 0.0) + self.CONFIRM_PRIOR * prior[p.name] for p in model.profiles]
        rng = random.Random(self.seed)
        out = []
        for _ in range(self.draws):
            g = [rng.gammavariate(a, 1.0) if a > 0 else 0.0 for a in alphas]
            total = sum(g) or 1.0
            out.append(tuple(round(x / total, 2) for x in g))
        return out

    def change(self, ctx: HoldContext, weights: tuple[float, ...]) -> float:
        g = ctx.geom
        memo: dict[LayoutKey, float] = {}
        before = _fill(g, ctx.key, weights, self.persistence, memo)
        return before - (g.compute[ctx.i] + _fill(g, ctx.option.after, weights, self.persistence, memo))

    def strands(self, ctx: HoldContext) -> bool:
        if self.mode not in ("share", "mean", "jackknife", "own+1") or not self.young(ctx):
            return super().strands(ctx)
        t0 = time.perf_counter()
        try:
            if self.mode in ("jackknife", "own+1"):
                return self.robust(ctx)
            if self.point and not super().strands(ctx):
                return False
            limit = self.CONFIRM + self.CONFIRM_GPUS / max(1, ctx.gpus)
            changes = [self.priced(ctx, self.change(ctx, w)) for w in self.posterior(ctx)]
            if self.mode == "mean":
                return round(statistics.fmean(changes), 9) > limit
            return sum(1 for c in changes if round(c, 9) > limit) >= self.q * len(changes)
        finally:
            self.times.append(time.perf_counter() - t0)

    def robust(self, ctx: HoldContext) -> bool:
        """Confirmed with the counts of now and still with one request fewer of any profile seen (``jackknife``), or
        with one more of the request's own profile (``own+1``): a hold that one request flips is not sure."""
        if not super().strands(ctx):
            return False
        g = ctx.geom
        limit = self.CONFIRM + self.CONFIRM_GPUS / max(1, ctx.gpus)
        if self.mode == "own+1":
            own = g.profiles[ctx.i].name
            variants = [{**ctx.counts, own: ctx.counts.get(own, 0.0) + 1.0}]
        else:
            variants = [{**ctx.counts, k: max(0.0, v - 1.0)} for k, v in ctx.counts.items() if v > 0]
        for counts in variants:
            w = tuple(round(x, 2) for x in DemandMix(counts, self.CONFIRM_PRIOR).weights(g.model))
            if round(self.priced(ctx, self.change(ctx, w)), 9) <= limit:
                return False
        return True

    def holds(self, ctx: HoldContext) -> bool:
        if not super().holds(ctx):
            return False
        if self.mode != "kept" or not self.young(ctx) or not ctx.layouts:
            return True
        t0 = time.perf_counter()
        try:
            g = ctx.geom
            kept = Young.kept_for(ctx)
            if not kept:
                return True
            free = sum(n * (g.model.compute_slices - g.info(k).allocated_compute) for k, n in ctx.layouts.items())
            room = sum(n for k, n in ctx.layouts.items() if any(g.fit(k)[j] > 0 for j in kept)) - 1
            likely = 0
            for w in self.posterior(ctx):
                mean = sum(x * c for x, c in zip(w, g.compute, strict=True)) or 1.0
                if self.scarce * free / mean * sum(w[j] for j in kept) >= room:
                    likely += 1
            return likely >= self.q * self.draws
        finally:
            self.times.append(time.perf_counter() - t0)


def variants() -> dict[str, HoldingFragmentationAware]:
    """Every variant tried (session 12); ``--rules`` runs a few of them (each ``share`` variant costs minutes per
    column: its draws are not memoised across decisions)."""
    return {
        "ours-hold (kept)": HoldingFragmentationAware(),
        "share >= 0.5": Spread("share", 0.5),
        "share >= 0.5, seed 13": Spread("share", 0.5, seed=13),
        "share >= 0.5, seed 14": Spread("share", 0.5, seed=14),
        "share >= 0.5, 16 draws": Spread("share", 0.5, draws=16),
        "share >= 0.5, 16 draws, seed 13": Spread("share", 0.5, draws=16, seed=13),
        "share >= 0.5, 64 draws": Spread("share", 0.5, draws=64),
        "share >= 0.5, 64 draws, seed 13": Spread("share", 0.5, draws=64, seed=13),
        "share >= 0.35": Spread("share", 0.35),
        "share >= 0.65": Spread("share", 0.65),
        "share >= 0.8": Spread("share", 0.8),
        "point + share >= 0.5": Spread("share", 0.5, point=True),
        "point + share >= 0.65": Spread("share", 0.65, point=True),
        "mean of draws": Spread("mean"),
        "jackknife (one request fewer of any profile)": Spread("jackknife"),
        "own + 1 (one more of the request's profile)": Spread("own+1"),
        "kept-for likely x 1, q 0.5": Spread("kept", 0.5, scarce=1.0),
        "kept-for likely x 2, q 0.5": Spread("kept", 0.5, scarce=2.0),
        "kept-for likely x 2, q 0.25": Spread("kept", 0.25, scarce=2.0),
        "kept-for likely x 4, q 0.25": Spread("kept", 0.25, scarce=4.0),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gpus", type=int, nargs="*", default=list(SEEDS), choices=list(SEEDS))
    ap.add_argument("--alphas", type=float, nargs="*", default=list(ALPHAS), choices=[0.2, *ALPHAS])
    ap.add_argument("--warm", action="store_true", help="learners first see the sample's 500-request history")
    ap.add_argument("--rules", nargs="*", help="only these variants (and the kept rule)")
    args = ap.parse_args(argv)
    h100 = load_catalog().model("NVIDIA H100 80GB HBM3")
    rules = variants()
    if args.rules:
        rules = {k: v for k, v in rules.items() if k in args.rules or k == "ours-hold (kept)"}
    t0 = time.perf_counter()
    for gpus in args.gpus:
        outcomes = sweep(
            h100, gpus, args.alphas, SEEDS[gpus], lambda s: {name: serve(s, p, args.warm) for name, p in rules.items()}
        )
        heading = f"{gpus} GPUs, concentrations {args.alphas}, {len(outcomes)} tuning samples"
        cost = ("test ms mean / p99 (n)", "---:", lambda name: gate_cost(rules[name]))
        print_table(outcomes, list(rules), heading + (", warm learner" if args.warm else ""), t0, columns=[cost])
    return 0


def gate_cost(policy: HoldingFragmentationAware) -> str:
    """The CPU time of a variant's tests in the column just run ("-" where none ran), then forgotten: a column's
    cost is its own."""
    if not isinstance(policy, Spread) or not policy.times:
        return "-"
    times = sorted(policy.times)
    policy.times.clear()
    p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
    return f"{1000 * statistics.fmean(times):.2f} / {1000 * p99:.1f} ({len(times)})"


if __name__ == "__main__":
    raise SystemExit(main())
