"""The queued ingest's own processes for bench/agent.py: the drain worker, and its and Redis's CPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench import api as apibench
from bench.harness import stop_group_at_exit

ROOT = Path(__file__).resolve().parent.parent


def start_drain(env: dict[str, str], log: Path) -> int:
    """`manage.py drain_telemetry` (the image's `ingest` role); its pid."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "drain_telemetry"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    stop_group_at_exit(proc)
    return proc.pid


def cpu_ms(pid: int) -> float:
    return sum(apibench._process_cpu_ms(pid).values())


def backlog(url: str) -> int:
    import redis

    from allocations.nodeagent.ingest_queue import STREAM

    return int(redis.Redis.from_url(url).xlen(STREAM))
