"""Live-stream benchmark: hundreds of open event streams on the ASGI server while the API list is under load,
deployed as the README says: sync workers for pages and the API, an ASGI server for /dashboard/events/.

    python bench/streams.py                                  # python: a venv with `pip install -e ".[dev]"`
    python bench/streams.py --streams 100 --no-write         # a quick look, docs left alone

What it does, in order:

1. A database and data exactly as bench/api.py does (a private PostgreSQL unless DATABASE_URL is set; 20
   tenants with one member and one write token each, ~1000 requests in the first tenant).
2. The two production servers (README), each on 127.0.0.1 and a free port: `gunicorn portal.wsgi` (3 sync
   workers) for the API, and `gunicorn -k uvicorn_worker.UvicornWorker portal.asgi:application` (1 worker)
   for the streams; the clients go to each directly, as the README's proxy rule sends them. DEBUG=False,
   CELERY_BROKER_URL=memory://, throttles opened wide (FATIA_THROTTLE_RATE_USER/TOKEN) so their cost is
   measured but nothing is refused. `--streams-on-api-server` puts the streams on one ASGI server that also
   serves the API instead (the single-server deployment, docs/api-performance.md).
3. The API list alone: GET /api/v1/allocations/, the same request and load generator as bench/api.py
   (wrk, 8 connections, token auth, a page of 50; Python clients when wrk is not installed).
4. Stream clients in a separate process (asyncio sockets, HTTP/1.1, one connection per stream), signed in
   as the 20 members and the admin in turn, behaving like the browser's EventSource: read events, and when
   the server ends a stream (every FATIA_DASHBOARD_STREAM_SECONDS, 25 s) wait the `retry:` time and
   reconnect with Last-Event-ID. First connections are spread over one stream lifetime so reconnects are
   spread too; enough clients are started that at least --streams are open at every moment despite the
   reconnect gaps (the report gives the lowest count seen). Meanwhile one request a second is created
   through the API, so streams have something to announce.
5. The API list again, the same way, while the streams are open. Also: threads of each ASGI worker and the
   database connections of both servers, to show that a stream holds neither.
6. A table on stdout, and the "streams" section of docs/benchmarks.md rewritten unless --no-write.

Everything shares the machine's cores: server, PostgreSQL, wrk and the stream clients.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import math
import multiprocessing
import os
import shutil
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import api  # noqa: E402
from bench.harness import at_exit, install_cleanups, log, open_database, portal_settings, temporary_dir  # noqa: E402

TARGET_P99_MS = 150.0
STREAM_SECONDS = 25.0
RETRY_S = 2.0


# --- the stream clients (a separate process) -------------------------------------------------------------


@dataclass
class StreamStats:
    opened: int = 0  # responses with status 200 and a text/event-stream body
    open_now: int = 0
    ended_by_server: int = 0  # streams that ended with `bye` (then reconnected)
    errors: int = 0
    first_error: str = ""
    events: dict[str, int] = field(default_factory=dict)
    samples: list[int] = field(default_factory=list)


async def _one_stream(port: int, cookie: str, first_delay: float, stats: StreamStats) -> None:
    """An EventSource: connect, read events, reconnect `retry` after the server ends the stream."""
    await asyncio.sleep(first_delay)
    last_id = ""
    while True:
        writer = None
        counted = False
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            request = (
                "GET /dashboard/events/ HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
                f"Cookie: sessionid={cookie}\r\n" + (f"Last-Event-ID: {last_id}\r\n" if last_id else "") + "\r\n"
            )
            writer.write(request.encode())
            status = await reader.readline()
            if b" 200 " not in status:
                raise ValueError(f"status {status!r}")
            while (await reader.readline()) not in (b"\r\n", b""):
                pass
            stats.opened += 1
            stats.open_now += 1
            counted = True
            buffer = b""
            while True:  # chunked transfer encoding
                size = int((await reader.readline()).split(b";")[0], 16)
                if size == 0:
                    break
                buffer += (await reader.readexactly(size + 2))[:-2]
                while b"\n\n" in buffer:
                    block, buffer = buffer.split(b"\n\n", 1)
                    for line in block.decode().split("\n"):
                        if line.startswith("id: "):
                            last_id = line[4:]
                        elif line.startswith("event: "):
                            name = line[7:]
                            stats.events[name] = stats.events.get(name, 0) + 1
            stats.ended_by_server += 1
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            stats.errors += 1
            stats.first_error = stats.first_error or repr(exc)
        finally:
            if counted:
                stats.open_now -= 1
            if writer is not None:
                writer.close()
        await asyncio.sleep(RETRY_S)


async def _run_clients(port: int, cookies: list[str], clients: int, spread_s: float, pipe: Connection) -> None:
    stats = StreamStats()
    tasks = [
        asyncio.create_task(_one_stream(port, cookies[n % len(cookies)], spread_s * n / clients, stats))
        for n in range(clients)
    ]
    loop = asyncio.get_running_loop()
    sampling = False
    while True:
        # Commands from the parent: "sample" starts recording the open count, "stop" ends the run.
        if await loop.run_in_executor(None, pipe.poll, 0.25):
            command = pipe.recv()
            if command == "stop":
                break
            if command == "sample":
                sampling = True
                stats.samples.clear()
            if command == "status":
                pipe.send({"opened": stats.opened, "open_now": stats.open_now, "errors": stats.errors})
        if sampling:
            stats.samples.append(stats.open_now)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    pipe.send(stats.__dict__)


def client_process(port: int, cookies: list[str], clients: int, spread_s: float, pipe: Connection) -> None:
    asyncio.run(_run_clients(port, cookies, clients, spread_s, pipe))


# --- the parent --------------------------------------------------------------------------------------------


def sessions_for_everyone() -> list[str]:
    """A signed-in session per bench user (the 20 members and the admin), as the login page would make."""
    from django.contrib.auth.models import User
    from django.test import Client

    cookies = []
    for user in User.objects.filter(username__startswith="bench-").order_by("username"):
        client = Client()
        client.force_login(user)
        cookies.append(client.cookies["sessionid"].value)
    return cookies


def churn(port: int, token: str, pool_id: int, stop: threading.Event, made: list[int]) -> None:
    """One request created a second through the API, so the streams have changes to announce."""
    body = json.dumps({"pool": pool_id, "profile": "1g.10gb", "count": 1, "lease_hours": 1, "purpose": "churn"})
    while not stop.wait(1.0):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        headers["Idempotency-Key"] = str(uuid.uuid4())
        with contextlib.suppress(OSError, http.client.HTTPException):
            conn.request("POST", api.LIST_PATH, body=body, headers=headers)
            if conn.getresponse().status == 201:
                made.append(1)
        conn.close()


def worker_threads(master_pid: int) -> list[int]:
    """Threads of each server worker process (children of the gunicorn master)."""
    counts = []
    for child in Path(f"/proc/{master_pid}/task/{master_pid}/children").read_text().split():
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{child}/status").read_text().splitlines():
                if line.startswith("Threads:"):
                    counts.append(int(line.split()[1]))
    return counts


def database_connections() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return int(cursor.fetchone()[0]) - 1  # not this one


def list_load(port: int, world: api.World, args: argparse.Namespace) -> api.Measurement:
    spec = api.LoadSpec(
        port=port,
        method="GET",
        path=api.LIST_PATH,
        tokens=[world.list_token],
        threads=args.connections,
        start_at=time.time(),
        warmup_s=args.warmup,
        duration_s=args.duration,
        max_requests=10**9,
    )
    if shutil.which("wrk"):
        return api.measure_wrk("GET /api/v1/allocations/", spec, args.connections, None)
    # bench/api.py's Python load generator (two processes), when wrk is not installed: it takes more CPU.
    spec.threads = max(args.connections // 2, 1)
    spec.start_at = time.time() + 1.0
    return api.measure("GET /api/v1/allocations/", spec, 2, None)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--streams", type=int, default=500, help="streams open at every moment")
    parser.add_argument("--workers", type=int, default=3, help="API server (sync) worker processes")
    parser.add_argument("--stream-workers", type=int, default=1, help="ASGI server worker processes")
    parser.add_argument(
        "--streams-on-api-server",
        action="store_true",
        help="one ASGI server (--workers) for the API and the streams, instead of two servers",
    )
    parser.add_argument("--connections", type=int, default=8, help="wrk connections on the API list")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of list load before measuring")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds the list is measured, each time")
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--list-rows", type=int, default=1000)
    parser.add_argument("--no-write", action="store_true", help="do not rewrite docs/benchmarks.md")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not shutil.which("wrk"):
        log("wrk is not installed (Debian package `wrk`): the list is loaded by Python clients instead")
    install_cleanups()
    from bench.report import command_line, write_section

    given = os.environ.get("DATABASE_URL")
    command = command_line(["bench/streams.py", *(argv if argv is not None else sys.argv[1:])])
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
        # Cookies travel over plain HTTP on loopback here.
        "SESSION_COOKIE_SECURE": "False",
        "CSRF_COOKIE_SECURE": "False",
    }
    os.environ.update(env)
    import logging

    import django

    django.setup()
    logging.getLogger("kombu.connection").setLevel(logging.ERROR)
    world = api.seed(tenants=args.tenants, list_rows=args.list_rows)
    cookies = sessions_for_everyone()
    facts = api.machine_facts()
    from django.db import connections

    connections.close_all()
    if args.streams_on_api_server:
        server = streamer = api.start_server("asgi", args.workers, env, data_dir / "server.log")
    else:
        server = api.start_server("gunicorn", args.workers, env, data_dir / "server.log")
        streamer = api.start_server("asgi", args.stream_workers, env, data_dir / "streams.log")
    servers = [server] if streamer is server else [server, streamer]
    for s in servers:
        log(f"{s.command} on 127.0.0.1:{s.port}")
    master_pid = streamer.pid

    log("measuring the API list without streams ...")
    alone = list_load(server.port, world, args)
    threads_alone = worker_threads(master_pid)

    # Enough clients that --streams are open at every moment: each is away RETRY_S of every STREAM_SECONDS + RETRY_S.
    away = RETRY_S / (STREAM_SECONDS + RETRY_S)
    clients = math.ceil(args.streams / (1 - away) + 4 * math.sqrt(args.streams * away) + 5)
    ctx = multiprocessing.get_context("spawn")
    parent_end, child_end = ctx.Pipe()
    clients_proc = ctx.Process(
        target=client_process, args=(streamer.port, cookies, clients, STREAM_SECONDS, child_end), daemon=True
    )
    clients_proc.start()
    at_exit(clients_proc.kill)
    log(f"opening {clients} stream clients over {STREAM_SECONDS:.0f} s ...")
    stop_churn = threading.Event()
    made: list[int] = []
    churner = threading.Thread(
        target=churn, args=(server.port, world.create_tokens[1], world.pool_id, stop_churn, made)
    )
    churner.start()
    deadline = time.monotonic() + STREAM_SECONDS + 30
    while True:
        time.sleep(1.0)
        parent_end.send("status")
        status = parent_end.recv()
        if status["opened"] >= clients and status["open_now"] >= args.streams:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"streams did not open: {status}\n{streamer.log_tail()}")
    log(f"{status['open_now']} streams open; measuring the API list with them ...")
    parent_end.send("sample")
    with_streams = list_load(server.port, world, args)
    threads_streams = worker_threads(master_pid)
    db_connections = database_connections()
    parent_end.send("stop")
    stats = parent_end.recv()
    stop_churn.set()
    churner.join()
    clients_proc.join(timeout=30)
    samples = stats["samples"]
    facts["after"] = f"load {os.getloadavg()[0]:.2f} (1 min), cpu pressure {api.cpu_pressure()}"

    lowest = min(samples) if samples else 0
    mean = sum(samples) / len(samples) if samples else 0.0
    events = ", ".join(f"{k}: {v}" for k, v in sorted(stats["events"].items()))
    meets = (
        lowest >= args.streams
        and with_streams.p99_ms < TARGET_P99_MS
        and with_streams.errors == 0
        and set(with_streams.statuses) <= {200}
    )
    rows = [
        "| API list | streams open (lowest / mean) | requests | req/s | p50 ms | p99 ms | max ms | statuses | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for label, m, open_text in (
        ("alone", alone, "0"),
        ("with the streams", with_streams, f"{lowest} / {mean:.0f}"),
    ):
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(m.statuses.items()))
        rows.append(
            f"| {label} | {open_text} | {m.requests} | {m.rps:.0f} | {m.p50_ms:.1f} | {m.p99_ms:.1f} | "
            f"{m.max_ms:.1f} | {statuses} | {m.errors} |"
        )
    verdict = f"Target: at least {args.streams} streams open while the list keeps p99 < {TARGET_P99_MS:.0f} ms: " + (
        "**met**." if meets else "**NOT met**."
    )
    details = [
        f"Streams: {clients} EventSource-like clients (asyncio sockets, one connection each), signed in as the "
        f"{len(cookies)} bench users in turn; {stats['opened']} stream responses opened, {stats['ended_by_server']} "
        f"ended by the server after their {STREAM_SECONDS:.0f} s and reconnected, {stats['errors']} errors"
        + (f" (first: `{stats['first_error']}`)" if stats["first_error"] else "")
        + f"; events received: {events}. Requests created through the API meanwhile: {len(made)} (one a second).",
        f"Threads of each ASGI worker: {threads_alone} without streams, {threads_streams} with them; database "
        f"connections of the server(s) with the streams open: {db_connections} (so no thread and no connection "
        "per stream).",
    ]

    print()
    for k, v in facts.items():
        print(f"{k:>12}: {v}")
    for s in servers:
        print(f"{'server':>12}: {s.command}")
    print()
    print("\n".join(rows))
    print()
    print("\n".join(details))
    print(verdict)
    if not args.no_write:
        body = "\n".join(
            [
                f"Command: `{command}`" + ("   (DATABASE_URL set: a fresh database on that server)" if given else ""),
                "",
                "| machine | |",
                "| --- | --- |",
                *[f"| {k} | {v} |" for k, v in facts.items()],
                "",
                (
                    f"One server for the API and the streams: `{server.command}`"
                    if streamer is server
                    else f"API server: `{server.command}`; stream server: `{streamer.command}`"
                )
                + " (DEBUG=False, CELERY_BROKER_URL=memory://, throttles at 1000000/min). "
                f"API list: wrk, {args.connections} connections, the request of bench/api.py, "
                f"{args.warmup:g} s warm-up then {args.duration:g} s, first alone and then with the streams open.",
                "",
                *rows,
                "",
                *details,
                "",
                verdict,
            ]
        )
        if streamer is server:
            section, title = "streams-single-server", "Live event streams, one ASGI server for the API too"
        else:
            section, title = "streams", "Live event streams on the ASGI server"
        print(f"wrote {write_section(section, body, title=title)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
