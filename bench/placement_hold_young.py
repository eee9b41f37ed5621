"""``python bench/placement_hold_young.py [--gpus 8 64] [--alphas 0.5 2] [--warm]``: gates on a young learner's
holds in a fill, tried for ``ours-hold`` (issue 14, session 11) and not adopted. TUNING draws only (as
``bench/placement_hold_rules.py``: H100, Dirichlet 0.5 and 2, seeds 0-39 at 8 GPUs and 0-19 at 64; ``--alphas 0.2``
the concentrated tuning draws; ``--warm`` learners that first saw the sample's 500-request history).

Why: on the hold-out family two samples at H100, 8 GPUs, are below a peer because a young learner's counts confirm
holds of 1g.20gb early and the 7g or 4g they keep room for come too late or too few. Each variant is the kept rule
plus one gate that applies only in a fill (no release seen) and only to a learnt mix (a fixed mix knows its shares):

* ``seen >= k x GPUs``: no hold until the counts of now hold ``k`` requests per GPU of the pool;
* ``+ c / sqrt(seen)``: the confirmation's threshold ``CONFIRM + CONFIRM_GPUS / GPUs`` plus ``c / sqrt(requests seen)``;
* ``kept-for seen >= m``: the profiles the hold keeps room for (larger than the request, and fewer of them would
  fit on the GPU after the placement) were requested at least ``m`` times (decayed counts), or make at least a share
  of the requests seen, or (while the counts hold under one request per GPU) at least ``r`` times the request's own;
* a budget of held compute that grows with the requests seen (``HOLD_BUDGET`` reached at ``k`` x GPUs requests);
* scarcity: the kept-for profiles' expected arrivals while the pool's free compute fills (counts of now, prior 10)
  times ``x`` must reach the other GPUs that still have room for them (while the counts hold under 100 requests);
* the rollout veto from 25 requests seen instead of 100.

Prints per variant: per-sample mean and pooled share of the first-fit -> optimum gap closed, samples below a peer
beyond noise. docs/placement.md ("Admission", session 11) quotes it.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, not installed

from allocations.mig.catalog import load_catalog  # noqa: E402
from allocations.mig.demand import DemandMix  # noqa: E402
from allocations.mig.policies import HoldContext, HoldingFragmentationAware  # noqa: E402
from bench.placement_hold_rules import ALPHAS, SEEDS  # noqa: E402
from bench.placement_sweep import print_table, serve, sweep  # noqa: E402


class Young(HoldingFragmentationAware):
    """The kept rule plus, in a fill with a learnt mix, the gates above (0 or ``None``: off)."""

    def __init__(
        self,
        per_gpu_seen: float = 0.0,
        per_sqrt_seen: float = 0.0,
        kept_seen: float = 0.0,
        kept_share: float = 0.0,
        kept_own: float = 0.0,
        budget_full_at: float = 0.0,
        scarce: float = 0.0,
        veto_seen: float = HoldingFragmentationAware.VETO_SEEN,
    ) -> None:
        super().__init__()
        self.per_gpu_seen = per_gpu_seen
        self.per_sqrt_seen = per_sqrt_seen
        self.kept_seen = kept_seen
        self.kept_share = kept_share
        self.kept_own = kept_own
        self.budget_full_at = budget_full_at
        self.scarce = scarce
        self.VETO_SEEN = veto_seen

    def strands(self, ctx: HoldContext) -> bool:
        if not self.young(ctx):
            return super().strands(ctx)
        seen = sum(ctx.counts.values())
        limit = self.CONFIRM + self.CONFIRM_GPUS / max(1, ctx.gpus)
        if self.per_sqrt_seen:
            limit += self.per_sqrt_seen / math.sqrt(seen) if seen else math.inf
        return round(self.priced(ctx, self.stranded_now(ctx)), 9) > limit

    def holds(self, ctx: HoldContext) -> bool:
        if not super().holds(ctx):
            return False
        if not self.young(ctx):
            return True
        g = ctx.geom
        seen = sum(ctx.counts.values())
        if seen < self.per_gpu_seen * ctx.gpus:
            return False
        kept = self.kept_for(ctx)
        kept_counts = sum(ctx.counts.get(g.profiles[j].name, 0.0) for j in kept)
        if kept_counts < self.kept_seen or kept_counts < self.kept_share * seen:
            return False
        own = ctx.counts.get(g.profiles[ctx.i].name, 0.0)
        if self.kept_own and seen < ctx.gpus and kept_counts < self.kept_own * own:
            return False
        if self.budget_full_at and ctx.held:
            grown = min(1.0, seen / (self.budget_full_at * ctx.gpus))
            budget = self.HOLD_BUDGET * g.model.compute_slices * ctx.gpus * grown
            if ctx.held + g.compute[ctx.i] > budget:
                return False
        if self.scarce and kept and ctx.layouts and seen < 100:
            w = DemandMix(ctx.counts, self.CONFIRM_PRIOR).weights(g.model)
            mean = sum(x * c for x, c in zip(w, g.compute, strict=True))
            free = sum(n * (g.model.compute_slices - g.info(k).allocated_compute) for k, n in ctx.layouts.items())
            expected = free / mean * sum(w[j] for j in kept)
            room = sum(n for k, n in ctx.layouts.items() if any(g.fit(k)[j] > 0 for j in kept)) - 1
            return self.scarce * expected >= room
        return True

    def young(self, ctx: HoldContext) -> bool:
        """A fill (no release seen) with a learnt mix: where the gates apply."""
        return ctx.churn <= 0 and ctx.mix.prior_weight > 0

    @staticmethod
    def kept_for(ctx: HoldContext) -> list[int]:
        """The profiles (by index) the hold keeps room for: larger than the request, and fewer of them fit on the GPU
        after the placement than before."""
        g = ctx.geom
        before, after = g.fit(ctx.key), g.fit(ctx.option.after)
        return [j for j in range(len(g.profiles)) if g.compute[j] > g.compute[ctx.i] and after[j] < before[j]]


def variants() -> dict[str, HoldingFragmentationAware]:
    return {
        "ours-hold (kept)": HoldingFragmentationAware(),
        "seen >= 0.5 x GPUs": Young(per_gpu_seen=0.5),
        "seen >= 1 x GPUs": Young(per_gpu_seen=1.0),
        "+ 0.1 / sqrt(seen)": Young(per_sqrt_seen=0.1),
        "+ 0.2 / sqrt(seen)": Young(per_sqrt_seen=0.2),
        "+ 0.5 / sqrt(seen)": Young(per_sqrt_seen=0.5),
        "kept-for seen >= 0.5 (once)": Young(kept_seen=0.5),
        "kept-for seen >= 1": Young(kept_seen=1.0),
        "kept-for share >= 0.05": Young(kept_share=0.05),
        "kept-for >= 0.25 x own, under 1 x GPUs seen": Young(kept_own=0.25),
        "budget full at 4 x GPUs seen": Young(budget_full_at=4.0),
        "scarcity x 4": Young(scarce=4.0),
        "veto once 25": Young(veto_seen=25.0),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gpus", type=int, nargs="*", default=list(SEEDS), choices=list(SEEDS))
    ap.add_argument("--alphas", type=float, nargs="*", default=list(ALPHAS), choices=[0.2, *ALPHAS])
    ap.add_argument("--warm", action="store_true", help="learners first see the sample's 500-request history")
    args = ap.parse_args(argv)
    h100 = load_catalog().model("NVIDIA H100 80GB HBM3")
    rules = variants()
    t0 = time.perf_counter()
    for gpus in args.gpus:
        outcomes = sweep(
            h100, gpus, args.alphas, SEEDS[gpus], lambda s: {name: serve(s, p, args.warm) for name, p in rules.items()}
        )
        heading = f"{gpus} GPUs, concentrations {args.alphas}, {len(outcomes)} tuning samples"
        print_table(outcomes, list(rules), heading + (", warm learner" if args.warm else ""), t0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
