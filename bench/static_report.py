"""`bench/placement.py --static`: runs bench/placement_static.py's experiments and writes their section of
docs/benchmarks.md ("Static MIG: agent mode against DynamicMIG, and pre-shaping")."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import time
from collections.abc import Sequence

from allocations.mig.catalog import load_catalog
from bench.placement import SYNTHETIC, load_average, pick_from
from bench.placement_static import UNTUNED, fill_lines, fill_static, online_lines, online_static
from bench.report import command_line, publish


def main(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    started = time.perf_counter()
    seeds = args.seeds or (3 if args.quick else 10)
    h100 = load_catalog().model("NVIDIA H100 80GB HBM3")
    mixes = {**SYNTHETIC, **UNTUNED}
    draws = {name: pick_from(list(mix), list(mix.values())) for name, mix in mixes.items()}
    cmd = command_line(["bench/placement.py", *(argv if argv is not None else sys.argv[1:])])
    md = [
        f"- Command: `{cmd}`",
        f"- Date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Machine: {os.cpu_count()} CPUs (nproc), Python {platform.python_version()}; load average at the start: "
        f"{load_average()}",
        "- Static agent mode: GPUs start carved as the GPU Operator's `all-balanced` (2 x 1g.10gb, 1 x 2g.20gb, "
        "1 x 3g.40gb, all free); a release leaves a free instance. Two strategies: `slot first (ours)`: our policy "
        "chooses GPU and slot as if free instances were empty space; a free instance of the profile at that slot is "
        "taken as it is, otherwise the free instances in the way are destroyed and the instance created (one "
        "reconfiguration). `free instance first`: a free instance of the profile anywhere is taken (first in device "
        "order); otherwise `ours` places it in empty space, or the reconfiguration planner destroys the fewest free "
        "instances (one reconfiguration either way). `free instance, else slot first`: a free instance of the profile "
        "anywhere, otherwise as `slot first`. DynamicMIG first fit: the driver's first free slot on the first "
        "GPU that fits. The `untuned-*` mixes were never used to tune the policy.",
        "",
    ]

    def emit(lines: list[str]) -> None:
        md.extend([*lines, ""])
        print("\n".join(lines), flush=True)

    for gpus in (8, 16):
        rows = fill_static(h100, gpus, draws, seeds)
        emit(fill_lines(f"Static agent mode against DynamicMIG first fit: fill-until-full, {gpus} x H100", rows, seeds))
    online_mixes = {
        name: mixes[name] for name in ("synthetic-small", "synthetic-balanced", "untuned-1g-heavy", "untuned-uniform")
    }
    n = 600 if args.quick else 1500
    rows_online = online_static(h100, 16, online_mixes, seeds, n)
    emit(
        online_lines(
            f"Static agent mode, online (Poisson, {n} requests, 16 x H100, 130 % load): pre-shaping off and on",
            rows_online,
            seeds,
        )
    )
    md.append(f"Total run time: {time.perf_counter() - started:.0f} s; load average at the end: {load_average()}.")
    publish(
        md,
        out=args.out,
        heading="Static MIG benchmark",
        name="placement-static",
        title="Static MIG: agent mode against DynamicMIG, and pre-shaping",
    )
    return 0
