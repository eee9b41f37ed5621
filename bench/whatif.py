#!/usr/bin/env python
"""What-if answers (issue 14) on large pools: how long each of the three takes, from the pure functions.

Usage::

    python bench/whatif.py [--gpus 64,512] [--out PATH]

Each pool is H100s, 8 per node, filled by the ``ours`` policy with random single-slice requests (seed 1) until
four times its GPUs' worth of requests have been refused; 200 queued and 200 refused requests of random profiles
wait. Timed: "add 64 GPUs", "double a quota" (one tenant of four, its 50 of the 200 queued requests) and "best
mix". The database reads the API adds are not included (bench/api.py measures endpoints). Results go to the
"what-if" section of ``docs/benchmarks.md`` (or ``--out FILE``) and to stdout.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, not installed

from allocations.mig.catalog import load_catalog  # noqa: E402
from allocations.mig.demand import DemandMix  # noqa: E402
from allocations.mig.engine import PlacementEngine, empty_fleet  # noqa: E402
from allocations.mig.fleet import Fleet, PlacementRequest  # noqa: E402
from allocations.planning.add_gpus import what_if_add_gpus  # noqa: E402
from allocations.planning.mix import best_mix  # noqa: E402
from allocations.planning.quota import Limits, Queued, TenantQuota, what_if_quota  # noqa: E402
from allocations.planning.replay import Ask  # noqa: E402
from allocations.queue_order import Waiting  # noqa: E402
from bench.report import command_line, write_section  # noqa: E402

MODEL = "NVIDIA H100 80GB HBM3"
PROFILES = ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
WAITING = 200
T = TypeVar("T")


def filled(gpus: int, rng: random.Random) -> Fleet:
    model = load_catalog().model(MODEL)
    engine = PlacementEngine(empty_fleet(model, gpus // 8, 8, "p"), "ours", DemandMix())
    refused = n = 0
    while refused < 4 * gpus:
        n += 1
        if engine.place(PlacementRequest(rng.choice(PROFILES), 1, "p"), owner=f"a{n}") is None:
            refused += 1
    return engine.snapshot()


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def measure(gpus: int) -> list[str]:
    rng = random.Random(1)
    model = load_catalog().model(MODEL)
    fleet = filled(gpus, rng)
    queued = [Ask(str(i), i % 4, rng.choice(PROFILES), 1) for i in range(WAITING)]
    refused = [Ask(f"r{i}", i % 4, rng.choice(PROFILES), 1) for i in range(WAITING)]
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    queue = [
        Queued(
            a, Waiting(int(a.key), a.tenant_id, 0, t0 + timedelta(seconds=i), model.profile(a.profile).compute_slices)
        )
        for i, a in enumerate(queued)
    ]
    quota = TenantQuota(Limits(gpus * 7 // 4, gpus * 8 // 4), 0, 0, {}, {})
    add_s, added = timed(
        lambda: what_if_add_gpus(
            fleet,
            pool="p",
            offered=PROFILES,
            model=model,
            count=64,
            gpus_per_node=8,
            queued=queued,
            refused=refused,
            demand=DemandMix(),
        )
    )
    quota_s, _ = timed(
        lambda: what_if_quota(
            fleet,
            pool="p",
            offered=PROFILES,
            model=model,
            tenant_id=0,
            quota=quota,
            new_limits=Limits(quota.limits.compute * 2, quota.limits.memory * 2),
            queue=queue,
            usage={t: 1.0 for t in range(4)},
            quotas={t: quota.limits.compute for t in range(4)},
            pending=[],
            demand=DemandMix(),
        )
    )
    mix_s, mixed = timed(lambda: best_mix(fleet, model=model, offered=PROFILES, mix=DemandMix()))
    served, moves = added.queued_after.served_requests, mixed.moves
    return [
        f"| {gpus} | {add_s * 1000:.0f} ms ({served} of {WAITING} queued served) | {quota_s * 1000:.0f} ms "
        f"| {mix_s * 1000:.0f} ms ({moves} moves to the best mix) |"
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", default="64,512")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    rows = ["| GPUs | add 64 GPUs | double a quota | best mix |", "|---:|---:|---:|---:|"]
    for gpus in (int(g) for g in args.gpus.split(",")):
        rows += measure(gpus)
    body = (
        f"Command: `{command_line(argv if argv is not None else sys.argv)}`.\n\n"
        "H100 pools filled by `ours` with random single slices; 200 queued and 200 refused requests wait. "
        "Pure computation (allocations/planning/), one run each, without the API's database reads.\n\n"
        + "\n".join(rows)
    )
    print(body)
    if args.out:
        args.out.write_text(body + "\n")
    else:
        write_section("what-if", body, title="What-if answers (issue 14)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
