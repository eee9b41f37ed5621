"""``python bench/placement.py --departures [--trace-dir DIR] [--quick] [--out PATH]``: issue 14's "online with
departures", written to the ``placement-departures`` section of docs/benchmarks.md (the random-mix family is
``--policy``'s section).

Hold-out discipline: the policies' constants that concern departures (``ours``' best-fit pull, ``ours-hold``'s
price of a hold) were chosen on H100, 16 and 32 GPUs, Dirichlet concentrations 0.5 and 2, seeds 0-2, 2,000
arrivals (``bench/placement_hold_rules.py``). Reported here: concentrations 0.3, 1 and 3, seeds from 1000, 5,000
arrivals, and the Alibaba trace (the workload the issue names: reported, never tuned on).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from allocations.mig.catalog import load_catalog
from allocations.mig.policies import Policy
from bench.placement import load_average, read_trace
from bench.placement_departures import HOLD_WAIT_S, Served, compute_share, poisson_pods, replay
from bench.placement_hold_outcomes import Unpriced
from bench.placement_policy_report import ALPHAS, FIRST_SEED, policies
from bench.report import command_line, write_section

ONLINE = ("first-fit", "best-fit", "hami", "ours-before", "ours", "ours-hold", "ours-hold (session 10)", "ours-rollout")
MINE = ("ours", "ours-hold", "ours-rollout")
TRACE_GPUS = (16, 24, 32)
POISSON_GPUS = (16, 32)
TUNING = (
    "Tuning set (never reported): H100, 16 and 32 GPUs, Dirichlet concentrations 0.5 and 2, 2,000 arrivals, "
    "lognormal and Pareto lifetimes: seeds 0-2 for `ours`' best-fit pull and `ours-hold`'s session-10 rule "
    "(`bench/placement_hold_rules.py --skip-family`); seeds 0-9, mean lifetimes 1 and 8 hours (independent draws "
    "since session 13) for the price of a hold by how the pool's holds ended (`bench/placement_hold_outcomes.py`; "
    "`ours-hold (session 10)`: the rule "
    "without that price). Reported below: concentrations 0.3, 1 and 3, seeds from 1000, mean lifetime 1 hour, and "
    "the Alibaba trace (named by the issue; reported, never tuned on)."
)


def online_policies() -> list[str | Policy]:
    return [Unpriced() if p == "ours-hold (session 10)" else p for p in policies(ONLINE)]


def share(runs: Sequence[float]) -> str:
    """Mean share of offered (slice-hours, or compute), in percent with two decimals: the policies differ by
    hundredths."""
    return f"{100 * statistics.fmean(runs):.2f} %"


def at_least(mine: Sequence[float], peer: Sequence[float]) -> int:
    """Runs (paired: same draw) in which ``mine`` is at least ``peer``."""
    return sum(1 for a, b in zip(mine, peer, strict=True) if a >= b)


def worst(mine: Sequence[float], peer: Sequence[float]) -> str:
    """The worst paired run of ``mine`` against ``peer``, in points."""
    return f"{100 * min(a - b for a, b in zip(mine, peer, strict=True)):+.2f}"


def spread(first: Sequence[float], best: Sequence[float]) -> str:
    """The peers' own run-to-run noise: first-fit minus best-fit on the same draws, min / max in points."""
    gaps = [a - b for a, b in zip(first, best, strict=True)]
    return f"{100 * min(gaps):+.2f} / {100 * max(gaps):+.2f}"


