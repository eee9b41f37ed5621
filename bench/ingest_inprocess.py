"""Telemetry ingest's CPU per report in one process, away from the load generator and gunicorn.

    python bench/ingest_inprocess.py [--nodes 200] [--no-write]

A private PostgreSQL and Redis (as bench/agent.py starts them), N nodes x 8 GPUs with their inventory sent, then:
the telemetry view through Django's test client, queued (FATIA_INGEST_QUEUE_URL) and applied in the request; and
the drain's apply (``telemetry.apply_reports``) in batches of 10, 50 and N reports. CPU is this process's
(time.process_time), so PostgreSQL's and Redis' own CPU are not in it. Writes the "ingest-inprocess" section of
docs/benchmarks.md unless --no-write.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import agent as agentbench  # noqa: E402
from bench import api as apibench  # noqa: E402
from bench import ingest_side  # noqa: E402
from bench.report import command_line, write_section  # noqa: E402


def _body(template: str, name: str, seq: int) -> str:
    body = template.replace("@NODE@", name).replace('"uuid":"', f'"uuid":"{name[-4:]}-')
    return body.replace("@SEQ0@", str(seq)).replace("@TS0@", f"{time.time():.3f}")


def _view_ms(client: Any, credentials: list[tuple[str, str]], template: str, first_seq: int, n: int) -> float:
    bodies = [(token, _body(template, name, first_seq + k)) for k, (name, token) in enumerate(credentials * 10)][:n]
    started = time.process_time()
    for token, body in bodies:
        response = client.post(
            "/api/v1/agent/telemetry/", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
        )
        if response.status_code not in (200, 202):
            raise SystemExit(f"telemetry: HTTP {response.status_code}: {response.content[:300]!r}")
    return 1000 * (time.process_time() - started) / len(bodies)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    try:
        database = apibench.start_private_postgres()
        url, _ = ingest_side.start_redis()
        os.environ.update(
            {
                "DATABASE_URL": database,
                "CELERY_BROKER_URL": "memory://",
                "DEBUG": "False",
                "SECRET_KEY": "bench-" + "x" * 60,
                "ALLOWED_HOSTS": "testserver",
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
        from allocations.nodeagent.telemetry import Report, apply_reports

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
        _view_ms(client, credentials, template, 1, n)  # device rows made, everything warm
        inline = _view_ms(client, credentials, template, 100, n)
        settings.FATIA_INGEST_QUEUE_URL = url
        _view_ms(client, credentials, template, 200, 50)
        queued = _view_ms(client, credentials, template, 300, n)
        settings.FATIA_INGEST_QUEUE_URL = ""
        nodes = dict(Node.objects.values_list("name", "pk"))
        now = datetime.now(UTC)
        drain: dict[int, float] = {}
        for seq, size in enumerate((10, 50, n), start=1000):
            reports = [
                Report(nodes[name], json.loads(_body(template, name, seq)), now) for name, _ in credentials[:size]
            ]
            started = time.process_time()
            apply_reports(reports)
            drain[size] = 1000 * (time.process_time() - started) / size
    finally:
        apibench.run_cleanups()
    lines = [
        f"telemetry view, applied in the request: {inline:.2f} ms CPU per report",
        f"telemetry view, queued (202): {queued:.2f} ms CPU per report",
        *(f"drain apply, batches of {size}: {ms:.2f} ms CPU per report" for size, ms in drain.items()),
    ]
    print("\n".join(lines))
    if not args.no_write:
        rows = "\n".join(f"| {line.split(': ')[0]} | {line.split(': ')[1]} |" for line in lines)
        write_section(
            "ingest-inprocess",
            f"""Command: `{command_line(argv)}`

| {args.nodes} nodes, one sample of 8 GPUs x 7 MIG devices per report | this process's CPU |
| --- | --- |
{rows}

One process against a private PostgreSQL and Redis, no load generator or gunicorn; the view through Django's test
client with every middleware; PostgreSQL's and Redis' own CPU not included (bench/agent.py measures them).
""",
            title="Telemetry ingest in one process",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
