#!/usr/bin/env python
"""Does pre-shaping pay? Per-GPU pre-shaping (allocations/mig/preshape.py, what the beat task runs when
FATIA_PRESHAPE_QUIET_S > 0) against pool-wide pre-shaping scored by evidence (allocations/mig/preshape_fleet.py),
and none, on the online static-MIG simulation of bench/placement_static.py (issue 12).

Usage::

    python bench/preshape_fleet.py [--quick] [--seeds N] [--dirichlet K] [--requests N]

Static agent mode, `free instance first` (the strategy with the fewest request-path reconfigurations in
bench/placement_static.py), 16 x H100 carved `all-balanced`, Poisson arrivals at 130 % load, exponential
lifetimes; a quiet period is a gap between arrivals longer than twice the mean gap. Mixes: the synthetic ones the
policy was tuned on, the untuned ones, and K mixes drawn from a flat Dirichlet over the six shapes (never seen by
anyone before the run). Prints the tables and writes the "Pre-shaping by evidence" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from allocations.mig.catalog import GpuModel, load_catalog  # noqa: E402
from allocations.mig.preshape_fleet import plan_fleet_preshape  # noqa: E402
from bench.placement import SHAPES, SYNTHETIC, load_average, profile_of, synthetic_online  # noqa: E402
from bench.placement_static import UNTUNED, StaticFleet, StaticRun, dist, replay_static  # noqa: E402
from bench.report import command_line, write_section  # noqa: E402


def fleet_preshape(static: StaticFleet, **params: float | bool) -> None:
    """One quiet period of pool-wide pre-shaping on the simulated fleet."""
    model = static.model
    mix = static.learner.mix()
    weights = {p.name: w for p, w in zip(model.profiles, mix.weights(model), strict=True)}
    gpus = [static.engine.instances(node, index) for node, index in static.positions]
    for change in plan_fleet_preshape(model, gpus, weights, **params):  # type: ignore[arg-type]
        node, index = static.positions[change.position]
        owners = {x.start: x for x in gpus[change.position] if not x.free}
        static.engine.set_layout(node, index, [owners.get(x.start, x) for x in change.layout_after])
        static.run.preshape_reconfigurations += 1
        static.run.preshape_operations += len(change.operations)


VARIANTS: dict[str, Callable[[StaticFleet], None] | None] = {
    "off": None,
    "per GPU (today's)": StaticFleet.preshape,
    "pool-wide, horizon 16": lambda s: fleet_preshape(s, horizon=16),
    "pool-wide, horizon 32, margin 0.5": lambda s: fleet_preshape(s, horizon=32, margin=0.5),
    "pool-wide, horizon 16, GPUs holding nothing kept": lambda s: fleet_preshape(s, horizon=16, keep_free_gpus=True),
}


@dataclass
class Row:
    admitted: list[float] = field(default_factory=list)
    served: list[float] = field(default_factory=list)  # compute slices served / asked for
    reconf: list[float] = field(default_factory=list)
    quiet: list[float] = field(default_factory=list)
    quiet_ops: list[float] = field(default_factory=list)


def simulate(
    model: GpuModel, mix: dict[str, float], seed: int, n: int, preshape: Callable[[StaticFleet], None] | None
) -> tuple[StaticRun, int]:
    gpus = 16
    pods = synthetic_online(mix, seed, model, gpus, n)
    run = replay_static(StaticFleet(model, gpus), pods, preshape)
    offered = sum(model.profile(profile_of(model, p.shape)).compute_slices for p in pods)
    return run, offered


def dirichlet(k: int) -> dict[str, float]:
    rng = random.Random(10_000 + k)
    raw = {shape: rng.gammavariate(1.0, 1.0) for shape in SHAPES}
    total = sum(raw.values())
    return {shape: round(w / total, 3) for shape, w in raw.items()}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="2 seeds, 3 Dirichlet mixes, 500 requests")
    ap.add_argument("--seeds", type=int, default=None)
    ap.add_argument("--dirichlet", type=int, default=None, help="how many Dirichlet-drawn mixes (default 6)")
    ap.add_argument("--requests", type=int, default=None, help="requests per run (default 1000)")
    args = ap.parse_args(argv)
    seeds = args.seeds or (2 if args.quick else 3)
    n = args.requests or (500 if args.quick else 1000)
    k = args.dirichlet if args.dirichlet is not None else (3 if args.quick else 6)
    started = time.perf_counter()
    model = load_catalog().model("NVIDIA H100 80GB HBM3")
    mixes = {
        **{name: SYNTHETIC[name] for name in ("synthetic-small", "synthetic-balanced")},
        **{name: UNTUNED[name] for name in ("untuned-1g-heavy", "untuned-uniform")},
        **{f"dirichlet-{i}": dirichlet(i) for i in range(k)},
    }
    cmd = command_line(["bench/preshape_fleet.py", *(argv if argv is not None else sys.argv[1:])])
    md = [
        f"- Command: `{cmd}`",
        f"- Date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Machine: {os.cpu_count()} CPUs (nproc), Python {platform.python_version()}; load average at the start: "
        f"{load_average()}",
        f"- Online static agent mode, `free instance first`, 16 x H100 carved `all-balanced`, {n} Poisson requests "
        f"at 130 % load per run, {seeds} seeds per mix. Pre-shaping runs in every gap between arrivals longer than "
        "twice the mean gap. `per GPU`: allocations/mig/preshape.py on every GPU (today's beat task). `pool-wide`: "
        "allocations/mig/preshape_fleet.py (a GPU changes only where the pool's free instances then cover more of "
        "the next `horizon` requests under the learnt mix, by `margin` requests net of 0.25 per operation; at most "
        "2 GPUs per quiet period; `GPUs holding nothing kept`: a GPU with no held instance is never reshaped).",
        "- Dirichlet mixes (flat, over 1g / 1g.2x / 2g / 3g / 4g / 7g): "
        + "; ".join(f"{name} {mix}" for name, mix in mixes.items() if name.startswith("dirichlet")),
        "",
        "| mix | pre-shaping | admitted | compute served | request-path reconfigurations / 100 "
        "| quiet-period reconfigurations / 100 | their operations / 100 |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    deltas: dict[str, list[float]] = {name: [] for name in VARIANTS if name != "off"}
    admitted_deltas: dict[str, list[float]] = {name: [] for name in VARIANTS if name != "off"}
    served_deltas: dict[str, list[float]] = {name: [] for name in VARIANTS if name != "off"}
    cut_everywhere = {name: True for name in deltas}
    for mix_name, mix in mixes.items():
        rows = {name: Row() for name in VARIANTS}
        for seed in range(seeds):
            base = None
            for name, preshape in VARIANTS.items():
                run, offered = simulate(model, mix, seed, n, preshape)
                per = 100 / run.requests
                row = rows[name]
                row.admitted.append(run.admitted / run.requests)
                row.served.append(run.served / offered)
                row.reconf.append(run.reconfigurations * per)
                row.quiet.append(run.preshape_reconfigurations * per)
                row.quiet_ops.append(run.preshape_operations * per)
                if base is None:
                    base = (row.reconf[-1], row.admitted[-1], row.served[-1])
                else:
                    deltas[name].append(row.reconf[-1] - base[0])
                    admitted_deltas[name].append(100 * (row.admitted[-1] - base[1]))
                    served_deltas[name].append(100 * (row.served[-1] - base[2]))
        for name in deltas:
            if statistics.fmean(rows[name].reconf) >= statistics.fmean(rows["off"].reconf):
                cut_everywhere[name] = False
        for name, row in rows.items():
            line = (
                f"| {mix_name} | {name} | {dist(row.admitted)} | {dist(row.served)} | {dist(row.reconf, '{:.1f}')} "
                f"| {dist(row.quiet, '{:.1f}')} | {dist(row.quiet_ops, '{:.1f}')} |"
            )
            md.append(line)
            print(line, flush=True)
    md += [
        "",
        f"Change against no pre-shaping, over every mix and seed ({len(mixes) * seeds} runs each), mean "
        "(min / median / max):",
        "",
        "| pre-shaping | request-path reconfigurations / 100 | runs with fewer | every mix's mean lower "
        "| admitted, percentage points | compute served, percentage points (standard error of the mean) |",
        "|---|---:|---:|---|---:|---:|",
    ]
    for name in deltas:
        fewer = sum(1 for d in deltas[name] if d < 0)
        served = served_deltas[name]
        sem = statistics.stdev(served) / len(served) ** 0.5 if len(served) > 1 else float("nan")
        md.append(
            f"| {name} | {dist(deltas[name], '{:+.1f}')} | {fewer} of {len(deltas[name])} "
            f"| {'yes' if cut_everywhere[name] else 'no'} | {dist(admitted_deltas[name], '{:+.1f}')} "
            f"| {dist(served, '{:+.2f}')} ({sem:.2f}) |"
        )
    md.append("")
    md.append(f"Total run time: {time.perf_counter() - started:.0f} s; load average at the end: {load_average()}.")
    print("\n".join(md[-len(deltas) - 6 :]))
    print(f"wrote {write_section('preshape-fleet', chr(10).join(md), title='Pre-shaping by evidence (static MIG)')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
