"""`manage.py drain_telemetry` as the image runs it (`fatia ingest`): its own process, following the queue until
SIGTERM, applies what the web processes queue."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from allocations.models import Node
from allocations.nodeagent import services
from allocations.nodeagent.models import AgentStatus
from tests.nodeagent.payloads import T0, FakeNode

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_drain_process_applies_queued_reports_and_stops_on_sigterm(world: Any, settings: Any) -> None:
    # given: the queue on, and the worker on the test database
    settings.FATIA_INGEST_QUEUE_URL = os.environ["CACHE_URL"]
    node = Node.objects.get(name="h100-node-0")
    token = services.issue_agent_credential(node_id=node.pk, actor=world.root)[1]
    db = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "FATIA_INGEST_QUEUE_URL": os.environ["CACHE_URL"],
    }
    worker = subprocess.Popen(  # noqa: S603 -- our own interpreter and manage.py
        [sys.executable, "manage.py", "drain_telemetry"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # when: an agent reports twice
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        agent = FakeNode(node.name)
        answers = [client.post("/api/v1/agent/telemetry/", agent.telemetry(T0 + 5 * k), format="json") for k in (0, 1)]
        deadline = time.monotonic() + 60  # a guard against hanging, not a timing
        while time.monotonic() < deadline and not AgentStatus.objects.filter(node=node, last_seq=2).exists():
            time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=30)

    # then
    assert [a.status_code for a in answers] == [202, 202]
    assert AgentStatus.objects.get(node=node).last_seq == 2, stderr
    assert worker.returncode == 0, stderr
