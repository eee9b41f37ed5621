"""``python bench/placement_poisson_runs.py [--seeds 10] [--hours 1 8] [--lottery-seeds N | --rules | --run ...]``:
why single Poisson runs of ``ours``/``ours-hold`` fall below best-fit, and the heavy tail's lottery (issue 14,
session 12). TUNING draws only (``bench/placement_departures.poisson_pods``: H100, 16 and 32 GPUs, Dirichlet 0.5
and 2, seeds from 0, 2,000 arrivals, lognormal and Pareto lifetimes); the hold-out (concentrations 0.3, 1 and 3,
seeds from 1000) is never read here.

A pod's lifetime is drawn independently of everything before its arrival, and no policy sees it, so a run's
slice-hours split exactly into

* **skill**: the compute admitted as a share of the compute offered (every pod counted at the run's mean
  lifetime per compute slice), and
* **luck**: ``sum over admitted pods of compute x (lifetime - that mean)`` over the offered slice-hours,

and the luck of a policy has mean (about) zero, since no admission depends on the pod's own lifetime: which
long pods a policy admits is a draw, weighted only by how often it admits each profile. The gap between two
policies is their skill gap plus a luck gap; the pod of the symmetric difference (admitted by one, not the
other) whose luck term is largest is the run's *decider*.

Prints per cell the peers' own spread run by run, ``ours`` and ``ours-hold`` against best-fit (mean, runs below,
worst) with the skill part; the losing runs decomposed; per-profile admission rates (the lottery's odds of each
profile's ticket). Instead, with ``--lottery-seeds N``: how often over N seeds per concentration a single pod
decides more than ``LOTTERY`` points between two policies, and who wins it; with ``--rules``: the variants
tried; with ``--run HOURS TAIL GPUS ALPHA SEED``: one run, arrival by arrival.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, not installed

from allocations.mig.catalog import GpuModel, load_catalog  # noqa: E402
from allocations.mig.demand import DemandMix  # noqa: E402
from allocations.mig.engine import PlacementEngine  # noqa: E402
from allocations.mig.policies import FragmentationAware, HoldContext, HoldingFragmentationAware, Policy  # noqa: E402
from bench.placement import SHAPES, Pod, profile_of  # noqa: E402
from bench.placement_departures import compute_share, poisson_pods, replay_held  # noqa: E402

ALPHAS = (0.5, 2.0)
GPUS = (16, 32)
TAILS = ("lognormal", "pareto")
PODS = 2000
PEERS = ("first-fit", "best-fit")
#: Points of slice-hours one pod must decide between two policies to count as a lottery.
LOTTERY = 2.0


@dataclass(frozen=True)
class Run:
    share: float  # slice-hours served / offered
    skill: float  # compute admitted / offered
    started: dict[int, int]

    @property
    def luck(self) -> float:
        return self.share - self.skill


def play(model: GpuModel, gpus: int, pods: Sequence[Pod], policy: str | Policy) -> Run:
    started: dict[int, int] = {}
    served = replay_held(model, gpus, pods, policy, started=started)
    return Run(served.share, compute_share(pods, started), started)


def one_run(model: GpuModel, hours: float, tail: str, gpus: int, alpha: float, seed: int) -> None:
    """One run, per policy: the profiles admitted, held pods placed late, and what the fleet offered the large
    profiles as they arrived (GPUs left whole, room for a 4g); then where in the run the compute admitted by
    ``ours-hold`` fell behind best-fit's."""
    pods = poisson_pods(model, gpus, alpha, seed, tail, PODS, hours * 3600)
    whole = profile_of(model, "7g")
    four = profile_of(model, "4g")
    runs: dict[str, Run] = {}
    seen: dict[str, dict[int, tuple[int, int]]] = {}
    for p in (*PEERS, "ours", "ours-hold"):
        room: dict[int, tuple[int, int]] = {}

        def look(k: int, engine: PlacementEngine, room: dict[int, tuple[int, int]] = room) -> None:
            fits = engine.fits_now()
            room[k] = (fits.get(whole, 0), fits.get(four, 0))

        started: dict[int, int] = {}
        served = replay_held(model, gpus, pods, p, started=started, arriving=look)
        runs[p] = Run(served.share, compute_share(pods, started), started)
        seen[p] = room
    offered = Counter(q.shape for q in pods)
    print(
        f"{hours:g} h {tail}, {gpus} GPUs, alpha {alpha:g}, seed {seed}: offered "
        + ", ".join(f"{s} {offered[s]}" for s in SHAPES)
    )
    print(
        "\n| policy | share | skill | luck | held, placed late | "
        + " | ".join(f"{s} admitted" for s in SHAPES)
        + " | 7g arrivals finding a whole GPU | 4g arrivals finding room |"
    )
    print("|---|---:|---:|---:|---:|" + "---:|" * (len(SHAPES) + 2))
    for p, r in runs.items():
        got = Counter(pods[k].shape for k in r.started)
        late = sum(t > pods[k].created for k, t in r.started.items())
        big = [k for k, q in enumerate(pods) if q.shape == "7g"]
        mid = [k for k, q in enumerate(pods) if q.shape == "4g"]
        print(
            f"| {p} | {100 * r.share:.2f} % | {100 * r.skill:.2f} % | {pts(r.luck)} | {late} | "
            + " | ".join(str(got[s]) for s in SHAPES)
            + f" | {sum(seen[p][k][0] > 0 for k in big)} of {len(big)}"
            + f" | {sum(seen[p][k][1] > 0 for k in mid)} of {len(mid)} |"
        )
    hold, bf = runs["ours-hold"], runs["best-fit"]
    print("\nCompute admitted, ours-hold - best-fit, by fifth of the arrivals (slices):", end="")
    step = len(pods) // 5
    for f in range(5):
        ks = range(f * step, (f + 1) * step)
        d = sum(SHAPES[pods[k].shape][0] * ((k in hold.started) - (k in bf.started)) for k in ks)
        print(f" {d:+d}", end="")
    only = Counter(pods[k].shape for k in bf.started.keys() - hold.started.keys())
    mine = Counter(pods[k].shape for k in hold.started.keys() - bf.started.keys())
    print("\nAdmitted by best-fit only: " + ", ".join(f"{s} {only[s]}" for s in SHAPES if only[s]))
    print("Admitted by ours-hold only: " + ", ".join(f"{s} {mine[s]}" for s in SHAPES if mine[s]))
    for peer in PEERS:
        term, k = decider(pods, hold, runs[peer])
        if k < 0:
            continue
        q = pods[k]
        print(
            f"Decider against {peer}: pod {k} ({q.shape}, {(q.deleted - q.created) / 3600:.1f} h, arriving at "
            f"{q.created / 3600:.1f} h), {term:+.2f} points; at its arrival GPUs left whole: ours-hold "
            f"{seen['ours-hold'][k][0]}, {peer} {seen[peer][k][0]}; room for a 4g: ours-hold "
            f"{seen['ours-hold'][k][1]}, {peer} {seen[peer][k][1]}"
        )


