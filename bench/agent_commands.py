"""Agent command polling at fleet scale: what ``GET /api/v1/agent/commands/`` costs the portal when every node's agent
asks for its MIG commands every few seconds, and one batch's round trip.

    python bench/agent_commands.py                              # python: a venv with `pip install -e ".[dev]"`
    python bench/agent_commands.py --nodes 200 --seconds 10 --no-write   # a quick look

1. The portal as bench/agent.py starts it: a private PostgreSQL (or a fresh database on DATABASE_URL), N nodes x 8
   GPUs with one agent credential each, gunicorn with 3 sync workers (portal.wsgi, as the README runs it).
2. Idle polling: load processes send one GET per node every ``--periods`` seconds (the agent's default is 5),
   spread evenly, with no command queued (the common case: most nodes, most of the time). Latency is the client's,
   p50/p99 over the measured window after a warm-up round; the load shares the cores with the server and database.
3. One batch (measured first, on the otherwise idle portal, after a few warm-up requests): four commands queued for
   one node, then the agent's requests for them: one GET that hands them out and four result POSTs, one after
   another; their wall time.
4. A table on stdout, and the "agent-commands" section of docs/benchmarks.md rewritten unless --no-write.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import agent as agentbench  # noqa: E402
from bench import harness  # noqa: E402
from bench.report import command_line, write_section  # noqa: E402


def _load(args: tuple[int, list[tuple[float, str, str]], float, float, float, Any]) -> None:
    port, nodes, period, start_at, stop_at, out = args
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()

    def worker(chunk: list[tuple[float, str, str]]) -> None:
        nonlocal errors
        next_round = start_at
        while next_round < stop_at:
            for offset, name, token in chunk:
                delay = next_round + offset - time.time()
                if delay > 0:
                    time.sleep(delay)
                if time.time() >= stop_at:
                    break
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                started = time.perf_counter()
                try:
                    conn.request(
                        "GET", f"/api/v1/agent/commands/?node={name}", headers={"Authorization": f"Bearer {token}"}
                    )
                    response = conn.getresponse()
                    ok = response.status == 200 and json.loads(response.read()) == {"commands": []}
                except OSError:
                    ok = False
                elapsed = time.perf_counter() - started
                conn.close()
                with lock:
                    latencies.append(elapsed)
                    errors += not ok
            next_round += period

    threads = [
        threading.Thread(target=worker, args=(nodes[i : i + 25],), daemon=True) for i in range(0, len(nodes), 25)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put((latencies, errors))


def bench_polling(
    server: Any, credentials: list[tuple[str, str]], seconds: float, period: float, processes: int
) -> dict[str, Any]:
    spread = period / max(len(credentials), 1)
    with_offsets = [(i * spread, name, token) for i, (name, token) in enumerate(credentials)]
    share = [with_offsets[i::processes] for i in range(processes)]
    ctx = multiprocessing.get_context("fork")
    results: list[tuple[list[float], int]] = []
    for phase, length in (("warm-up", period), ("measured", seconds)):
        queue = ctx.Queue()
        start_at = time.time() + 1.0
        procs = [
            ctx.Process(target=_load, args=((server.port, part, period, start_at, start_at + length, queue),))
            for part in share
        ]
        for p in procs:
            p.start()
        results = [queue.get() for _ in procs]
        for p in procs:
            p.join()
        harness.log(f"polling, {phase}: {sum(len(r[0]) for r in results)} requests")
    latencies = sorted(x for r in results for x in r[0])

    def pct(p: float) -> float:
        return 1000 * latencies[min(len(latencies) - 1, int(p * len(latencies)))] if latencies else float("nan")

    return {
        "nodes": len(credentials),
        "period": period,
        "requests": len(latencies),
        "rate": len(latencies) / seconds,
        "target_rate": len(credentials) / period,
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "max_ms": 1000 * latencies[-1] if latencies else float("nan"),
        "errors": sum(r[1] for r in results),
        "server": server.command,
    }


def bench_batch(server: Any, name: str, token: str) -> dict[str, Any]:
    from allocations.mig.reconfig import Operation
    from allocations.models import Node
    from allocations.nodeagent.commands import batch_state, queue_agent_commands

    plan = [
        Operation("destroy", "1g.10gb", 0),
        Operation("destroy", "1g.10gb", 1),
        Operation("create", "2g.20gb", 0),
        Operation("create", "1g.10gb", 6),
    ]
    node = Node.objects.get(name=name)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    for _ in range(6):  # each gunicorn worker has served a request before the clock starts
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.request("GET", f"/api/v1/agent/commands/?node={name}", headers=headers)
        conn.getresponse().read()
        conn.close()
    queue_agent_commands(node_id=node.pk, gpu_index=0, operations=plan, batch_key="bench:1")
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("GET", f"/api/v1/agent/commands/?node={name}", headers=headers)
    commands = json.loads(conn.getresponse().read())["commands"]
    conn.close()
    for command in commands:
        body = {"node": name, "ok": True, "gi_id": 1, "ci_id": 0, "mig_uuid": "MIG-bench"}
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.request("POST", f"/api/v1/agent/commands/{command['id']}/result/", json.dumps(body), headers)
        conn.getresponse().read()
        conn.close()
    elapsed = time.perf_counter() - started
    return {"commands": len(commands), "ms": 1000 * elapsed, "status": batch_state(batch_key="bench:1").status}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument(
        "--periods",
        default="5,30",
        help="comma list: seconds between two polls of one agent (FATIA_AGENT_COMMAND_POLL_S)",
    )
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--load-processes", type=int, default=4)
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args(argv)
    try:
        server, credentials = agentbench.start_portal(args.nodes)
        batch = bench_batch(server, *credentials[0])
        print(f"one batch: GET + {batch['commands']} results in {batch['ms']:.1f} ms -> {batch['status']}")
        runs = []
        for period in (float(x) for x in args.periods.split(",") if x.strip()):
            p = bench_polling(server, credentials[1:], args.seconds, period, args.load_processes)
            runs.append(p)
            print(
                f"polling: {p['nodes']} nodes every {p['period']:g} s -> {p['rate']:.1f} req/s (wanted "
                f"{p['target_rate']:.1f}); p50 {p['p50_ms']:.1f} ms, p99 {p['p99_ms']:.1f} ms, "
                f"max {p['max_ms']:.1f} ms; {p['errors']} errors"
            )
        load = os.getloadavg()[0]
        print(f"load average (1 min) at the end: {load:.1f}")
    finally:
        harness.run_cleanups()
    if not args.no_write:
        rows = [
            (f"one batch of {batch['commands']}: the GET and the results, one after another", f"{batch['ms']:.1f} ms"),
        ]
        for p in runs:
            label = f"{p['nodes']} idle nodes polling every {p['period']:g} s"
            rows += [
                (f"{label}: achieved rate", f"{p['rate']:.1f} req/s of {p['target_rate']:.1f}"),
                (f"{label}: latency p50 / p99 / max", f"{p['p50_ms']:.1f} / {p['p99_ms']:.1f} / {p['max_ms']:.1f} ms"),
                (f"{label}: errors", f"{p['errors']} of {p['requests']}"),
            ]
        table = "\n".join(f"| {what} | {value} |" for what, value in rows)
        server_command = runs[0]["server"].rsplit(" --bind", 1)[0]
        body = f"""Command: `{command_line(argv)}`

| | measured |
| --- | --- |
{table}

`{server_command}` on a private PostgreSQL (fsync off), {args.load_processes} load processes on the same cores as
the server and the database (and other work on this shared machine). An idle poll is the credential lookup, its
once-a-minute `last_used_at` touch and one indexed query for the node's open commands. This load comes on top of
telemetry ingest (section "Node agent and telemetry ingest"); FATIA_AGENT_COMMAND_POLL_S trades it against how soon
a reconfiguration starts on the node. The machine's load average was {load:.1f} at the end of the run: the request
rate a small portal sustains here is a floor of the Django stack (ingest saw about the same), so where the
achieved rate falls short of the wanted one, polls wait in the queue (the latency) and the agents poll less often
than asked. At fleet scale on a small portal, poll less often, or (not built) let the telemetry answer say when a
node has commands waiting.
"""
        write_section("agent-commands", body, title="Agent command polling (static-MIG agent mode)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
