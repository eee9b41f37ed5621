"""The queued ingest's own processes for bench/agent.py: a private Redis and the drain worker, with their CPU."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import api as apibench

ROOT = Path(__file__).resolve().parent.parent


def start_redis() -> tuple[str, int]:
    """redis-server on loopback, no persistence (as deploy/test.sh runs it); its URL and pid."""
    port = apibench.free_port()
    run_dir = Path(tempfile.mkdtemp(prefix="fatia-bench-redis-"))
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        + ["--dir", str(run_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    apibench._cleanups.append(lambda: (proc.terminate(), proc.wait(10)))
    for _ in range(100):
        if subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True, check=False).returncode == 0:
            break
        time.sleep(0.1)
    apibench.log(f"private Redis on 127.0.0.1:{port}")
    return f"redis://127.0.0.1:{port}/0", proc.pid


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

    def stop() -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)

    apibench._cleanups.append(stop)
    return proc.pid


def cpu_ms(pid: int) -> float:
    return sum(apibench._process_cpu_ms(pid).values())


def backlog(url: str) -> int:
    import redis

    from allocations.nodeagent.ingest_queue import STREAM

    return int(redis.Redis.from_url(url).xlen(STREAM))