def decider(pods: Sequence[Pod], a: Run, b: Run) -> tuple[float, int]:
    """The pod admitted by exactly one of ``a`` and ``b`` whose luck term is largest, and that term in points
    (positive: it favours ``a``)."""
    hours = [SHAPES[p.shape][0] * (p.deleted - p.created) for p in pods]
    mean = sum(hours) / sum(SHAPES[p.shape][0] for p in pods)
    best, who = 0.0, -1
    for k in a.started.keys() ^ b.started.keys():
        term = (hours[k] - SHAPES[pods[k].shape][0] * mean) / sum(hours) * 100
        term = term if k in a.started else -term
        if abs(term) > abs(best):
            best, who = term, k
    return best, who


class Tight(FragmentationAware):
    """``ours`` with another best-fit pull (rank cost per free compute slice)."""

    def __init__(self, tightness: float) -> None:
        super().__init__()
        self.TIGHTNESS = tightness
        self.name = f"ours, pull {tightness:g}"


class HoldTight(HoldingFragmentationAware):
    """``ours-hold`` with another best-fit pull and opening cost."""

    def __init__(self, tightness: float, open_gpus: float = FragmentationAware.OPEN_COST_GPUS) -> None:
        super().__init__()
        self.TIGHTNESS = tightness
        self.OPEN_COST_GPUS = open_gpus
        self.name = f"ours-hold, pull {tightness:g}, open {open_gpus:g}"


class Reserve(HoldingFragmentationAware):
    """``ours-hold`` that also keeps the last ``keep`` whole GPUs for the largest profile where allocations end:
    a smaller request whose every placement is flagged and whose favourite opens one of them is held (retried
    after departures, forced at its deadline) when the largest profile is at least ``share`` of the counts of
    now. The lottery's prize is a long pod of the largest profile that finds a whole GPU."""

    def __init__(self, keep: int, share: float) -> None:
        super().__init__()
        self.keep = keep
        self.share = share
        self.name = f"ours-hold, keep {keep} whole for the largest ({share:g})"

    def holds(self, ctx: HoldContext) -> bool:
        geom = ctx.geom
        largest = max(range(len(geom.profiles)), key=lambda q: geom.compute[q])
        if ctx.churn > 0 and ctx.i != largest and ctx.layouts and not geom.info(ctx.key).allocated_instances:
            whole = sum(n for k, n in ctx.layouts.items() if not geom.info(k).allocated_instances)
            weights = DemandMix(ctx.counts, self.CONFIRM_PRIOR).weights(geom.model)
            if whole <= self.keep and weights[largest] >= self.share:
                return True
        return super().holds(ctx)


