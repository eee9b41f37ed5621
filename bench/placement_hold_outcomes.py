"""``python bench/placement_hold_outcomes.py [--hours 1 8] [--seeds 10] [--trace-dir DIR]``: how ``ours-hold``
prices a hold where allocations end (issue 14, session 11). TUNING draws only; the trace (``--trace-dir``) is
the workload the issue names: printed for the report, never used to choose.

With departures a held request comes back (``bench/placement_departures.py``, ``replay_held``): placed on a retry
after a departure, placed forced at its deadline, or lost (it no longer fits then). On the Alibaba trace at 24
H100s 190 of 463 held 4g pods were lost (session 10). The engine now records how the pool's holds of each profile
ended (``PlacementEngine.hold_ended``) and the policy prices a hold by them (``HoldingFragmentationAware.priced``);
nothing comes back where nothing ends, so the fill-until-full family is unchanged by construction.

Tuning draws: H100, 16 and 32 GPUs, Dirichlet 0.5 and 2, seeds 0..N-1 (default 10), 2,000 arrivals, lognormal
and Pareto lifetimes of mean 1 hour (the departures' tuning cells) and 8 hours (few departures per 15-minute
hold: the regime where held requests are lost). Hold-out (``bench/placement.py --departures``): concentrations
0.3, 1 and 3, seeds from 1000, 5,000 arrivals, mean 1 hour.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, not installed

from allocations.mig.catalog import GpuModel, load_catalog  # noqa: E402
from allocations.mig.policies import HoldContext, HoldingFragmentationAware  # noqa: E402
from bench.placement import Pod, read_trace  # noqa: E402
from bench.placement_departures import poisson_pods, replay, replay_held  # noqa: E402

ALPHAS = (0.5, 2.0)
GPUS = (16, 32)
PODS = 2000
TRACE_GPUS = (16, 24, 32)


class Priced(HoldingFragmentationAware):
    """``ours-hold`` with another price of a hold, from ``prior`` pseudo-outcomes: ``"lost"`` (the kept price, with
    the kept prior by default) the lost share times the request's compute; ``"forced"`` the stranding discounted by
    the share placed only when forced (a lost request counted as a refusal whose room the mix takes: the fill
    model's own view); ``"both"`` both."""

    def __init__(self, prior: float = HoldingFragmentationAware.OUTCOME_PRIOR, price: str = "lost") -> None:
        super().__init__()
        self.OUTCOME_PRIOR = prior
        self.price = price

    def priced(self, ctx: HoldContext, change: float) -> float:
        n = ctx.held_ended + self.OUTCOME_PRIOR
        if self.price in ("forced", "both"):
            change *= 1.0 - ctx.held_forced / n
        if self.price in ("lost", "both"):
            change -= ctx.held_lost / n * ctx.geom.compute[ctx.i]
        return change


class Unpriced(HoldingFragmentationAware):
    """Session 10's ``ours-hold``: a hold is not priced by how earlier holds ended."""

    name = "ours-hold (session 10)"

    def priced(self, ctx: HoldContext, change: float) -> float:
        return change


def rules() -> dict[str, HoldingFragmentationAware]:
    return {
        "session 10 (no price)": Unpriced(),
        "lost share, prior 1 (kept)": HoldingFragmentationAware(),
        "lost share, prior 4": Priced(4.0),
        "forced share, prior 4": Priced(4.0, "forced"),
        "lost and forced shares, prior 1": Priced(1.0, "both"),
        "lost and forced shares, prior 4": Priced(4.0, "both"),
    }


@dataclass(frozen=True)
class TuningRun:
    """One online tuning draw: ``label`` (lifetimes/GPUs/concentration/seed), its arrivals, and ``peer``: the
    better of first-fit's and best-fit's share served."""

    label: str
    gpus: int
    pods: list[Pod]
    peer: float


def tuning_runs(model: GpuModel, seeds: int, hours: float) -> Iterator[TuningRun]:
    """The online tuning draws (module doc) of mean lifetime ``hours``, seeds 0 to ``seeds - 1``, in one order for
    every bench that reads them (``bench/placement_fill_left_online.py`` too)."""
    for tail in ("lognormal", "pareto"):
        for gpus in GPUS:
            for alpha in ALPHAS:
                for seed in range(seeds):
                    pods = poisson_pods(model, gpus, alpha, seed, tail, PODS, hours * 3600)
                    peer = max(replay(model, gpus, pods, p).share for p in ("first-fit", "best-fit"))
                    yield TuningRun(f"{tail[:4]}/{gpus}/{alpha:g}/{seed}", gpus, pods, peer)


def versus_peers(got: Sequence[float], peers: Sequence[float], *, median: bool = False) -> str:
    """A rule's cells against the runs' better peer: share served, mean difference, (``median``) the median one,
    runs below by more than 0.5 points, the worst run's difference."""
    d = [a - b for a, b in zip(got, peers, strict=True)]
    cells = [f"{100 * statistics.fmean(got):.3f} %", f"{100 * statistics.fmean(d):+.3f}"]
    cells += [f"{100 * statistics.median(d):+.3f}"] if median else []
    cells += [str(sum(x < -0.005 for x in d)), f"{100 * min(d):+.2f}"]
    return " | ".join(cells)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hours", type=float, nargs="*", default=[1.0, 8.0], help="mean lifetimes of the draws")
    ap.add_argument("--seeds", type=int, default=10, help="seeds per concentration")
    ap.add_argument("--trace-dir", type=Path, help="also replay the Alibaba trace (openb_pod_list_default.csv)")
    ap.add_argument("--only", nargs="*", choices=list(rules()), help="these rules only")
    args = ap.parse_args(argv)
    h100 = load_catalog().model("NVIDIA H100 80GB HBM3")
    names = args.only or list(rules())
    t0 = time.perf_counter()
    for hours in args.hours:
        shares: dict[str, list[float]] = {n: [] for n in [*names, "ours"]}
        peers: list[float] = []
        for run in tuning_runs(h100, args.seeds, hours):
            peers.append(run.peer)
            shares["ours"].append(replay(h100, run.gpus, run.pods, "ours").share)
            for name in names:
                shares[name].append(replay_held(h100, run.gpus, run.pods, rules()[name]).share)
        print(f"\nTuning draws, mean lifetime {hours:g} h, {len(peers)} runs ({time.perf_counter() - t0:.0f} s)\n")
        print(
            "| rule | served of offered | vs the better of first-fit and best-fit: mean | median | runs below by "
            "> 0.5 points | worst |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        for name, got in shares.items():
            print(f"| {name} | {versus_peers(got, peers, median=True)} |", flush=True)
    if args.trace_dir is not None:
        pods, _ = read_trace(args.trace_dir / "openb_pod_list_default.csv")
        pods.sort(key=lambda p: p.created)
        print(f"\nAlibaba trace, reported, not tuned on ({time.perf_counter() - t0:.0f} s)\n")
        print("| rule | " + " | ".join(f"{g} GPUs" for g in TRACE_GPUS) + " |\n|---|" + "---:|" * len(TRACE_GPUS))
        for name in ["first-fit", "best-fit", "ours", *names]:
            if name in names:
                cells = [replay_held(h100, g, pods, rules()[name]).share for g in TRACE_GPUS]
            else:
                cells = [replay(h100, g, pods, name).share for g in TRACE_GPUS]
            print(f"| {name} | " + " | ".join(f"{100 * c:.3f} %" for c in cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
