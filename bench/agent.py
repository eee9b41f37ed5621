"""Node agent benchmark: the agent's own cost on a full node, and the portal's ingest at fleet scale.

    python bench/agent.py                                   # python: a venv with `pip install -e ".[dev]"`
    python bench/agent.py --agent-seconds 30 --nodes 200 --ingest-seconds 20 --no-write   # a quick look

1. Agent: ``python -m agent`` as its own process, on the fake NVML (``FATIA_AGENT_FAKE_NVML``) with 8 H100 x 7
   MIG instances (each running a process), telemetry every 5 s (the default), sending to a local HTTP server
   that answers 200. CPU is the process's user + system time over the measured window (after one warm-up
   sample) as a share of one core; RSS is its resident set at the end and its peak (VmHWM). The fake NVML is
   Python, so the NVML side costs more here than libnvidia-ml would; the fake also imports the portal's MIG
   catalog (the real agent does not), which adds to RSS.
2. Ingest: a private PostgreSQL (as bench/harness.py starts one, or a fresh database on DATABASE_URL), N nodes x 8
   GPUs with one agent credential each, the portal under gunicorn (--server: 3 sync workers, portal.wsgi, as the
   image's `web` role runs it, or gthread workers that keep connections alive), and load processes that POST one
   telemetry sample per node every 5 s (a real agent payload of 8 GPUs x 7 MIG devices, about 9 KB), spread evenly
   over the period. Each simulated node keeps its connection alive as the agent does (agent/sender.py) and opens a
   new one when the server closed it (sync workers close after every answer). Latency is the client's (request to
   response, loopback), p50/p99 over the measured window; the load generator shares the cores with the server and
   PostgreSQL.
3. A table on stdout, and the "agent" section of docs/benchmarks.md rewritten unless --no-write.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import api as apibench  # noqa: E402
from bench import harness, ingest_side  # noqa: E402
from bench.report import command_line, write_section  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def full_node(gpus: int = 8) -> dict[str, Any]:
    return {
        "gpus": [
            {
                "product": "NVIDIA H100 80GB HBM3",
                "instances": [
                    {
                        "profile": "1g.10gb",
                        "start": s,
                        "sm_util": 10.0 * s,
                        "processes": [{"pid": 1000 + 10 * g + s, "used_mib": 512 * (s + 1)}],
                    }
                    for s in range(7)
                ],
            }
            for g in range(gpus)
        ]
    }


# --- 1. the agent ---------------------------------------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def bench_agent(seconds: float, interval: float) -> dict[str, Any]:
    received: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append(len(body))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    scenario = Path(tempfile.mkdtemp(prefix="fatia-agent-bench-")) / "node.json"
    scenario.write_text(json.dumps(full_node()))
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "FATIA_AGENT_PORTAL_URL": f"http://127.0.0.1:{server.server_address[1]}",
        "FATIA_AGENT_TOKEN": "fagent_bench_secret",
        "FATIA_AGENT_NODE": "bench-node",
        "FATIA_AGENT_INTERVAL_S": str(interval),
        "FATIA_AGENT_FAKE_NVML": str(scenario),
    }
    proc = subprocess.Popen([sys.executable, "-m", "agent"], cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
    try:
        time.sleep(interval + 1.0)  # start-up and the first inventory + sample are not the steady state
        cpu0, t0, sent0 = _cpu_seconds(proc.pid), time.monotonic(), len(received)
        time.sleep(seconds)
        cpu1, t1 = _cpu_seconds(proc.pid), time.monotonic()
        rss, peak = _status_kib(proc.pid, "VmRSS"), _status_kib(proc.pid, "VmHWM")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        server.shutdown()
    requests = len(received) - sent0
    return {
        "seconds": round(t1 - t0, 1),
        "cpu_percent": 100 * (cpu1 - cpu0) / (t1 - t0),
        "rss_mb": rss / 1024,
        "peak_mb": peak / 1024,
        "requests": requests,
        "bytes_per_request": (sum(received[sent0:]) / requests) if requests else 0,
    }


# --- 2. ingest ------------------------------------------------------------------------------------------------


def seed(nodes: int) -> list[tuple[str, str]]:
    """N nodes x 8 GPUs in one pool (bulk rows: seeding is not what is measured) and a credential per node."""
    from django.contrib.auth.models import User
    from django.core.management import call_command

    from allocations import services
    from allocations.models import Gpu, Node
    from allocations.nodeagent.services import issue_agent_credential

    call_command("migrate", verbosity=0)
    root = User.objects.create_user("bench-root", is_staff=True)
    pool = services.create_node_pool(name="H100", slug="h100", gpu_model="NVIDIA H100 80GB HBM3", actor=root)
    Node.objects.bulk_create([Node(pool=pool, name=f"gpu-node-{n:04d}") for n in range(nodes)])
    rows = list(Node.objects.order_by("name"))
    Gpu.objects.bulk_create([Gpu(node=node, index=i) for node in rows for i in range(8)])
    return [(node.name, issue_agent_credential(node_id=node.pk, actor=root)[1]) for node in rows]


def _template(samples: int) -> str:
    """A real telemetry payload of a full node with `samples` samples, with placeholders for what differs."""
    from agent.nvml import Nvml
    from agent.payloads import telemetry_payload, telemetry_sample
    from agent.runner import load_library

    scenario = Path(tempfile.mkdtemp(prefix="fatia-agent-bench-")) / "node.json"
    scenario.write_text(json.dumps(full_node()))
    nvml = Nvml(load_library(str(scenario)))
    nvml.sample()
    taken = [telemetry_sample(k + 1, 1.0 + k, nvml.sample()) for k in range(samples)]
    # A boot per variant: its sequence numbers start afresh, as after an agent restart.
    body = json.dumps(telemetry_payload("@NODE@", f"bench-{samples}", 0, taken), separators=(",", ":"))
    for k in range(samples):
        body = body.replace(f'"seq":{k + 1},"ts":{1.0 + k}', f'"seq":@SEQ{k}@,"ts":@TS{k}@')
    return body


def _load(args: tuple[int, list[tuple[str, str]], str, float, float, float, Any, int]) -> None:
    port, nodes, template, period, start_at, stop_at, out, first_round = args
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()
    uuids: dict[str, str] = {}

    per_request = template.count("@SEQ")

    def node_body(name: str, round_: int) -> bytes:
        # Each node reports its own devices: the UUIDs are made unique per node.
        body = uuids.get(name)
        if body is None:
            body = template.replace("@NODE@", name).replace('"uuid":"', f'"uuid":"{name[-4:]}-')
            uuids[name] = body
        now = time.time()
        for k in range(per_request):
            seq = (round_ - 1) * per_request + k + 1
            ts = now - (per_request - 1 - k) * period / per_request
            body = body.replace(f"@SEQ{k}@", str(seq)).replace(f"@TS{k}@", f"{ts:.3f}")
        return body.encode()

    def worker(chunk: list[tuple[int, str, str]]) -> None:
        nonlocal errors
        conns: dict[str, http.client.HTTPConnection] = {}
        seq = first_round - 1  # each phase goes on from the last one's numbers: no sample is a resend
        next_round = start_at
        while next_round < stop_at:
            seq += 1
            for offset, name, token in chunk:
                due = next_round + offset
                delay = due - time.time()
                if delay > 0:
                    time.sleep(delay)
                if time.time() >= stop_at:
                    break
                body = node_body(name, seq)
                started = time.perf_counter()
                ok = _send(conns, name, port, body, token)
                elapsed = time.perf_counter() - started
                with lock:
                    latencies.append(elapsed)
                    if not ok:
                        errors += 1
            next_round += period

    # Offsets spread every node of every process evenly over the period.
    threads = []
    per_thread = 25
    chunks = [nodes[i : i + per_thread] for i in range(0, len(nodes), per_thread)]
    for chunk in chunks:
        items = [(off, name, token) for off, name, token in chunk]  # type: ignore[misc]
        t = threading.Thread(target=worker, args=(items,), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    out.put((latencies, errors))


def _send(conns: dict[str, http.client.HTTPConnection], name: str, port: int, body: bytes, token: str) -> bool:
    """One report over the node's kept-alive connection, as agent/sender.py sends it: a connection the server closed
    while idle is replaced and the report sent once more; one it closes after its answer is dropped."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    for _ in range(2):
        conn = conns.get(name)
        reused = conn is not None
        if conn is None:
            conn = conns[name] = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("POST", "/api/v1/agent/telemetry/", body, headers)
            response = conn.getresponse()
            response.read()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            conns.pop(name).close()
            if reused:
                continue
            return False
        except (OSError, http.client.HTTPException):
            conns.pop(name).close()
            return False
        if response.will_close:
            conns.pop(name).close()
        return response.status in (200, 202)
    return False