def rules() -> dict[str, str | Policy]:
    return {
        "ours": "ours",
        "ours-hold": "ours-hold",
        "ours, pull 0.3": Tight(0.3),
        "ours, pull 1": Tight(1.0),
        "ours-hold, pull 0.2": HoldTight(0.2),
        "ours-hold, pull 0.3": HoldTight(0.3),
        "ours-hold, pull 1": HoldTight(1.0),
        "ours-hold, open 0": HoldTight(FragmentationAware.TIGHTNESS, 0.0),
        "ours-hold, keep 1 whole (0.05)": Reserve(1, 0.05),
        "ours-hold, keep 2 whole (0.05)": Reserve(2, 0.05),
    }


def pts(x: float) -> str:
    return f"{100 * x:+.2f}"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=10, help="seeds per concentration (tuning: from 0)")
    ap.add_argument("--hours", type=float, nargs="*", default=[1.0, 8.0], help="mean lifetimes")
    ap.add_argument("--lottery-seeds", type=int, default=0, help="seeds per concentration for the lottery count")
    ap.add_argument("--rules", nargs="*", choices=list(rules()), help="the variants tried (all when none is named)")
    ap.add_argument(
        "--run", nargs=5, metavar=("HOURS", "TAIL", "GPUS", "ALPHA", "SEED"), help="one tuning run, arrival by arrival"
    )
    args = ap.parse_args(argv)
    h100 = load_catalog().model("NVIDIA H100 80GB HBM3")
    t0 = time.perf_counter()
    if args.run:
        hours, tail, gpus, alpha, seed = args.run
        one_run(h100, float(hours), tail, int(gpus), float(alpha), int(seed))
        return 0
    if not args.lottery_seeds and args.rules is None:
        cells(h100, args.seeds, args.hours, t0)
    if args.lottery_seeds:
        lottery(h100, args.lottery_seeds, t0)
    if args.rules is not None:
        variants(h100, args.seeds, args.hours, args.rules or list(rules()), t0)
    return 0


def cells(h100: GpuModel, seeds: int, hours_list: Sequence[float], t0: float) -> None:
    print(
        "| lifetimes | GPUs | runs | first-fit - best-fit: mean / min / max | ours - best-fit: mean / below / worst "
        "(skill of the worst) | ours-hold - best-fit: mean / below / worst (skill of the worst) |"
    )
    print("|---|---:|---:|---|---|---|")
    losing: list[str] = []
    admit: dict[str, Counter[str]] = {}
    offered: Counter[str] = Counter()
    for hours in hours_list:
        for tail in TAILS:
            for gpus in GPUS:
                ffbf: list[float] = []
                gaps: dict[str, list[tuple[float, float]]] = {"ours": [], "ours-hold": []}
                for alpha in ALPHAS:
                    for seed in range(seeds):
                        pods = poisson_pods(h100, gpus, alpha, seed, tail, PODS, hours * 3600)
                        runs = {p: play(h100, gpus, pods, p) for p in (*PEERS, "ours", "ours-hold")}
                        bf = runs["best-fit"]
                        ffbf.append(runs["first-fit"].share - bf.share)
                        offered.update(p.shape for p in pods)
                        for p, r in runs.items():
                            admit.setdefault(p, Counter()).update(pods[k].shape for k in r.started)
                        for p in gaps:
                            r = runs[p]
                            gaps[p].append((r.share - bf.share, r.skill - bf.skill))
                            if r.share - bf.share < -0.005:
                                term, k = decider(pods, r, bf)
                                losing.append(
                                    f"| {hours:g} h {tail} | {gpus} | {alpha:g} / {seed} | {p} "
                                    f"| {pts(r.share - bf.share)} "
                                    f"| {pts(r.skill - bf.skill)} | {pts(r.luck - bf.luck)} | {term:+.2f} "
                                    f"({pods[k].shape if k >= 0 else '-'}) |"
                                )
                cells = []
                for g in gaps.values():
                    worst = min(g)
                    cells.append(
                        f"{pts(statistics.fmean(d for d, _ in g))} / {sum(d < 0 for d, _ in g)} / {pts(worst[0])} "
                        f"({pts(worst[1])})"
                    )
                print(
                    f"| {hours:g} h {tail} | {gpus} | {len(ffbf)} | {pts(statistics.fmean(ffbf))} / {pts(min(ffbf))} / "
                    f"{pts(max(ffbf))} | {cells[0]} | {cells[1]} |",
                    flush=True,
                )
    print(f"\nRuns more than 0.5 points below best-fit, decomposed ({time.perf_counter() - t0:.0f} s)\n")
    print("| lifetimes | GPUs | alpha / seed | policy | gap | skill gap | luck gap | decider (its profile) |")
    print("|---|---:|---|---|---:|---:|---:|---|")
    print("\n".join(losing))
    print("\nAdmitted per profile (all runs above): the odds of each profile's lottery ticket\n")
    print("| policy | " + " | ".join(SHAPES) + " |\n|---|" + "---:|" * len(SHAPES))
    for p, c in admit.items():
        print(
            f"| {p} | " + " | ".join(f"{100 * c[s] / offered[s]:.1f} %" if offered[s] else "-" for s in SHAPES) + " |"
        )