def main(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    started = time.perf_counter()
    h100 = load_catalog().model("NVIDIA H100 80GB HBM3")
    cmd = command_line(["bench/placement.py", *(argv if argv is not None else sys.argv[1:])])
    n_pods = 1500 if args.quick else 5000
    online_seeds = 2 if args.quick else 6
    md = [
        f"- Command: `{cmd}`",
        f"- Date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Machine: {os.cpu_count()} CPUs (nproc), Python {platform.python_version()}; load average at the start: "
        f"{load_average()}",
        f"- {TUNING}",
        "",
        "Slice-hours served (compute slices x hours of admitted pods) as a share of offered, and admitted pods. "
        f"`ours-hold` runs with a queue, as the portal would: a held pod is retried after every departure and forced "
        f"after {HOLD_WAIT_S // 60} minutes; one that no longer fits by then is lost, as a pod that does not fit on "
        "arrival is for every policy (`bench/placement_departures.py`, `replay_held`). Poisson: arrivals for 130 % "
        f"of the fleet's compute, {n_pods} per run, Dirichlet mixes over the plain shapes, lifetimes of mean one "
        "hour (lognormal sigma 1.5, Pareto shape 1.5).",
        "",
        "| workload | GPUs | " + " | ".join(ONLINE) + " |",
        "|---|---:|" + "---:|" * len(ONLINE),
    ]
    # Compute admitted (compute slices of the admitted pods over those offered): slice-hours split into this,
    # the policy's skill, and the luck of which long pods it admitted (bench/placement_poisson_runs.py), which
    # dominates single Poisson runs; a second table with the same rows, so the first keeps its columns.
    skill = [
        "",
        "Compute admitted (compute slices of the admitted pods as a share of offered; a pod's lifetime left out): "
        "the low-noise part of slice-hours, the policy's skill without the luck of which long pods it admitted "
        "(`bench/placement_poisson_runs.py`).",
        "",
        md[-2],
        md[-1],
    ]
    verdicts: list[str] = []
    if args.trace_dir is not None:
        pods, _ = read_trace(Path(args.trace_dir) / "openb_pod_list_default.csv")
        pods.sort(key=lambda p: p.created)
        for gpus in TRACE_GPUS:
            served: dict[str, Served] = {}
            compute: dict[str, float] = {}
            for p in online_policies():
                name = p if isinstance(p, str) else p.name
                admits: dict[int, int] = {}
                served[name] = replay(h100, gpus, pods, p, admits)
                compute[name] = compute_share(pods, admits)
            md.append(
                f"| trace-default | {gpus} | "
                + " | ".join(f"{100 * r.share:.2f} % ({r.admitted} pods)" for r in served.values())
                + " |"
            )
            skill.append(
                f"| trace-default | {gpus} | " + " | ".join(f"{100 * c:.2f} %" for c in compute.values()) + " |"
            )
            for mine in MINE:
                ours = served[mine]
                ok = all(ours.slice_hours >= served[p].slice_hours for p in ("first-fit", "best-fit"))
                verdicts.append(
                    f"- trace-default, {gpus} GPUs: {mine} {100 * ours.share:.2f} % vs first-fit "
                    f"{100 * served['first-fit'].share:.2f} %, best-fit {100 * served['best-fit'].share:.2f} % "
                    f"({'met' if ok else 'NOT met'}: at least both); admitted {ours.admitted} vs "
                    f"{served['first-fit'].admitted} and {served['best-fit'].admitted}; compute admitted "
                    f"{100 * compute[mine]:.2f} % vs {100 * compute['first-fit']:.2f} % and "
                    f"{100 * compute['best-fit']:.2f} %"
                )
    for tail in ("lognormal", "pareto"):
        for gpus in POISSON_GPUS:
            shares: dict[str, list[float]] = {p: [] for p in ONLINE}
            admitted: dict[str, list[int]] = {p: [] for p in ONLINE}
            compute_runs: dict[str, list[float]] = {p: [] for p in ONLINE}
            for alpha in ALPHAS:
                for seed in range(online_seeds):
                    pods = poisson_pods(h100, gpus, alpha, FIRST_SEED + seed, tail, n_pods)
                    for p in online_policies():
                        name = p if isinstance(p, str) else p.name
                        admits = {}
                        r = replay(h100, gpus, pods, p, admits)
                        shares[name].append(r.share)
                        admitted[name].append(r.admitted)
                        compute_runs[name].append(compute_share(pods, admits))
            md.append(
                f"| Poisson, {tail} durations, mean over {len(shares['ours'])} runs | {gpus} | "
                + " | ".join(f"{share(shares[p])} ({statistics.fmean(admitted[p]):.0f} pods)" for p in ONLINE)
                + " |"
            )
            skill.append(
                f"| Poisson, {tail} durations, mean over {len(compute_runs['ours'])} runs | {gpus} | "
                + " | ".join(share(compute_runs[p]) for p in ONLINE)
                + " |"
            )
            noise = spread(shares["first-fit"], shares["best-fit"])
            for mine in MINE:
                for peer in ("first-fit", "best-fit"):
                    mean_ok = statistics.fmean(shares[mine]) >= statistics.fmean(shares[peer])
                    got, peers = compute_runs[mine], compute_runs[peer]
                    verdicts.append(
                        f"- Poisson {tail}, {gpus} GPUs: {mine} >= {peer} on {at_least(shares[mine], shares[peer])} "
                        f"of {len(shares[mine])} runs, on average {'met' if mean_ok else 'NOT met'} "
                        f"({share(shares[mine])} vs {share(shares[peer])}); worst run "
                        f"{worst(shares[mine], shares[peer])} points (the peers' own spread, first-fit - best-fit "
                        f"run by run: {noise}); compute admitted >= {peer} on {at_least(got, peers)} of "
                        f"{len(got)} runs ({share(got)} vs {share(peers)}), worst run {worst(got, peers)} points"
                    )
            print(md[-1], flush=True)
    md.extend([*skill, "", *verdicts, ""])
    md.append(f"Total run time: {time.perf_counter() - started:.0f} s; load average at the end: {load_average()}.")
    print("\n".join(verdicts))
    title = "Online with departures (H100)"
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(f"# {title}\n\n" + "\n".join(md) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    else:
        print(f"wrote {write_section('placement-departures', chr(10).join(md), title=title)}")
    return 0
