"""Steering on Kubernetes, off / adaptive / always side by side (issue 14, "Steering that pays").

    python bench/steering.py                                   # 500-request burst on 100 nodes, trickle on 4
    python bench/steering.py --nodes 20 --requests 100 --no-write  # a quick look
    python bench/steering.py --modes adaptive off --seeds 7 8 9    # the trickle for three request sequences

Runs bench/provision.py once per FATIA_KUBE_STEER_SLOTS mode (each with its own PostgreSQL, Redis and control plane;
no paced runs; with --scheduler, the scheduler-alone comparison once), and writes the "steering" section of
docs/benchmarks.md: after the burst, whole GPUs left (target: adaptive no fewer than first fit, i.e. steering
off); with requests arriving one at a time, the share of `ours`' offline gain over first-fit that the cluster's
real layouts reach (target: >= 80 % with adaptive), per seed of the trickle's sequence and pooled over them (one
trickle per seed, each on fill nodes of its own; the burst once per mode).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODES = ("off", "adaptive", "always")


def run_mode(mode: str, args: argparse.Namespace, out: Path, scheduler: bool) -> dict[str, Any]:
    command = [
        sys.executable, str(ROOT / "bench" / "provision.py"), "--steer", mode, "--nodes", str(args.nodes),
        "--requests", str(args.requests), "--fill-nodes", str(args.fill_nodes), "--rates", "--no-write",
        "--json", str(out), "--fill-seeds", *(str(seed) for seed in args.seeds),
    ]  # fmt: skip
    if not scheduler:
        command.append("--no-scheduler")
    started = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT)
    print(f"steering {mode}: {time.perf_counter() - started:.0f} s")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--fill-nodes", type=int, default=4)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--seeds", type=int, nargs="+", default=[7], help="the trickle's sequences, one run each")
    parser.add_argument("--scheduler", action="store_true", help="also the scheduler-alone comparison (once)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from bench.report import command_line

    command = command_line(["bench/steering.py", *(argv if argv is not None else sys.argv[1:])])
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="fatia-bench-steering-") as tmp:
        for n, mode in enumerate(args.modes):
            # The scheduler-alone comparison does not depend on the mode: once, with the first.
            results[mode] = run_mode(mode, args, Path(tmp) / f"{mode}.json", scheduler=args.scheduler and n == 0)
            print(json.dumps(results[mode]))
    scheduler = next((r["scheduler"] for r in results.values() if r["scheduler"]), None)

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{value * 100:.0f} %"

    def seed_table(results: dict[str, dict[str, Any]]) -> list[str]:
        """Per seed of the trickle: the offline reference and, per mode, compute served and the share of `ours`'
        offline gain; pooled: the gains summed over the seeds."""
        modes = list(results)
        per_seed = {mode: {t["seed"]: t for t in r["trickles"]} for mode, r in results.items()}
        seeds = list(per_seed[modes[0]])
        rows = []
        totals = {"first-fit": 0, "ours": 0, **dict.fromkeys(modes, 0)}
        for seed in seeds:
            offline = per_seed[modes[0]][seed]["offline"]
            ff, ours = offline["first-fit"]["compute"], offline["ours"]["compute"]
            totals["first-fit"] += ff
            totals["ours"] += ours
            cells = []
            for mode in modes:
                t = per_seed[mode][seed]
                totals[mode] += t["compute"]
                cells.append(f"{t['compute']} | {pct(t['reached'])}")
            rows.append(
                f"| {seed} | {per_seed[modes[0]][seed]['requests']} | {ff} | {ours} | " + " | ".join(cells) + " |"
            )
        gain = totals["ours"] - totals["first-fit"]
        pooled = [
            f"{totals[mode]} | {pct((totals[mode] - totals['first-fit']) / gain if gain else None)}" for mode in modes
        ]
        return [
            "",
            "The trickle per seed of its request sequence (compute slices served; the share of `ours`' offline gain "
            "over first-fit that reached the cluster; pooled: gains summed over the seeds):",
            "",
            "| seed | requests | offline first-fit | offline `ours` | "
            + " | ".join(f"{mode}: served | {mode}: share" for mode in modes)
            + " |",
            "| --- | --- | --- | --- | " + " | ".join("--- | ---" for _ in modes) + " |",
            *rows,
            f"| pooled | | {totals['first-fit']} | {totals['ours']} | " + " | ".join(pooled) + " |",
        ]

    first = next(iter(results.values()))
    offline = first["offline"]
    body = [
        f"Command: `{command}`",
        "",
        f"Burst: {args.requests} single-slice requests approved back to back on {args.nodes} fake nodes x 8 H100 "
        f"(bench/provision.py's mix and setup). Trickle: {first['trickle']['requests']} requests of the same mix, "
        f"130 % of the compute of {args.fill_nodes} nodes x 8 H100 of their own, one at a time (each allocated or "
        "refused before the next), scored on what the cluster allocated (its claims). Offline, the engine alone "
        f"on the same trickle: first-fit {offline['first-fit']['compute']}, `ours` {offline['ours']['compute']} "
        "compute slices served.",
        "",
        "| steering | burst: whole GPUs left | burst: 7g.80gb fit | burst: active | burst: total | burst: p50 | "
        "burst: workers' CPU per request | burst: load average | trickle: compute served | trickle: steered | "
        "trickle: share of `ours`' offline gain | trickle: admitted before the first refusal |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *(
            f"| {mode} | {r['burst']['whole']} | {r['burst']['fits'].get('7g.80gb', 0)} | {r['burst']['active']} | "
            f"{r['burst_s']:.0f} s | {r['burst_p50_s']:.0f} s | {r['burst_cpu_ms']['Celery workers']:.0f} ms | "
            f"{r['burst_load']:.1f} | {r['trickle']['compute']} | {r['trickle']['steered']} of "
            f"{r['trickle']['admitted']} | {pct(r['reached'])} | {r['trickle']['first_refusal']} |"
            for mode, r in results.items()
        ),
        *(
            [
                f"| scheduler alone (profile only) | {scheduler['whole']} | {scheduler['fits'].get('7g.80gb', 0)} | "
                f"| | | | | | | | {scheduler['admitted']} |"
            ]
            if scheduler
            else []
        ),
        *(seed_table(results) if len(args.seeds) > 1 else []),
        "",
        "Targets: adaptive leaves no fewer whole GPUs after the burst than first fit (steering off); with requests "
        "one at a time, >= 80 % of `ours`' offline gain reaches the cluster.",
    ]
    text = "\n".join(body)
    print(text)
    if not args.no_write:
        from bench.report import write_section

        print(f"wrote {write_section('steering', text, title='Steering on Kubernetes (issue 14)')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