def lottery(model: GpuModel, seeds: int, t0: float) -> None:
    print(f"\nLottery: a single pod decides more than {LOTTERY:g} points, {seeds} seeds per concentration, 1 h\n")
    print(
        "| lifetimes | GPUs | runs | ours-hold vs first-fit: lotteries, ours-hold wins / first-fit wins, largest | "
        "ours-hold vs best-fit: same | first-fit vs best-fit: same |"
    )
    print("|---|---:|---:|---|---|---|")
    largest: list[str] = []
    for tail in TAILS:
        for gpus in GPUS:
            pairs: dict[tuple[str, str], list[float]] = {
                ("ours-hold", "first-fit"): [],
                ("ours-hold", "best-fit"): [],
                ("first-fit", "best-fit"): [],
            }
            n = 0
            top = (0.0, "")
            for alpha in ALPHAS:
                for seed in range(seeds):
                    pods = poisson_pods(model, gpus, alpha, seed, tail, PODS)
                    runs = {p: play(model, gpus, pods, p) for p in (*PEERS, "ours-hold")}
                    n += 1
                    for (a, b), got in pairs.items():
                        term, k = decider(pods, runs[a], runs[b])
                        got.append(term)
                        if abs(term) > abs(top[0]):
                            q = pods[k]
                            top = (
                                term,
                                f"{a} vs {b}, alpha {alpha:g} seed {seed}: a {q.shape} of "
                                f"{(q.deleted - q.created) / 3600:.0f} h",
                            )
            cells = []
            for got in pairs.values():
                big = [t for t in got if abs(t) > LOTTERY]
                cells.append(
                    f"{len(big)}: {sum(t > 0 for t in big)} / {sum(t < 0 for t in big)}, {max(got, key=abs):+.1f}"
                )
            print(
                f"| {tail} | {gpus} | {n} | " + " | ".join(cells) + f" | ({time.perf_counter() - t0:.0f} s)", flush=True
            )
            largest.append(f"{tail}, {gpus} GPUs: {top[0]:+.1f} points, {top[1]}")
    print("\nLargest single-pod decider per cell: " + "; ".join(largest))


def variants(model: GpuModel, seeds: int, hours_list: Sequence[float], names: Sequence[str], t0: float) -> None:
    print(
        "\nVariants on the same draws: vs best-fit and vs the better peer (mean, runs below, worst), "
        "skill vs best-fit\n"
    )
    print(
        "| lifetimes | rule | share | vs best-fit: mean / below / worst | vs better peer: mean / below / worst | "
        "skill vs best-fit: mean / worst |"
    )
    print("|---|---|---:|---|---|---|")
    for hours in hours_list:
        for tail in TAILS:
            draws = [
                (gpus, poisson_pods(model, gpus, a, s, tail, PODS, hours * 3600))
                for gpus in GPUS
                for a in ALPHAS
                for s in range(seeds)
            ]
            peers = [{p: play(model, g, pods, p) for p in PEERS} for g, pods in draws]
            for name in names:
                rule = rules()[name]
                got = [play(model, g, pods, rule) for g, pods in draws]
                bf = [r.share - pr["best-fit"].share for r, pr in zip(got, peers, strict=True)]
                bp = [r.share - max(x.share for x in pr.values()) for r, pr in zip(got, peers, strict=True)]
                sk = [r.skill - pr["best-fit"].skill for r, pr in zip(got, peers, strict=True)]
                print(
                    f"| {hours:g} h {tail} | {name} | {100 * statistics.fmean(r.share for r in got):.2f} % "
                    f"| {pts(statistics.fmean(bf))} / {sum(d < 0 for d in bf)} / {pts(min(bf))} "
                    f"| {pts(statistics.fmean(bp))} / {sum(d < 0 for d in bp)} / {pts(min(bp))} "
                    f"| {pts(statistics.fmean(sk))} / {pts(min(sk))} |",
                    flush=True,
                )
        print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    raise SystemExit(main())
