"""``python bench/placement_trust.py [--gpus 8 64] [--alphas 0.5 2 | 0.2] [--rules NAME ...]`` (tuning draws) and
``python bench/placement_trust.py --holdout --rules NAME [--gpus 8] [--models H100 H200]`` (hold-out cells, run only
for the chosen candidate): a best-fit pull in ``ours-hold``'s fill whose strength follows how much the learnt mix is
trusted (issue 14, session 13; measured, not adopted: on the hold-out it changes no H100 8-GPU sample).

Session 12 (``bench/placement_fill_pull.py``) found that a pull of 0.3 per free compute slice (``ours``' 0.1) while
the pool fills gains on a cold learner (tuning, 8 GPUs: 59.6 -> 61.5 % per sample) and loses 0.3 points on the warm
columns. A warm learner's counts outweigh its prior; a cold learner's mix is mostly prior. So here the fill's pull
depends on the trust: ``n`` the request counts of now (decayed, as the confirmation reads them), ``P`` the learner's
prior pseudo-requests (20), the prior's share ``P / (P + n)``:

* ``step``: ``pull`` while ``n <= k x P`` (the mix is still mostly prior), then ``ours``' 0.1;
* ``linear``: ``0.1 + (pull - 0.1) x P / (P + n)`` (rounded to 0.01, so the ranks are recomputed rarely);
* optionally a confirmation threshold raised by ``confirm_young`` while ``n <= P``.

From the pool's first release on, the pull is 0.1 whatever the trust (the online rule is untouched), as in
``placement_fill_pull.py``, whose engine subclass this extends: :class:`TrustEngine` sets the policy's pull after
the learner saw each request and drops its cached ranks when the pull changes (the engine caches ranks per demand
snapshot, not per pull). A warm learner (500 requests of history: ``n`` about 360) gets 0.1 throughout under the
step rules, so the warm columns are the kept rule's by construction there.

Tuning: H100, Dirichlet 0.5 and 2 (``--alphas 0.2``: the concentrated draws), seeds 0-39 at 8 GPUs and 0-19 at 64,
cold and warm learners, as ``placement_fill_pull.py``. ``--holdout``: the family cells of ``bench/placement.py
--policy`` (concentrations 0.3, 1 and 3, seeds 1000-1029 at 8 GPUs and 1000-1011 at 64; H100 and H200; cold and
warm), the kept rule and the named rules side by side; the kept rule's row must equal the report's ``ours-hold`` /
``ours-hold-warm`` rows. docs/placement.md ("Session 13: ...") quotes both.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, not installed

from allocations.mig.catalog import GpuModel, load_catalog  # noqa: E402
from allocations.mig.demand import DemandLearner, DemandMix  # noqa: E402
from allocations.mig.policies import FragmentationAware, HoldContext, HoldingFragmentationAware  # noqa: E402
from bench.placement_family import Sample, make_sample  # noqa: E402
from bench.placement_fill_pull import FillPull, FillPullEngine  # noqa: E402
from bench.placement_sweep import serve, side_by_side  # noqa: E402

TUNING_SEEDS = {8: 40, 64: 20}
HOLDOUT_ALPHAS = (0.3, 1.0, 3.0)
HOLDOUT_FIRST_SEED = 1000
HOLDOUT_SEEDS = {8: 30, 64: 12}
MODELS = {"H100": "NVIDIA H100 80GB HBM3", "H200": "NVIDIA H200"}
KEPT = "ours-hold (kept)"


class TrustPull(FillPull):
    """``ours-hold`` whose fill pull follows the trust in the mix (module doc); ``mode`` ``"step"`` or
    ``"linear"``."""

    def __init__(self, mode: str, pull: float = 0.3, k: float = 1.0, confirm_young: float = 0.0) -> None:
        super().__init__(pull)
        self.mode = mode
        self.k = k
        self.confirm_young = confirm_young
        self.seen = 0.0
        self.prior = 20.0
        self.TIGHTNESS = self.pull_for(0.0, self.prior)
        young = f", confirmation +{confirm_young:g} while n <= P" if confirm_young else ""
        if mode == "step":
            self.name = f"trust step: pull {pull:g} while n <= {k:g} x P{young}"
        else:
            self.name = f"trust linear: 0.1 + {pull - 0.1:g} x P / (P + n){young}"

    def pull_for(self, seen: float, prior: float) -> float:
        base = FragmentationAware.TIGHTNESS
        if not self.filling or prior <= 0:
            return base
        if self.mode == "step":
            return self.fill_pull if seen <= self.k * prior else base
        return round(base + (self.fill_pull - base) * prior / (prior + seen), 2)

    def trust(self, seen: float, prior: float) -> bool:
        """Sets the pull for ``seen`` requests counted now against ``prior`` pseudo-requests; whether it changed."""
        self.seen, self.prior = seen, prior
        pull = self.pull_for(seen, prior)
        changed = pull != self.TIGHTNESS
        self.TIGHTNESS = pull
        return changed

    def strands(self, ctx: HoldContext) -> bool:
        if not self.confirm_young or ctx.churn > 0 or self.seen > self.prior:
            return super().strands(ctx)
        limit = self.CONFIRM + self.confirm_young + self.CONFIRM_GPUS / max(1, ctx.gpus)
        return round(self.priced(ctx, self.stranded_now(ctx)), 9) > limit


class TrustEngine(FillPullEngine):
    """:class:`FillPullEngine` that also tells a :class:`TrustPull` the counts of now after each request is seen."""

    def _snapshot(self) -> DemandMix:
        mix = super()._snapshot()
        if isinstance(self.policy, TrustPull):
            counts = self.demand.counts() if isinstance(self.demand, DemandLearner) else mix.counts
            if self.policy.trust(sum(counts.values()), mix.prior_weight):
                self._ranks.clear()  # the cached ranks carry the old pull
        return mix


def rules() -> dict[str, HoldingFragmentationAware]:
    out: dict[str, HoldingFragmentationAware] = {KEPT: HoldingFragmentationAware()}
    for p in (
        TrustPull("step", 0.3, 1.0),
        TrustPull("step", 0.3, 2.0),
        TrustPull("linear", 0.3),
        TrustPull("step", 0.3, 2.0, confirm_young=0.1),
    ):
        out[p.name] = p
    return out


def fresh(policy: HoldingFragmentationAware) -> HoldingFragmentationAware:
    """A new instance of the rule (a :class:`TrustPull` keeps state across a run)."""
    if isinstance(policy, TrustPull):
        return TrustPull(policy.mode, policy.fill_pull, policy.k, policy.confirm_young)
    return HoldingFragmentationAware()


def cells(
    samples: Sequence[Sample], chosen: dict[str, HoldingFragmentationAware], title: str, t0: float, warm_too: bool
) -> None:
    def served(sample: Sample, name: str, warm: bool) -> int:
        return serve(sample, fresh(chosen[name]), warm, TrustEngine)

    side_by_side(samples, list(chosen), served, KEPT, title, t0, warm_too)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gpus", type=int, nargs="*", default=[8, 64], choices=list(TUNING_SEEDS))
    ap.add_argument("--alphas", type=float, nargs="*", default=[0.5, 2.0], choices=[0.2, 0.5, 2.0])
    ap.add_argument("--rules", nargs="*", help="rule names (default: all); the kept rule is always run")
    ap.add_argument("--holdout", action="store_true", help="the hold-out cells instead of the tuning draws")
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS), help="with --holdout")
    ap.add_argument("--cold-only", action="store_true", help="learners from the prior only (no warm column)")
    args = ap.parse_args(argv)
    every = rules()
    unknown = [r for r in args.rules or () if r not in every]
    if unknown:
        ap.error(f"unknown rules {unknown}; known: {list(every)}")
    chosen = {n: p for n, p in every.items() if n == KEPT or not args.rules or n in args.rules}
    catalog = load_catalog()
    t0 = time.perf_counter()
    warm_too = not args.cold_only
    for gpus in args.gpus:
        if args.holdout:
            for short in args.models:
                model: GpuModel = catalog.model(MODELS[short])
                samples = [
                    make_sample(model, gpus, a, HOLDOUT_FIRST_SEED + s)
                    for a in HOLDOUT_ALPHAS
                    for s in range(HOLDOUT_SEEDS[gpus])
                ]
                cells(
                    samples,
                    chosen,
                    f"HOLD-OUT {short}, {gpus} GPUs, concentrations {list(HOLDOUT_ALPHAS)}",
                    t0,
                    warm_too,
                )
        else:
            h100 = catalog.model(MODELS["H100"])
            samples = [make_sample(h100, gpus, a, s) for a in args.alphas for s in range(TUNING_SEEDS[gpus])]
            cells(samples, chosen, f"tuning H100, {gpus} GPUs, concentrations {args.alphas}", t0, warm_too)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
