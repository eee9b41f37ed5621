"""Telemetry ingest's CPU per report in one process, away from the load generator and gunicorn.

    python bench/ingest_inprocess.py [--nodes 200] [--no-write]

A private PostgreSQL and Redis (bench/harness.py), N nodes x 8 GPUs with their inventory sent, then:
the telemetry view called as gunicorn calls it (``portal.wsgi.application``: queued, the lean dispatcher of
allocations/nodeagent/api/lean.py; inline, Django's whole stack), queued
(FATIA_INGEST_QUEUE_URL) and applied in the request; and the drain's apply (``telemetry.apply_reports``) in batches
of 10, 50 and N reports. Each figure is measured --rounds times, alternating, and reported as the smallest and the
median round: on a machine other work shares, the smallest is the closest to the code's own cost. The queued view
is measured twice: with this process's own credential cache warm, and emptied before each request (the common case
with several web workers, where a node's next report reaches another worker). CPU is this process's
(time.process_time), so PostgreSQL's and Redis' own CPU are not in it. Writes the "ingest-inprocess" section of
docs/benchmarks.md unless --no-write.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import agent as agentbench  # noqa: E402
from bench import harness  # noqa: E402
from bench.report import command_line, write_section  # noqa: E402


def _body(template: str, name: str, seq: int) -> str:
    body = template.replace("@NODE@", name).replace('"uuid":"', f'"uuid":"{name[-4:]}-')
    return body.replace("@SEQ0@", str(seq)).replace("@TS0@", f"{time.time():.3f}")


def _call(application: Any, token: str, body: bytes) -> str:
    """One POST through the WSGI application, as gunicorn makes it; the status line."""
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/api/v1/agent/telemetry/",
        "SCRIPT_NAME": "",
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": "127.0.0.1",
        "HTTP_AUTHORIZATION": f"Bearer {token}",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.url_scheme": "http",
    }
    status: list[str] = []
    answer = application(environ, lambda line, headers, exc_info=None: status.append(line))
    b"".join(answer)
    answer.close()
    return status[0]


def _view_ms(
    application: Any, credentials: list[tuple[str, str]], template: str, seq: int, before: Callable[[], object]
) -> float:
    bodies = [(token, _body(template, name, seq).encode()) for name, token in credentials]
    started = time.process_time()
    for token, body in bodies:
        before()
        status = _call(application, token, body)
        if not status.startswith(("200", "202")):
            raise SystemExit(f"telemetry: HTTP {status}")
    return 1000 * (time.process_time() - started) / len(bodies)


def _spread(values: list[float]) -> str:
    return f"{min(values):.2f} ms (median {statistics.median(values):.2f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    try:
        database = harness.start_private_postgres()
        url = harness.start_private_redis().url
        os.environ.update(
            {
                "DATABASE_URL": database,
                "CELERY_BROKER_URL": "memory://",
                "DEBUG": "False",
                "SECRET_KEY": "bench-" + "x" * 60,
                "ALLOWED_HOSTS": "testserver,127.0.0.1",
                "FATIA_DATA_DIR": tempfile.mkdtemp(prefix="fatia-ingest-bench-"),
                "DJANGO_SETTINGS_MODULE": "portal.settings",
                "FATIA_INGEST_BACKLOG_MAX": "1000000",
            }
        )
        import django

        django.setup()
        from datetime import UTC, datetime

        from django.conf import settings
        from django.test import Client

        from allocations.models import Node
        from allocations.nodeagent.authentication import forget_agent_credentials
        from allocations.nodeagent.telemetry import Report, apply_reports
        from portal.wsgi import application

        credentials = agentbench.seed(args.nodes)
        template = agentbench._template(1)
        inventory = agentbench._inventory()
        client = Client()
        for name, token in credentials:
            body = inventory.replace("@NODE@", name).replace('"uuid":"', f'"uuid":"{name[-4:]}-')
            client.post(
                "/api/v1/agent/inventory/", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
            )
        n = args.nodes
        seq = iter(range(1, 1_000_000))

        def nothing() -> None:
            pass

        _view_ms(application, credentials, template, next(seq), nothing)  # device rows made, everything warm
        figures: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            figures.setdefault("inline", []).append(_view_ms(application, credentials, template, next(seq), nothing))
        settings.FATIA_INGEST_QUEUE_URL = url
        _view_ms(application, credentials, template, next(seq), nothing)
        for _ in range(args.rounds):
            for label, before in (("queued", nothing), ("queued-cold", forget_agent_credentials)):
                figures.setdefault(label, []).append(_view_ms(application, credentials, template, next(seq), before))
        settings.FATIA_INGEST_QUEUE_URL = ""
        nodes = dict(Node.objects.values_list("name", "pk"))
        sizes = (10, 50, n)
        for _ in range(args.rounds):
            for size in sizes:
                now = datetime.now(UTC)
                number = next(seq)
                reports = [
                    Report(nodes[name], json.loads(_body(template, name, number)), now)
                    for name, _ in credentials[:size]
                ]
                started = time.process_time()
                apply_reports(reports)
                figures.setdefault(f"drain-{size}", []).append(1000 * (time.process_time() - started) / size)
    finally:
        harness.run_cleanups()
    lines = [
        f"telemetry view, applied in the request: {_spread(figures['inline'])}",
        f"telemetry view, queued (202): {_spread(figures['queued'])}",
        f"telemetry view, queued, this process's credential cache emptied first: {_spread(figures['queued-cold'])}",
        *(f"drain apply, batches of {size}: {_spread(figures[f'drain-{size}'])}" for size in sizes),
    ]
    print("\n".join(lines))
    if not args.no_write:
        rows = "\n".join(f"| {line.split(': ')[0]} | {line.split(': ')[1]} |" for line in lines)
        header = f"this process's CPU per report: smallest of {args.rounds} rounds (median)"
        load_after = os.getloadavg()[0]
        write_section(
            "ingest-inprocess",
            f"""Command: `{command_line(argv)}`

| {args.nodes} nodes, one sample of 8 GPUs x 7 MIG devices per report | {header} |
| --- | --- |
{rows}

One process against a private PostgreSQL and Redis, no load generator or gunicorn; the view called as gunicorn calls
it (`portal.wsgi.application`: queued, the lean dispatcher without Django's middleware; inline, every middleware);
PostgreSQL's and Redis' own CPU not included (bench/agent.py
measures them). The 1-minute load average (other work on this shared machine): {load_before:.1f} before,
{load_after:.1f} after.
""",
            title="Telemetry ingest in one process",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
