"""REST API benchmark: throughput and latency of listing and creating allocations over real HTTP.

    python bench/api.py                                        # python: a venv with `pip install -e ".[dev]"`
    python bench/api.py --duration 5 --tenants 5 --no-write    # a quick look, docs left alone

What it does, in order:

1. A database (bench/harness.py). Without DATABASE_URL it starts a private PostgreSQL like deploy/test.sh
   does (initdb and pg_ctl as the `postgres` user when run as root, loopback only, a free port, fsync off)
   and removes it on exit. With DATABASE_URL it creates a fresh database `fatia_bench_<pid>` on that server
   (the role needs CREATEDB) and drops it on exit, so an existing database is never touched.
2. Data, through the services: a staff user, a pool "h100" (2 nodes x 8 H100), N tenants (default 20),
   each with one member, a write API token and a large quota; the first tenant gets ~1000 requests.
3. A real server on 127.0.0.1 and a free port: the API's production server of the README by default
   (gunicorn portal.wsgi, 3 sync workers; --server asgi for portal.asgi under gunicorn's uvicorn workers,
   the server of the event streams, which docs/api-performance.md compares), DEBUG=False,
   CELERY_BROKER_URL=memory://, throttles opened wide (FATIA_THROTTLE_RATE_USER/TOKEN=1000000/min) so
   their cost is measured but nothing is refused. Tasks the services queue on commit go to that in-memory
   broker and nowhere else: no worker provisions anything.
4. Load from separate processes (Python threads, one http.client connection each, loopback only),
   bounded by time and by request count: GET /api/v1/allocations/ (a page of 50, token auth, the tenant
   with ~1000 requests) and POST /api/v1/allocations/ (token auth, spread over the N tenants, an
   Idempotency-Key on each). Requests per second, p50 and p99 latency, errors.
5. SQL queries per list page at page_size 10, 50 and 200, in-process with DRF's APIClient and
   CaptureQueriesContext (must not grow with the page).
6. A table on stdout, and the "api" section of docs/benchmarks.md rewritten (bench/report.py) unless
   --no-write. docs/api-performance.md explains the numbers and the choices behind them.

The load generator shares the machine's cores with the server and PostgreSQL, so the numbers are a
floor for what the server does on its own; the report says how many cores there were and how busy.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import http.client
import io
import json
import math
import multiprocessing
import os
import platform
import pstats
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
TARGETS = {"list_rps": 300.0, "create_rps": 100.0, "p99_ms": 150.0}
GPU_MODEL = "NVIDIA H100 80GB HBM3"
LIST_PATH = "/api/v1/allocations/"
sys.path.insert(0, str(ROOT))

from bench.harness import (  # noqa: E402
    free_port,
    install_cleanups,
    log,
    open_database,
    portal_settings,
    private_postgres_pid,
    stop_group_at_exit,
    temporary_dir,
)

# --- data --------------------------------------------------------------------------------------------


@dataclass
class World:
    pool_id: int
    list_token: str
    list_tenant_id: int
    list_rows: int
    create_tokens: list[str]
    tenants: int


def seed(*, tenants: int, list_rows: int) -> World:
    """Everything through the services, as the portal itself would create it."""
    from django.contrib.auth.models import User
    from django.core.management import call_command

    from allocations import services
    from tenants import services as tenant_services

    call_command("migrate", verbosity=0)
    root = User.objects.create_user("bench-root", is_staff=True)
    pool = services.create_node_pool(name="H100 pool", slug="h100", gpu_model=GPU_MODEL, actor=root)
    for n in range(2):
        services.register_node(pool_id=pool.pk, name=f"h100-node-{n}", gpu_count=8, actor=root)
    tokens: list[str] = []
    tenant_ids: list[int] = []
    for n in range(tenants):
        tenant = tenant_services.create_tenant(
            name=f"Bench team {n:02d}", slug=f"bench-{n:02d}", actor=root, auto_approve_max_compute_slices=4
        )
        user = User.objects.create_user(f"bench-user-{n:02d}")
        tenant_services.add_member(tenant_id=tenant.pk, username=user.username, role="member", actor=root)
        # Room for every request the benchmark makes, so creates keep taking the auto-approve path.
        services.set_tenant_quota(
            tenant_id=tenant.pk, pool_id=pool.pk, compute_slices_limit=100_000, memory_slices_limit=100_000, actor=root
        )
        _, raw = tenant_services.create_api_token(user=user, name="bench", scope="write", expires_at=None, actor=user)
        tokens.append(raw)
        tenant_ids.append(tenant.pk)
    list_user = User.objects.get(username="bench-user-00")
    started = time.perf_counter()
    profiles = ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb"]
    for n in range(list_rows):
        services.request_allocation(
            tenant_id=tenant_ids[0],
            pool_id=pool.pk,
            profile=profiles[n % len(profiles)],
            count=1 + n % 3,
            lease_hours=1 + n % 24,
            purpose=f"seeded request {n}",
            actor=list_user,
        )
    log(f"seeded {tenants} tenants and {list_rows} requests in {time.perf_counter() - started:.1f} s")
    return World(pool.pk, tokens[0], tenant_ids[0], list_rows, tokens, tenants)


# --- the server --------------------------------------------------------------------------------------


@dataclass
class Server:
    port: int
    command: str
    log: Path
    pid: int

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def start_server(kind: str, workers: int, env: dict[str, str], log: Path) -> Server:
    port = free_port()
    if kind == "asgi":
        # The production server (README): gunicorn managing uvicorn workers, portal.asgi's handler.
        cmd = [sys.executable, "-m", "gunicorn", "portal.asgi:application", "--workers", str(workers)]
        cmd += ["--worker-class", "uvicorn_worker.UvicornWorker", "--bind", f"127.0.0.1:{port}"]
        cmd += ["--log-level", "warning"]
    elif kind.startswith("gunicorn"):
        # gthread keeps connections alive (sync workers close each one after a response).
        worker = (
            ["--worker-class", "gthread", "--threads", "2"]
            if kind == "gunicorn-gthread"
            else ["--worker-class", "sync"]
        )
        cmd = [sys.executable, "-m", "gunicorn", "portal.wsgi:application", "--workers", str(workers), *worker]
        cmd += ["--bind", f"127.0.0.1:{port}", "--log-level", "warning"]
    else:
        cmd = [sys.executable, "-m", "uvicorn", "portal.asgi:application", "--workers", str(workers)]
        cmd += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-access-log"]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=out, start_new_session=True)
    server = Server(port, " ".join(shlex.quote(c) for c in ["python", *cmd[1:]]), log, proc.pid)
    stop_group_at_exit(proc)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{kind} exited with {proc.returncode}:\n{server.log_tail()}")
        with contextlib.suppress(OSError):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/api/v1/me/")
            if conn.getresponse().status in (401, 403):  # up, and answering from Django
                conn.close()
                return server
        time.sleep(0.2)
    raise SystemExit(f"{kind} did not answer within 60 s")


# --- the load generator ------------------------------------------------------------------------------


@dataclass
class LoadSpec:
    port: int
    method: str
    path: str
    tokens: list[str]
    threads: int
    start_at: float
    warmup_s: float
    duration_s: float
    max_requests: int
    body: dict[str, Any] | None = None


@dataclass
class LoadResult:
    latencies: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    errors: int = 0
    first_error: str = ""


def load_process(spec: LoadSpec) -> LoadResult:
    """One process of the load generator: `threads` connections, each a closed loop."""
    import threading

    result = LoadResult()
    lock = threading.Lock()
    measure_from = spec.start_at + spec.warmup_s
    stop_at = measure_from + spec.duration_s
    per_thread = max(1, spec.max_requests // spec.threads)

    def loop(thread_no: int) -> None:
        token = spec.tokens[thread_no % len(spec.tokens)]
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        conn = http.client.HTTPConnection("127.0.0.1", spec.port, timeout=30)
        latencies: list[float] = []
        statuses: dict[int, int] = {}
        errors = 0
        first_error = ""
        done = 0
        while time.time() < spec.start_at:
            time.sleep(0.005)
        while done < per_thread:
            now = time.time()
            if now >= stop_at:
                break
            body = None
            if spec.body is not None:
                body = json.dumps(spec.body).encode()
                headers["Content-Type"] = "application/json"
                headers["Idempotency-Key"] = str(uuid.uuid4())
            started = time.perf_counter()
            try:
                conn.request(spec.method, spec.path, body=body, headers=headers)
                response = conn.getresponse()
                response.read()
                status = response.status
            except (OSError, http.client.HTTPException) as exc:
                errors += 1
                first_error = first_error or repr(exc)
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", spec.port, timeout=30)
                continue
            elapsed = time.perf_counter() - started
            if now >= measure_from:
                latencies.append(elapsed)
                statuses[status] = statuses.get(status, 0) + 1
                done += 1
        conn.close()
        with lock:
            result.latencies.extend(latencies)
            for status, n in statuses.items():
                result.statuses[status] = result.statuses.get(status, 0) + n
            result.errors += errors
            result.first_error = result.first_error or first_error

    threads = [threading.Thread(target=loop, args=(n,)) for n in range(spec.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return result


@dataclass
class Measurement:
    name: str
    connections: int
    target_rps: float | None  # None: for information (the single-connection runs)
    requests: int
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    statuses: dict[int, int]
    errors: int
    first_error: str
    # CPU milliseconds per request of the server, PostgreSQL and the load generator (wrk runs only): unlike
    # throughput, this hardly depends on what else the machine is doing.
    cpu_ms: dict[str, float] | None = None

    def cpu_text(self) -> str:
        if not self.cpu_ms:
            return "-"
        total = sum(self.cpu_ms.values())
        return " + ".join(f"{v:.1f}" for v in self.cpu_ms.values()) + f" = {total:.1f}"


def _process_cpu_ms(root: int) -> dict[int, float]:
    """CPU time (user + system, ms) of a process and all its descendants, by pid."""
    out: dict[int, float] = {}
    todo = [root]
    tick = os.sysconf("SC_CLK_TCK")
    while todo:
        pid = todo.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[pid] = (int(fields[11]) + int(fields[12])) * 1000 / tick
            for task in Path(f"/proc/{pid}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return out


class CpuMeter:
    """CPU used by the server's and PostgreSQL's processes, and by this process's children (wrk), between
    start() and stop(). Processes that ended in between are not counted (PostgreSQL's autovacuum workers); those
    that started are counted whole (a database connection opened meanwhile)."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid
        self.pg_pid = private_postgres_pid()

    def start(self) -> None:
        self.server0 = _process_cpu_ms(self.server_pid)
        self.pg0 = _process_cpu_ms(self.pg_pid) if self.pg_pid else {}
        self.children0 = os.times()

    def stop(self, requests: int) -> dict[str, float]:
        def used(before: dict[int, float], after: dict[int, float]) -> float:
            return sum(after[pid] - before.get(pid, 0.0) for pid in after)

        children = os.times()
        load = (children.children_user + children.children_system) - (
            self.children0.children_user + self.children0.children_system
        )
        n = max(requests, 1)
        out = {"server": used(self.server0, _process_cpu_ms(self.server_pid)) / n}
        if self.pg_pid:
            out["postgres"] = used(self.pg0, _process_cpu_ms(self.pg_pid)) / n
        out["wrk"] = load * 1000 / n
        return out


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def measure(name: str, spec: LoadSpec, processes: int, target_rps: float | None) -> Measurement:
    ctx = multiprocessing.get_context("spawn")  # no forked Django state or database sockets
    specs = []
    for p in range(processes):
        part = LoadSpec(**{**spec.__dict__, "max_requests": max(1, spec.max_requests // processes)})
        part.tokens = spec.tokens[p::processes] or spec.tokens
        specs.append(part)
    with ctx.Pool(processes) as pool:
        async_results = pool.map_async(load_process, specs)
        results = async_results.get(timeout=spec.warmup_s + spec.duration_s + 120)
    latencies = sorted(x for r in results for x in r.latencies)
    statuses: dict[int, int] = {}
    for r in results:
        for status, n in r.statuses.items():
            statuses[status] = statuses.get(status, 0) + n
    # The measured window ends at the deadline or, if the count bound hit first, at the last answer.
    seconds = min(spec.duration_s, max(time.time() - spec.start_at - spec.warmup_s, 1e-9))
    return Measurement(
        name=name,
        connections=processes * spec.threads,
        target_rps=target_rps,
        requests=len(latencies),
        seconds=seconds,
        rps=len(latencies) / seconds,
        p50_ms=percentile(latencies, 0.50) * 1000,
        p99_ms=percentile(latencies, 0.99) * 1000,
        max_ms=(latencies[-1] if latencies else math.nan) * 1000,
        statuses=statuses,
        errors=sum(r.errors for r in results),
        first_error=next((r.first_error for r in results if r.first_error), ""),
    )


# --- the load generator, wrk flavour ------------------------------------------------------------------

WRK_SCRIPT = """
local tokens = {TOKENS}
local method, path, body = "METHOD", "PATH", BODY
local n, thread_no = 0, 0
function init(args)
  thread_no = tonumber(args[1] or "0") or 0
  math.randomseed(os.time() + thread_no)
end
function request()
  n = n + 1
  local headers = {["Authorization"] = "Bearer " .. tokens[(n % #tokens) + 1], ["Accept"] = "application/json"}
  if body ~= nil then
    headers["Content-Type"] = "application/json"
    headers["Idempotency-Key"] = string.format("wrk-%d-%d-%d", thread_no, n, math.random(1, 1000000000))
  end
  return wrk.format(method, path, headers, body)
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("FATIA %d %d %d %d %.1f %.1f %.1f\\n", summary.requests, e.status,
    e.connect + e.read + e.write + e.timeout, summary.duration,
    latency:percentile(50), latency:percentile(99), latency.max))
end
"""


def measure_wrk(
    name: str, spec: LoadSpec, connections: int, target_rps: float | None, meter: CpuMeter | None = None
) -> Measurement:
    """Same measurement with wrk (C, one process): it takes far less CPU than Python clients, so on a
    2-core machine more of the cores go to the server and PostgreSQL."""
    lua = (
        WRK_SCRIPT.replace("{TOKENS}", "{" + ", ".join(json.dumps(t) for t in spec.tokens) + "}")
        .replace("METHOD", spec.method)
        .replace("PATH", spec.path)
        .replace("BODY", json.dumps(json.dumps(spec.body)) if spec.body is not None else "nil")
    )
    script = Path(tempfile.mkdtemp(prefix="fatia-wrk-")) / "load.lua"
    script.write_text(lua)
    url = f"http://127.0.0.1:{spec.port}{spec.path}"
    threads = min(2, connections)

    def run(seconds: float) -> str:
        cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{max(1, round(seconds))}s", "-s", str(script), url]
        return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=seconds + 60).stdout

    if spec.warmup_s > 0:
        run(spec.warmup_s)
    if meter:
        meter.start()
    out = run(spec.duration_s)
    line = next(ln for ln in out.splitlines() if ln.startswith("FATIA "))
    requests, bad_status, socket_errors, micros, p50, p99, worst = line.split()[1:]
    cpu = meter.stop(int(requests)) if meter else None
    seconds = int(micros) / 1e6
    ok = int(requests) - int(bad_status)
    return Measurement(
        name=name,
        connections=connections,
        target_rps=target_rps,
        requests=int(requests),
        seconds=seconds,
        rps=int(requests) / seconds,
        p50_ms=float(p50) / 1000,
        p99_ms=float(p99) / 1000,
        max_ms=float(worst) / 1000,
        statuses={200 if spec.method == "GET" else 201: ok, **({500: int(bad_status)} if int(bad_status) else {})},
        errors=int(socket_errors),
        first_error="" if not int(bad_status) else "non-2xx answers (see the server log)",
        cpu_ms=cpu,
    )


# --- in-process checks -------------------------------------------------------------------------------


def list_query_counts(world: World, sizes: tuple[int, ...]) -> dict[int, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {world.list_token}")
    client.get(LIST_PATH)  # the token's last_used_at write happens at most once a minute: get it out of the way
    counts = {}
    for size in sizes:
        with CaptureQueriesContext(connection) as ctx:
            response = client.get(LIST_PATH, {"page_size": size})
        if response.status_code != 200 or len(response.json()["results"]) != min(size, world.list_rows):
            raise SystemExit(f"list page_size={size} answered {response.status_code}: {response.content[:300]!r}")
        counts[size] = len(ctx.captured_queries)
    return counts


def profile_in_process(world: World, requests: int) -> str:
    """cProfile over list and create requests through the whole Django/DRF stack, in this process."""
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {world.list_token}")
    body = {"pool": world.pool_id, "profile": "1g.10gb", "count": 1, "lease_hours": 1, "purpose": "profile"}
    client.get(LIST_PATH)
    report = io.StringIO()
    for name, call in (
        ("GET list (page of 50)", lambda: client.get(LIST_PATH)),
        ("POST create", lambda: client.post(LIST_PATH, body, format="json")),
    ):
        profiler = cProfile.Profile()
        started = time.perf_counter()
        profiler.enable()
        for _ in range(requests):
            call()
        profiler.disable()
        per_request = (time.perf_counter() - started) / requests * 1000
        report.write(f"\n### {name}: {per_request:.1f} ms per request in-process (under cProfile)\n\n```\n")
        stats = pstats.Stats(profiler, stream=report)
        stats.sort_stats("tottime").print_stats(15)
        stats.sort_stats("cumulative").print_stats(r"/(allocations|tenants|portal)/", 15)
        report.write("```\n")
    # No machine paths in the report: the project's files relative to the checkout, libraries by package.
    text = report.getvalue().replace(f"{ROOT}/", "")
    return re.sub(r"\S*/(site-packages|lib/python3\.\d+)/", "", text)


# --- the report --------------------------------------------------------------------------------------


def machine_facts() -> dict[str, str]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        pg_version = str(cursor.fetchone()[0])
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    from importlib.metadata import version  # gunicorn ships no type information

    import django

    load1, load5, _ = os.getloadavg()
    return {
        "nproc": str(len(os.sched_getaffinity(0))),
        "cpu": cpu,
        "python": platform.python_version(),
        "postgresql": pg_version,
        "django": django.get_version(),
        "gunicorn": version("gunicorn"),
        "os": f"{platform.system()} {platform.release()}",
        "load": f"{load1:.2f} (1 min), {load5:.2f} (5 min) at start",
        "cpu pressure": f"{cpu_pressure()} at start",
    }


def cpu_pressure() -> str:
    """Linux PSI: the share of the last 60 s in which some runnable task waited for a CPU."""
    try:
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return "unknown"
    fields = dict(part.split("=") for part in some.split()[1:])
    return f"{fields.get('avg60', '?')}% of the last 60 s had a task waiting for a CPU"


def verdict(m: Measurement) -> str:
    if m.target_rps is None:
        return "-"
    ok = m.rps >= m.target_rps and m.p99_ms < TARGETS["p99_ms"] and m.errors == 0 and set(m.statuses) <= {200, 201}
    return "meets" if ok else "MISSES"


def target_text(m: Measurement) -> str:
    if m.target_rps is None:
        return "(per-request cost, no load)"
    return f">= {m.target_rps:.0f} req/s, p99 < {TARGETS['p99_ms']:.0f} ms"


def results_table(ms: list[Measurement]) -> str:
    rows = [
        "| endpoint | connections | requests | req/s | p50 ms | p99 ms | max ms | statuses | errors "
        "| CPU ms/request: server + PostgreSQL + wrk | target | verdict |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- | --- |",
    ]
    for m in ms:
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(m.statuses.items()))
        rows.append(
            f"| {m.name} | {m.connections} | {m.requests} | {m.rps:.0f} | {m.p50_ms:.1f} | {m.p99_ms:.1f} | "
            f"{m.max_ms:.1f} | {statuses} | {m.errors} | {m.cpu_text()} | {target_text(m)} | {verdict(m)} |"
        )
    return "\n".join(rows)


def render(
    *,
    command: str,
    facts: dict[str, str],
    server_cmd: str,
    args: argparse.Namespace,
    world: World,
    measurements: list[Measurement],
    queries: dict[int, int],
    profile: str,
) -> str:
    constant = len(set(queries.values())) == 1
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        BEGIN,
        f"## Last run: {when}",
        "",
        "```",
        command,
        "```",
        "",
        "| machine | |",
        "| --- | --- |",
        *[f"| {k} | {v} |" for k, v in facts.items()],
        "",
        f"Server: `{server_cmd}` (DEBUG=False, CELERY_BROKER_URL=memory://: the tasks the services queue on "
        "commit go to an in-memory broker and nowhere else; throttles at 1000000/min: measured, never refusing). "
        "Load: "
        + (
            f"wrk, {args.processes * args.threads} keep-alive connections on loopback, "
            if args.load == "wrk"
            else f"{args.processes} processes x {args.threads} threads of http.client on loopback, "
        )
        + f"{args.warmup:g} s warm-up then {args.duration:g} s (at most {args.max_requests} requests) per endpoint; "
        "the load generator runs on the same cores as the server and PostgreSQL.",
        "",
        f"Data: {world.tenants} tenants, one member and one write token each; the listed tenant holds "
        f"{world.list_rows} requests (the list is measured before any create). "
        "Creates rotate over every tenant's token, 1x 1g.10gb, auto-approved inside a large quota. "
        "Each endpoint runs twice: under load (the targets apply) and over one connection, which shows what one "
        "request costs with nothing queued ahead of it. The CPU column is the processes' CPU time in the measured "
        "window divided by the requests answered: it hardly depends on what else the machine runs, so on a busy "
        "machine it says more than req/s; 2,000 divided by its total is what two idle cores could serve.",
        "",
        results_table(measurements),
        "",
        "SQL queries for one list page (in-process, DRF APIClient, token auth, CaptureQueriesContext): "
        + ", ".join(f"page_size={k}: {v}" for k, v in queries.items())
        + (" - constant." if constant else " - NOT constant: an N+1 query."),
    ]
    if profile:
        lines += [
            "",
            "<details><summary>cProfile: top 15 by own time, then the project's functions by cumulative time</summary>",
            profile,
            "</details>",
        ]
    lines.append(END)
    return "\n".join(lines) + "\n"


def write_doc(block: str) -> None:
    from bench.report import write_section

    body = block.replace(BEGIN, "").replace(END, "").replace("## Last run:", "Last run:", 1)
    print(f"wrote {write_section('api', body, title='REST API')}")


# --- main --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--list-rows", type=int, default=1000, help="requests in the listed tenant")
    parser.add_argument(
        "--server",
        choices=["asgi", "gunicorn", "gunicorn-gthread", "uvicorn"],
        default="gunicorn",
        help="gunicorn: sync workers on portal.wsgi, which serve the API in production (README); asgi: "
        "portal.asgi under gunicorn's uvicorn workers, the event streams' server; uvicorn: plain uvicorn",
    )
    parser.add_argument("--workers", type=int, default=3, help="server worker processes")
    parser.add_argument(
        "--load",
        choices=["wrk", "python"],
        default="wrk" if shutil.which("wrk") else "python",
        help="load generator: wrk (Debian package; default when installed) or Python http.client threads",
    )
    parser.add_argument("--processes", type=int, default=2, help="load generator processes")
    parser.add_argument("--threads", type=int, default=4, help="connections per load generator process")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds before measuring")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds measured per endpoint")
    parser.add_argument("--max-requests", type=int, default=20_000, help="per endpoint, all connections together")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="also cProfile N requests in-process")
    parser.add_argument("--no-write", action="store_true", help=f"do not rewrite {DOC.relative_to(ROOT)}")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    install_cleanups()
    given = os.environ.get("DATABASE_URL")
    from bench.report import command_line  # the command without this machine's paths

    command = command_line(["bench/api.py", *(argv if argv is not None else sys.argv[1:])])
    command += "   # DATABASE_URL set: a fresh database on that server" if given else "   # DATABASE_URL unset"

    database_url = open_database()
    data_dir = temporary_dir("fatia-bench-data-")
    (data_dir / "staticfiles").mkdir()
    env = {
        **os.environ,
        **portal_settings(database_url=database_url, data_dir=data_dir),
        "PYTHONPATH": str(ROOT),
        # Measure the throttles' cost without being refused (harmless where they are not configurable).
        "FATIA_THROTTLE_RATE_USER": "1000000/min",
        "FATIA_THROTTLE_RATE_TOKEN": "1000000/min",
    }
    os.environ.update(env)
    import logging

    import django

    django.setup()
    # kombu warns once that memory:// has no host name; it has none on purpose.
    logging.getLogger("kombu.connection").setLevel(logging.ERROR)
    world = seed(tenants=args.tenants, list_rows=args.list_rows)
    facts = machine_facts()
    queries = list_query_counts(world, (10, 50, 200))
    from django.db import connections

    connections.close_all()  # the server's workers get the database to themselves

    server = start_server(args.server, args.workers, env, data_dir / "server.log")
    server_cmd = server.command
    log(f"{server_cmd} on 127.0.0.1:{server.port}")
    common = {
        "port": server.port,
        "threads": args.threads,
        "warmup_s": args.warmup,
        "duration_s": args.duration,
        "max_requests": args.max_requests,
    }
    body = {"pool": world.pool_id, "profile": "1g.10gb", "count": 1, "lease_hours": 1, "purpose": "benchmark"}
    runs = [
        ("GET /api/v1/allocations/", "GET", [world.list_token], None, TARGETS["list_rps"]),
        ("POST /api/v1/allocations/", "POST", world.create_tokens, body, TARGETS["create_rps"]),
    ]
    measurements = []
    for name, method, tokens, payload, target in runs:
        for processes, threads, goal in ((args.processes, args.threads, target), (1, 1, None)):
            log(f"measuring {name} with {processes * threads} connection(s) ...")
            spec = LoadSpec(
                **{**common, "threads": threads},
                method=method,
                path=LIST_PATH,
                tokens=tokens,
                start_at=time.time() + 1.0,
                body=payload,
            )
            if args.load == "wrk":
                measurements.append(measure_wrk(name, spec, processes * threads, goal, CpuMeter(server.pid)))
            else:
                measurements.append(measure(name, spec, processes, goal))
    facts["after"] = f"load {os.getloadavg()[0]:.2f} (1 min), cpu pressure {cpu_pressure()}"
    profile = profile_in_process(world, args.profile) if args.profile else ""

    print()
    for k, v in facts.items():
        print(f"{k:>10}: {v}")
    print(f"{'server':>10}: {server_cmd}")
    print("Celery: CELERY_BROKER_URL=memory:// - tasks queued on commit go nowhere in this benchmark.\n")
    print(
        f"{'endpoint':<28} {'conns':>5} {'requests':>8} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} "
        f"{'errors':>6}  verdict"
    )
    for m in measurements:
        print(
            f"{m.name:<28} {m.connections:>5} {m.requests:>8} {m.rps:>7.0f} {m.p50_ms:>7.1f} {m.p99_ms:>7.1f} "
            f"{m.max_ms:>7.1f} {m.errors:>6}  {verdict(m)}  statuses {dict(sorted(m.statuses.items()))}"
        )
        if m.cpu_ms:
            print(f"{'':<28} CPU ms per request (server + PostgreSQL + wrk): {m.cpu_text()}")
        if m.first_error:
            print(f"{'':<28} first error: {m.first_error}")
    if any(status >= 500 for m in measurements for status in m.statuses):
        print(f"\nThe server answered 5xx; the end of its log:\n{server.log_tail()}")
    print(
        "\nSQL queries per list page: "
        + ", ".join(f"page_size={k}: {v}" for k, v in queries.items())
        + (" (constant)" if len(set(queries.values())) == 1 else " (NOT constant)")
    )
    print(f"Targets on 2 cores: list >= {TARGETS['list_rps']:.0f} req/s, create >= {TARGETS['create_rps']:.0f} req/s, "
          f"p99 < {TARGETS['p99_ms']:.0f} ms")  # fmt: skip
    if profile:
        print(profile)
    if not args.no_write:
        write_doc(
            render(
                command=command,
                facts=facts,
                server_cmd=server_cmd,
                args=args,
                world=world,
                measurements=measurements,
                queries=queries,
                profile=profile,
            )
        )
        log(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
