#!/usr/bin/env python
"""Compaction on the online replay (issue 14): first fit, and first fit / ours with compaction, in slice-hours
served of offered and in moves.

Usage::

    python bench/compaction.py [--trace-dir DIR] [--gpus 16,24,32] [--movable 1.0,0.5] [--quick] [--out PATH]

With ``--trace-dir`` (the Alibaba cluster-trace-gpu-v2023 files; research/study-use data, read from DIR, never
copied; see bench/placement.py for the citation and the mapping to MIG) the default trace is replayed with its
creation and deletion times; without it, the synthetic Poisson workload of bench/placement.py.

Compaction here is what the portal does (allocations/services/compaction.py), on the same planner
(allocations/mig/defrag.py): a request that does not fit gets a plan of at most 2 moves of movable running
allocations (the rescue); the moves are applied at once and the request placed. A fraction ``--movable`` of the
allocations is movable (their owners said yes), drawn at random per allocation with a fixed seed. With ``beat``,
every ``BEAT_EVERY`` arrivals a plan of at most 4 moves that frees whole GPUs is applied too. Moves are counted
against the allocations admitted.

Results go to the "compaction" section of ``docs/benchmarks.md`` (or ``--out FILE``) and to stdout.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, not installed

from allocations.mig.catalog import GpuModel, load_catalog  # noqa: E402
from allocations.mig.defrag import DefragPlan, plan_defrag  # noqa: E402
from allocations.mig.demand import DemandLearner  # noqa: E402
from allocations.mig.engine import PlacementEngine, empty_fleet  # noqa: E402
from allocations.mig.fleet import Fleet, Instance, PlacementDecision, PlacementRequest, SlotChoice  # noqa: E402
from bench.compaction_oracle import Losses, OracleResult, first_fit_losses, oracle_replay  # noqa: E402
from bench.placement import (  # noqa: E402
    SHAPES,
    SYNTHETIC,
    TRACES,
    Pod,
    profile_of,
    read_trace,
    synthetic_online,
)
from bench.replay_events import replay_events  # noqa: E402
from bench.report import command_line, write_section  # noqa: E402

RESCUE_MOVES = 2
BEAT_MOVES = 4
BEAT_EVERY = 50
ORACLE_MOVES = 8  # the bounded oracle's most moves per refusal (its 2 % budget binds first)


@dataclass(frozen=True)
class Result:
    mode: str
    admitted: int
    offered: int
    served: float
    offered_sh: float
    moves: int
    rescues: int
    seconds: float

    @property
    def share(self) -> float:
        return self.served / self.offered_sh if self.offered_sh else 0.0


def _movable_view(fleet: Fleet, movable: set[str]) -> Fleet:
    """The planner's view: movable allocations' instances marked idle (the planner's "may move")."""
    for n in fleet.nodes:
        for g in n.gpus:
            g.instances = [Instance(i.profile, i.start, i.owner, idle=i.owner in movable) for i in g.instances]
    return fleet


def _apply(
    engine: PlacementEngine, plan: DefragPlan, where: dict[str, tuple[str, int, int]], profiles: dict[str, str]
) -> int:
    """Apply the plan's moves to the engine: create at the destination, then release the source."""
    for m in plan.moves:
        slot = SlotChoice(m.to_node, m.to_gpu, m.profile, m.to_start, m.reuse)
        engine.commit(PlacementDecision(m.to_node, (slot,), "move"), m.owner)
        engine.release(m.from_node, m.from_gpu, m.from_start)
        where[m.owner] = (m.to_node, m.to_gpu, m.to_start)
        profiles[m.owner] = m.profile
    return len(plan.moves)


def replay(
    model: GpuModel,
    gpus: int,
    pods: Sequence[Pod],
    policy: str,
    *,
    rescue: bool,
    beat: bool,
    movable_share: float,
    rescue_moves: int = RESCUE_MOVES,
) -> Result:
    t0 = time.process_time()
    nodes = -(-gpus // 8)
    fleet = empty_fleet(model, nodes, 8)
    extra = nodes * 8 - gpus
    if extra:
        fleet.nodes[-1].gpus = fleet.nodes[-1].gpus[: 8 - extra]
    engine = PlacementEngine(fleet, policy, DemandLearner())
    rng = random.Random(14)
    events = replay_events(pods)
    where: dict[str, tuple[str, int, int]] = {}
    profiles: dict[str, str] = {}
    movable: set[str] = set()
    admitted = moves = rescues = arrivals = 0
    served = offered_sh = 0.0
    for _, kind, k in events:
        owner = f"pod{k}"
        if kind == 0:
            if owner in where:
                engine.release(*where.pop(owner))
                movable.discard(owner)
            continue
        pod = pods[k]
        arrivals += 1
        name = profile_of(model, pod.shape)
        hours = (pod.deleted - pod.created) / 3600
        offered_sh += SHAPES[pod.shape][0] * hours
        if beat and arrivals % BEAT_EVERY == 0 and movable:
            plan = plan_defrag(_movable_view(engine.snapshot(), movable), max_moves=BEAT_MOVES)
            if plan is not None and plan.moves and plan.gpus_freed > 0:
                moves += _apply(engine, plan, where, profiles)
        d = engine.place(PlacementRequest(name), owner)
        if d is None and rescue and movable:
            plan = plan_defrag(
                _movable_view(engine.snapshot(), movable), request=PlacementRequest(name), max_moves=rescue_moves
            )
            if plan is not None and plan.moves and plan.placement is not None:
                moves += _apply(engine, plan, where, profiles)
                rescues += 1
                c = plan.placement
                d = PlacementDecision(c.node, (c,), "rescue")
                engine.commit(d, owner)
        if d is None:
            continue
        admitted += 1
        served += SHAPES[pod.shape][0] * hours
        where[owner] = (d.node, d.gpu_index, d.start)
        profiles[owner] = name
        if rng.random() < movable_share:
            movable.add(owner)
    mode = policy + (" + rescue" if rescue else "") + (" + beat" if beat else "")
    return Result(mode, admitted, len(pods), served, offered_sh, moves, rescues, time.process_time() - t0)


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _oracle_notes(
    oracles: dict[int, list[OracleResult]],
    losses: dict[int, Losses],
    base_shares: dict[int, float],
    first_fit_admitted: dict[int, int],
) -> list[str]:
    """The bound: what the oracles gain, and why first fit's refusals are lost (bench/compaction_oracle.py)."""
    lines = [
        "",
        "Oracle rows (bench/compaction_oracle.py): *optimal repack on every refusal* admits a request whenever the "
        "running requests and it can be laid out on the fleet at all (exact: allocations/mig/offline.py; unlimited "
        "moves): the most packing can do when every request that fits is admitted. It is a yardstick, not a proof: "
        "admitting a request can cost a later, longer one (first fit + rescue serves less than first fit at 24 GPUs). "
        "*Repacks of <= "
        f"{ORACLE_MOVES} moves* is first fit plus, on such a refusal, the defrag search's plan with every allocation "
        "movable, within 2 % of the allocations admitted so far. (A policy that refuses requests that fit, to keep "
        "room for later ones, is admission control, not compaction: not bounded here.)",
        "",
        "Where first fit's loss is (each refusal classified when it happens; points of offered slice-hours):",
        "",
        "| GPUs | refused | fit the fleet's free slices in total | a repack would admit | lost: over the free slices "
        "| lost: no layout holds them | lost: a repack would admit |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for gpus, loss in losses.items():
        refused = sum(loss.refused.values())
        in_total = refused - loss.refused["capacity"]
        lines.append(
            f"| {gpus} | {refused:,} | {pct(in_total / refused) if refused else 'n/a'} "
            f"| {pct(loss.refused['repack'] / refused) if refused else 'n/a'} "
            f"| {100 * loss.slice_hours['capacity'] / loss.offered_sh:.1f} points "
            f"| {100 * (loss.slice_hours['layout'] + loss.slice_hours['unproven']) / loss.offered_sh:.1f} points "
            f"| {100 * loss.slice_hours['repack'] / loss.offered_sh:.1f} points |"
        )
    if 24 in oracles and 24 in losses:
        unlimited, bounded = oracles[24]
        loss = losses[24]
        refused = sum(loss.refused.values())
        gain = 100 * (unlimited.share - base_shares[24])
        verdict = "unreachable on this trace" if gain < 3.0 else "reachable in principle"
        lines += [
            "",
            f"The bound at 24 GPUs: the target is {verdict}. An optimal repack of the whole fleet on every "
            f"refusal serves {gain:+.1f} points of offered slice-hours against first fit (it admits "
            f"{unlimited.admitted - first_fit_admitted[24]:+,} requests, but the short ones it adds hold slices that "
            "long requests arriving later then miss); with the 2 % move budget "
            f"{100 * (bounded.share - base_shares[24]):+.1f} points. The loss is not fragmentation: of first fit's "
            f"{refused:,} refusals, {pct(loss.refused['repack'] / refused)} would fit a repack "
            f"({100 * loss.slice_hours['repack'] / loss.offered_sh:.1f} points of offered slice-hours); the rest "
            f"({100 * (loss.slice_hours['layout'] + loss.slice_hours['unproven']) / loss.offered_sh:.1f} points) fit "
            "the fleet's free slices in total but no layout of the MIG rules holds them (the trace is mostly "
            "whole-GPU 7g.80gb and one-per-GPU 4g.40gb requests: a full fleet has no whole GPU left however it is "
            "packed). +3 points would take compaction recovering several times what fragmentation costs first fit "
            "here.",
        ]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace-dir", type=Path, help="cluster-trace-gpu-v2023 directory (optional)")
    parser.add_argument("--gpus", default="16,24,32", help="fleet sizes (H100 GPUs), comma-separated")
    parser.add_argument("--movable", default="1.0,0.5", help="shares of movable allocations, comma-separated")
    parser.add_argument("--quick", action="store_true", help="the first 2,000 pods only")
    parser.add_argument("--rescue-moves", type=int, default=RESCUE_MOVES, help="most moves per rescue (the portal: 2)")
    parser.add_argument("--out", type=Path, help="write the section to this file instead of docs/benchmarks.md")
    args = parser.parse_args(argv)
    model = load_catalog().model("NVIDIA H100 80GB HBM3")
    if args.trace_dir is not None:
        pods, _ = read_trace(args.trace_dir / TRACES["trace-default"])
        pods = sorted(pods, key=lambda p: p.created)
        workload = "Alibaba trace-default (creation and deletion times)"
    else:
        pods = synthetic_online(SYNTHETIC["synthetic-balanced"], 7, model, 32, 4000)
        workload = "synthetic-balanced, Poisson arrivals (no trace given)"
    if args.quick:
        pods = pods[:2000]
    lines = [
        f"Command: `{command_line()}`.",
        "",
        f"Workload: {workload}, {len(pods):,} single-GPU pods mapped to MIG profiles of the H100 as in "
        "`bench/placement.py`. Rescue: a request that does not fit gets a plan of at most "
        f"{args.rescue_moves} moves of movable "
        f"running allocations (`rescue_with_moves`); beat: every {BEAT_EVERY} arrivals a plan of at most "
        f"{BEAT_MOVES} moves that frees whole GPUs. Moves are per allocation admitted. Target (issue 14): at 24 "
        "GPUs, >= 3 points more of offered slice-hours than first-fit, moving <= 2 % of allocations.",
        "",
        "| GPUs | movable | mode | admitted | slice-hours served (of offered) | vs first-fit | moves "
        "| moves per allocation | rescues | CPU |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]

    verdicts: dict[int, tuple[float, float, str]] = {}
    oracles: dict[int, list[OracleResult]] = {}
    losses: dict[int, Losses] = {}
    base_shares: dict[int, float] = {}
    first_fit_admitted: dict[int, int] = {}

    def opts(share: float) -> dict[str, Any]:
        return {"movable_share": share, "rescue_moves": args.rescue_moves}

    for gpus in [int(g) for g in args.gpus.split(",")]:
        base = replay(model, gpus, pods, "first-fit", rescue=False, beat=False, movable_share=0.0)
        base_shares[gpus], first_fit_admitted[gpus] = base.share, base.admitted
        rows = [(0.0, base)]
        for share in [float(s) for s in args.movable.split(",")]:
            for policy in ("first-fit", "ours"):
                rows.append((share, replay(model, gpus, pods, policy, rescue=True, beat=False, **opts(share))))
            rows.append((share, replay(model, gpus, pods, "first-fit", rescue=True, beat=True, **opts(share))))
        within = [(100 * (r.share - base.share), r.moves / r.admitted, r.mode) for _, r in rows[1:] if r.admitted]
        within = [v for v in within if v[1] <= 0.02]
        if within:
            verdicts[gpus] = max(within)
        for share, r in rows:
            line = (
                f"| {gpus} | {pct(share) if r.mode != 'first-fit' else '—'} | {r.mode} "
                f"| {pct(r.admitted / r.offered)} | {r.served:,.0f} ({pct(r.share)}) "
                f"| {100 * (r.share - base.share):+.1f} points | {r.moves} "
                f"| {pct(r.moves / r.admitted) if r.admitted else 'n/a'} | {r.rescues} | {r.seconds:.1f} s |"
            )
            print(line, flush=True)
            lines.append(line)
        oracles[gpus] = [oracle_replay(model, gpus, pods), oracle_replay(model, gpus, pods, moves=ORACLE_MOVES)]
        for o in oracles[gpus]:
            shown = "unlimited" if o.moves is None else f"{o.moves}"
            per = "—" if o.moves is None else pct(o.moves / o.admitted)
            line = (
                f"| {gpus} | 100.0 % | {o.mode} | {pct(o.admitted / len(pods))} | {o.served:,.0f} ({pct(o.share)}) "
                f"| {100 * (o.share - base.share):+.1f} points | {shown} | {per} | {o.rescues or '—'} "
                f"| {o.seconds:.1f} s |"
            )
            print(line, flush=True)
            lines.append(line)
        losses[gpus] = first_fit_losses(model, gpus, pods)
    if 24 in verdicts:
        gain, moved, mode = verdicts[24]
        met = "met" if gain >= 3.0 else "not met"
        lines += [
            "",
            f"Target at 24 GPUs {met}: the best compaction mode moving <= 2 % of allocations ({mode}) serves "
            f"{gain:+.1f} points of offered slice-hours against first-fit, moving {pct(moved)} of allocations.",
        ]
    lines += _oracle_notes(oracles, losses, base_shares, first_fit_admitted)
    body = "\n".join(lines) + "\n"
    if args.out is not None:
        args.out.write_text(body)
    else:
        write_section("compaction", body, title="Compaction on the online replay (issue 14)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