def _prime(args: tuple[int, list[tuple[float, str, str]], str]) -> None:
    """Every node's inventory and first report, one after another, as an agent starts: the report creates the
    node's device rows, which the steady state (what is measured) only updates."""
    port, nodes, template = args
    inventory = _inventory()
    for _, name, token in nodes:
        node_inventory = inventory.replace("@NODE@", name).replace('"uuid":"', f'"uuid":"{name[-4:]}-')
        for path, body in (("/api/v1/agent/inventory/", node_inventory), ("/api/v1/agent/telemetry/", None)):
            if body is None:
                body = _first_report(template, name)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.request(
                "POST", path, body.encode(), {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            )
            response = conn.getresponse()
            response.read()
            conn.close()
            if response.status not in (200, 202):
                raise SystemExit(f"{path} for {name}: HTTP {response.status}")


def _first_report(template: str, name: str) -> str:
    body = template.replace("@NODE@", name).replace('"uuid":"', f'"uuid":"{name[-4:]}-')
    for k in range(template.count("@SEQ")):
        body = body.replace(f"@SEQ{k}@", str(k + 1)).replace(f"@TS{k}@", f"{time.time() - 60:.3f}")
    return body


def _inventory() -> str:
    """A full node's real inventory payload (the agent sends it before its first sample), node name a placeholder."""
    from agent.nvml import Nvml
    from agent.payloads import inventory_payload
    from agent.runner import load_library

    scenario = Path(tempfile.mkdtemp(prefix="fatia-agent-bench-")) / "node.json"
    scenario.write_text(json.dumps(full_node()))
    # Compact, as the agent sends it, and so that the per-node UUID rewrite ('"uuid":"') matches the telemetry's:
    # otherwise no reported device matches a GPU and every report pays for looking them up.
    payload = inventory_payload("@NODE@", Nvml(load_library(str(scenario))).inventory())
    return json.dumps(payload, separators=(",", ":"))


KEEP_ALIVE_S = 15
QUEUE: dict[str, Any] = {}  # queued mode: Redis URL and pid, the drain worker's pid


def start_portal(
    nodes: int, queued: bool = False, server_kind: str = "gunicorn", workers: int = 3
) -> tuple[Any, list[tuple[str, str]]]:
    database = harness.open_database()
    env = {
        **os.environ,
        "DATABASE_URL": database,
        "CELERY_BROKER_URL": "memory://",
        "DEBUG": "False",
        "SECRET_KEY": "bench-" + "x" * 60,
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "FATIA_DATA_DIR": tempfile.mkdtemp(prefix="fatia-agent-bench-data-"),
    }
    if queued:
        redis = harness.start_private_redis()
        QUEUE["url"], QUEUE["redis_pid"] = redis.url, redis.pid
        env["FATIA_INGEST_QUEUE_URL"] = QUEUE["url"]
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    started = time.perf_counter()
    credentials = seed(nodes)
    harness.log(f"seeded {nodes} nodes x 8 GPUs with credentials in {time.perf_counter() - started:.1f} s")
    from django.db import connections

    connections.close_all()
    server_env = dict(env)
    if server_kind == "gunicorn-gthread":
        # Idle connections kept past one telemetry period (gunicorn's default keep-alive is 2 s), as a load
        # balancer's would be.
        server_env["GUNICORN_CMD_ARGS"] = f"--keep-alive {KEEP_ALIVE_S}"
    server = apibench.start_server(server_kind, workers, server_env, Path(tempfile.mkdtemp()) / "gunicorn.log")
    if queued:
        QUEUE["drain_pid"] = ingest_side.start_drain(env, Path(tempfile.mkdtemp()) / "drain.log")
    return server, credentials


def _wait_drained(what: str) -> None:
    """Queued mode: until the drain worker has applied everything accepted (device rows exist, say)."""
    if not QUEUE:
        return
    started = time.perf_counter()
    while ingest_side.backlog(QUEUE["url"]):
        time.sleep(0.5)
    harness.log(f"{what}: queue drained {time.perf_counter() - started:.1f} s later")


def bench_ingest(
    server: Any,
    credentials: list[tuple[str, str]],
    seconds: float,
    period: float,
    processes: int,
    samples: int,
    first_round: int = 1,
) -> dict[str, Any]:
    """Every node sends `samples` samples every `period` seconds (a first round warms up, then `seconds` count)."""
    template = _template(samples)
    nodes = len(credentials)
    spread = period / max(nodes, 1)
    with_offsets = [(i * spread, name, token) for i, (name, token) in enumerate(credentials)]
    share = [with_offsets[i::processes] for i in range(processes)]
    ctx = multiprocessing.get_context("fork")
    started = time.perf_counter()
    first = first_round == 1  # a repeat goes on where the last run of the same variant stopped
    primers = [ctx.Process(target=_prime, args=((server.port, part, template),)) for part in share if first]
    for p in primers:
        p.start()
    for p in primers:
        p.join()
    if first:
        harness.log(
            f"{samples} sample(s) per request: every node's first report in {time.perf_counter() - started:.1f} s"
        )
        _wait_drained("first reports")
    results: list[tuple[list[float], int]] = []
    meter = apibench.CpuMeter(server.pid)
    rounds = 2 + int((period + seconds) // period)
    warm, measured = first_round + 1, first_round + 1 + rounds
    for phase, length, base in (("warm-up", period, warm), ("measured", seconds, measured)):
        queue = ctx.Queue()
        start_at = time.time() + 1.0
        stop_at = start_at + length
        procs = [
            ctx.Process(target=_load, args=((server.port, part, template, period, start_at, stop_at, queue, base),))
            for part in share
        ]
        load_before = os.getloadavg()[0]
        for p in procs:
            p.start()
        if phase == "measured":
            time.sleep(1.0)  # the meter starts with the load
            meter.start()
            extra0 = _queue_cpu()
            backlog0 = ingest_side.backlog(QUEUE["url"]) if QUEUE else 0
            window0 = time.monotonic()
        results = [queue.get() for _ in procs]
        for p in procs:
            p.join()  # the load processes' CPU counts once they are reaped
        if phase == "measured":
            done = sum(len(r[0]) for r in results)
            cpu = meter.stop(done)
            extra = {k: (v - extra0[k]) / max(done, 1) for k, v in _queue_cpu().items()}
            backlog1 = ingest_side.backlog(QUEUE["url"]) if QUEUE else 0
            window = time.monotonic() - window0
        harness.log(f"{samples} sample(s) per request, {phase}: {sum(len(r[0]) for r in results)} requests")
    latencies = sorted(x for r in results for x in r[0])
    errors = sum(r[1] for r in results)

    def pct(p: float) -> float:
        return 1000 * latencies[min(len(latencies) - 1, int(p * len(latencies)))] if latencies else float("nan")

    return {
        "nodes": nodes,
        "samples": samples,
        "period": period,
        "seconds": seconds,
        "requests": len(latencies),
        "rate": len(latencies) / seconds,
        "target_rate": nodes / period,
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "max_ms": 1000 * latencies[-1] if latencies else float("nan"),
        "errors": errors,
        "server": server.command,
        "body_bytes": len(template),
        # CPU per request (ms) of the web workers, PostgreSQL and the load processes over the measured window
        "cpu_web_ms": cpu["server"],
        "cpu_db_ms": cpu["postgres"],
        "cpu_load_ms": cpu["wrk"],
        "cpu_drain_ms": extra.get("drain", 0.0),
        "cpu_redis_ms": extra.get("redis", 0.0),
        "backlog_growth": backlog1 - backlog0,
        # reports the drain worker applied per second over the window (accepted minus what the queue grew by)
        "applied_rate": (done - (backlog1 - backlog0)) / window if window else float("nan"),
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "next_round": measured + rounds + 1,
    }


def _queue_cpu() -> dict[str, float]:
    if not QUEUE:
        return {}
    return {"drain": ingest_side.cpu_ms(QUEUE["drain_pid"]), "redis": ingest_side.cpu_ms(QUEUE["redis_pid"])}


def summarise(repeats: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the repeats, with each figure's range; the server's capacity from its CPU per request."""
    out = dict(repeats[0])
    keys = ("rate", "p50_ms", "p99_ms", "max_ms", "cpu_web_ms", "cpu_db_ms", "cpu_load_ms", "cpu_drain_ms")
    for key in (*keys, "cpu_redis_ms", "applied_rate"):
        values = sorted(r[key] for r in repeats)
        out[key] = statistics.median(values)
        out[f"{key}_range"] = (values[0], values[-1])
    out["errors"] = sum(r["errors"] for r in repeats)
    out["requests"] = sum(r["requests"] for r in repeats)
    out["loads"] = [round(r["load_before"], 1) for r in repeats]
    out["repeats"] = len(repeats)
    server_ms = out["cpu_web_ms"] + out["cpu_db_ms"] + out["cpu_drain_ms"] + out["cpu_redis_ms"]
    out["server_ms"] = server_ms
    out["capacity_2_cores"] = 2000 / server_ms if server_ms else float("nan")
    out["cores_for_target"] = out["target_rate"] * server_ms / 1000
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agent-seconds", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=5.0, help="telemetry period (agent and load)")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--ingest-seconds", type=float, default=60.0)
    parser.add_argument(
        "--samples-per-request",
        default="1,6",
        help="comma list: 1 = every sample sent at once (FATIA_AGENT_SEND_INTERVAL_S=0); 6 = six samples every "
        "30 s (FATIA_AGENT_SEND_INTERVAL_S=30)",
    )
    parser.add_argument("--load-processes", type=int, default=4)
    parser.add_argument(
        "--mode",
        choices=("queued", "inline"),
        default="queued",
        help="queued: accept into Redis (202) and a drain worker applies batches (FATIA_INGEST_QUEUE_URL); inline: "
        "each report applied in its request (200)",
    )
    parser.add_argument(
        "--server",
        choices=("gunicorn", "gunicorn-gthread"),
        default="gunicorn",
        help="gunicorn: sync workers, a connection per request (the image's web role); gunicorn-gthread: 2 threads "
        f"per worker, connections kept alive {KEEP_ALIVE_S} s",
    )
    parser.add_argument("--workers", type=int, default=3, help="gunicorn workers")
    parser.add_argument("--repeat", type=int, default=3, help="measured windows per variant: median and range")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args(argv)
    variants = [int(n) for n in args.samples_per_request.split(",") if n.strip()]
    runs = []
    try:
        agent = bench_agent(args.agent_seconds, args.interval)
        print(
            f"agent: {agent['cpu_percent']:.2f} % of one core over {agent['seconds']} s, RSS {agent['rss_mb']:.1f} MB "
            f"(peak {agent['peak_mb']:.1f} MB), {agent['requests']} requests of {agent['bytes_per_request']:.0f} B"
        )
        server, credentials = start_portal(
            args.nodes, queued=args.mode == "queued", server_kind=args.server, workers=args.workers
        )
        for n in variants:
            repeats, first_round = [], 1
            for _ in range(args.repeat):
                i = bench_ingest(
                    server, credentials, args.ingest_seconds, args.interval * n, args.load_processes, n, first_round
                )
                first_round = i["next_round"]
                repeats.append(i)
                print(
                    f"ingest: {i['nodes']} nodes, {n} sample(s) every {i['period']:g} s -> {i['rate']:.1f} req/s "
                    f"(wanted {i['target_rate']:.1f}); p50 {i['p50_ms']:.1f} ms, p99 {i['p99_ms']:.1f} ms, "
                    f"max {i['max_ms']:.1f} ms; {i['errors']} errors; CPU per request: web {i['cpu_web_ms']:.1f} ms, "
                    f"PostgreSQL {i['cpu_db_ms']:.1f} ms, drain {i['cpu_drain_ms']:.1f} ms, Redis "
                    f"{i['cpu_redis_ms']:.2f} ms, load {i['cpu_load_ms']:.1f} ms; applied {i['applied_rate']:.1f}/s "
                    f"(queue grew by {i['backlog_growth']}); load average {i['load_before']:.1f} -> "
                    f"{i['load_after']:.1f}"
                )
            runs.append(summarise(repeats))
    finally:
        harness.run_cleanups()
    if not args.no_write:
        a, every = agent, f"{args.interval:g} s"
        rows = [
            (
                "agent CPU, 8 GPUs x 7 MIG instances, telemetry every " + every,
                f"{a['cpu_percent']:.2f} % of a core",
                "< 2 %",
            ),
            ("agent RSS (peak)", f"{a['rss_mb']:.1f} MB ({a['peak_mb']:.1f} MB)", "< 60 MB"),
            ("agent request size (one sample, 8 x 7 devices)", f"{a['bytes_per_request']:.0f} B", ""),
        ]

        def spread(i: dict[str, Any], key: str, unit: str = "") -> str:
            low, high = i[f"{key}_range"]
            return f"{i[key]:.1f}{unit} ({low:.1f}-{high:.1f})"

        for i in runs:
            label = (
                f"ingest ({args.mode}), {i['nodes']} nodes sampling every {every}, {i['samples']} sample(s) per request"
            )
            rows += [
                (f"{label}: achieved rate", f"{spread(i, 'rate')} req/s of {i['target_rate']:.1f}", "sustained"),
                (f"{label}: applied by the drain worker", f"{spread(i, 'applied_rate')} reports/s", "= accepted"),
                (f"{label}: latency p50", spread(i, "p50_ms", " ms"), ""),
                (f"{label}: latency p99", spread(i, "p99_ms", " ms"), "< 100 ms"),
                (f"{label}: errors", f"{i['errors']} of {i['requests']}", "0"),
                (
                    f"{label}: CPU per request, web / drain worker / PostgreSQL / Redis / load generator",
                    f"{spread(i, 'cpu_web_ms', ' ms')} / {spread(i, 'cpu_drain_ms', ' ms')} / "
                    f"{spread(i, 'cpu_db_ms', ' ms')} / {i['cpu_redis_ms']:.2f} ms / {spread(i, 'cpu_load_ms', ' ms')}",
                    "",
                ),
                (
                    f"{label}: server capacity (web + drain + PostgreSQL + Redis CPU)",
                    f"{i['capacity_2_cores']:.0f} req/s on 2 cores; {i['cores_for_target']:.1f} cores for "
                    f"{i['target_rate']:.0f} req/s",
                    "",
                ),
            ]
        loads = "; ".join(f"{i['samples']} per request: {', '.join(str(x) for x in i['loads'])}" for i in runs)
        table = "\n".join(f"| {what} | {value} | {target} |" for what, value, target in rows)
        server_command = runs[0]["server"].rsplit(" --bind", 1)[0] if runs else ""
        if args.server == "gunicorn-gthread":
            server_command += f" --keep-alive {KEEP_ALIVE_S}"
        body = f"""Command: `{command_line(argv)}`

| | measured | target |
| --- | --- | --- |
{table}

Ingest figures are medians of {args.repeat} measured windows of {args.ingest_seconds:g} s (range in brackets),
after every node's first report (which creates its device rows) and a warm-up round. The 1-minute load average
before each window (other work on this shared machine included): {loads}. Capacity is 2 cores' worth of CPU
divided by the server side's CPU per request (web workers, the drain worker, PostgreSQL and Redis), measured from
/proc over the window: what the server side needs, whatever else shares the machine. Mode `{args.mode}`: queued is
accept-then-apply (the web process checks a report, appends it to a Redis stream and answers 202; `manage.py
drain_telemetry` applies batches of queued reports, several nodes in one transaction); inline applies each report
in its request (200). Latency is the request's, so in queued mode it does not include the apply; "applied" says
whether the drain worker kept up.

The agent ran on the fake NVML (Python, so dearer than libnvidia-ml; it also loads the portal's MIG catalog, which
the real agent does not). Ingest: `{server_command}`, a private PostgreSQL (fsync off), {args.load_processes} load
processes on the same 2 cores as the server and the database, each simulated node keeping its connection alive as
the agent does (sync workers close it after every answer, so there each report opens one), each sample 8 GPUs x 7
MIG devices; one sample per
request is the agent's default (FATIA_AGENT_SEND_INTERVAL_S=0), six per request FATIA_AGENT_SEND_INTERVAL_S=30
(figures up to 30 s late, a sixth of the requests). docs/agent.md, "Telemetry ingest", says where the time goes.
"""
        write_section("agent", body, title="Node agent and telemetry ingest")
    return 0


if __name__ == "__main__":
    sys.exit(main())
