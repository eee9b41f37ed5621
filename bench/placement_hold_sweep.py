"""``python bench/placement_hold_sweep.py [--gpus 8 64]``: how session 9's ``ours-hold`` threshold was chosen.

Session 9's rule is the rank's threshold alone, without the confirmation with the counts of now that session 10
added (``bench/placement_hold_rules.py``); :class:`_Threshold` reproduces it.

Tuning draws only (H100; Dirichlet concentrations 0.5 and 2; seeds 0-39 at 8 GPUs, 0-19 at 64): the share of
the first-fit -> optimum gap closed per sample (mean), pooled, and samples below first-fit beyond noise, for
``ours`` and ``ours-hold`` at several thresholds, with the true mix instead of the learner, with holding
gated on the pool's fill or on its first requests, and with a bounded wait: a held request is forced after
``W`` more arrivals (the family has no departures, so without that bound a held request is never served).
Prints a table; docs/placement.md ("Admission") quotes it.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, not installed

from allocations.mig.catalog import load_catalog  # noqa: E402
from allocations.mig.demand import DemandLearner, DemandMix  # noqa: E402
from allocations.mig.engine import PlacementEngine, empty_fleet  # noqa: E402
from allocations.mig.fleet import PlacementRequest  # noqa: E402
from allocations.mig.policies import HoldContext, HoldingFragmentationAware  # noqa: E402
from bench.placement_family import Outcome, Sample, make_sample, run_sample, summarise  # noqa: E402

ALPHAS = (0.5, 2.0)
SEEDS = {8: 40, 64: 20}
THRESHOLDS = (0.0, 0.1, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5)


class _Threshold(HoldingFragmentationAware):
    """Session 9's ``ours-hold``: hold whatever the rank flags above ``hold``, unconfirmed."""

    def __init__(self, hold: float) -> None:
        super().__init__()
        self.HOLD = hold

    def holds(self, ctx: HoldContext) -> bool:
        return True


def serve(sample: Sample, hold: float, true_mix: bool = False, from_share: float = 0.0, after: int = 0) -> int:
    """Compute served by ``ours-hold`` with threshold ``hold``; holding only once ``from_share`` of the pool's
    compute is allocated and after the first ``after`` requests (earlier requests are forced)."""
    per_node = min(8, sample.gpus)
    demand = DemandMix.from_shares(Counter(sample.requests)) if true_mix else DemandLearner()
    engine = PlacementEngine(empty_fleet(sample.model, sample.gpus // per_node, per_node), _Threshold(hold), demand)
    served = 0
    for k, name in enumerate(sample.requests):
        used, total = engine.allocated_compute()
        force = used < from_share * total or k < after
        if engine.place(PlacementRequest(name, force=force), f"r{k}") is not None:
            served += sample.model.profile(name).compute_slices
    return served


def serve_queued(sample: Sample, wait: int) -> int:
    """``ours-hold`` where a held request waits and is forced after ``wait`` more arrivals (if it still fits)."""
    per_node = min(8, sample.gpus)
    fleet = empty_fleet(sample.model, sample.gpus // per_node, per_node)
    engine = PlacementEngine(fleet, _Threshold(0.3), DemandLearner())
    served = 0
    held: list[tuple[int, str]] = []
    for k, name in enumerate(sample.requests):
        if engine.place(PlacementRequest(name), f"r{k}") is not None:
            served += sample.model.profile(name).compute_slices
        elif engine.fits_now()[name] > 0:
            held.append((k, name))
        due = [(j, n) for j, n in held if k - j >= wait]
        held = [(j, n) for j, n in held if k - j < wait]
        for j, n in due:
            if engine.place(PlacementRequest(n, force=True), f"r{j}") is not None:
                served += sample.model.profile(n).compute_slices
    return served


def variants(sample: Sample) -> dict[str, int]:
    out = {f"HOLD {t}": serve(sample, t) for t in THRESHOLDS}
    out["HOLD 0.3, true mix"] = serve(sample, 0.3, true_mix=True)
    out["HOLD 0.3, from 50 % allocated"] = serve(sample, 0.3, from_share=0.5)
    out["HOLD 0.3, from 70 % allocated"] = serve(sample, 0.3, from_share=0.7)
    out["HOLD 0.3, after 20 requests"] = serve(sample, 0.3, after=20)
    for wait in (5, 10, 20, 40):
        out[f"ours-hold, forced after {wait} arrivals"] = serve_queued(sample, wait)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gpus", type=int, nargs="+", default=list(SEEDS), choices=list(SEEDS))
    args = ap.parse_args(argv)
    h100 = load_catalog().model("NVIDIA H100 80GB HBM3")
    for gpus in args.gpus:
        outcomes: list[Outcome] = []
        for alpha in ALPHAS:
            for seed in range(SEEDS[gpus]):
                sample = make_sample(h100, gpus, alpha, seed)
                outcome = run_sample(sample, ["first-fit", "best-fit", "hami", "ours"])
                outcome.served.update(variants(sample))
                outcomes.append(outcome)
        print(f"\n{gpus} GPUs, {len(outcomes)} tuning samples\n\n| policy | per sample: mean | pooled | below FF |")
        print("|---|---:|---:|---:|")
        for name in outcomes[0].served:
            if name == "first-fit":
                continue
            s = summarise(outcomes, name)
            mean = "n/a" if math.isnan(s.mean) else f"{100 * s.mean:.1f} %"
            print(f"| {name} | {mean} | {100 * s.pooled:.1f} % | {s.below.get('first-fit', 0)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
