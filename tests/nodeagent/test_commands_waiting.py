"""The telemetry answer says whether MIG commands wait for the node (``commands``), so that idle agents need not
poll: counted in the database when the report is applied at once, a flag in Redis when it is queued (set after the
batch commits, cleared when the agent lists its commands). The schema documents the plain view."""

from __future__ import annotations

import os
from typing import Any

import pytest
from rest_framework.test import APIClient

from allocations.models import Node
from allocations.nodeagent import services
from allocations.nodeagent.commands import queue_agent_commands
from tests.nodeagent.payloads import T0, FakeNode
from tests.nodeagent.test_commands import PLAN

pytestmark = pytest.mark.django_db

NODE = "h100-node-0"


@pytest.fixture
def client(world: Any) -> APIClient:
    node = Node.objects.get(name=NODE)
    token = services.issue_agent_credential(node_id=node.pk, actor=world.root)[1]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def commands_in_answer(client: APIClient, agent: FakeNode, at: float) -> tuple[int, int]:
    response = client.post("/api/v1/agent/telemetry/", agent.telemetry(at), format="json")
    return response.status_code, response.json()["commands"]


def list_commands(client: APIClient) -> int:
    return len(client.get("/api/v1/agent/commands/", {"node": NODE}).json()["commands"])


@pytest.mark.parametrize("queued", [False, True], ids=["applied-at-once", "queued"])
def test_the_telemetry_answer_says_when_commands_wait(client, settings, django_capture_on_commit_callbacks, queued):
    # given
    if queued:
        settings.FATIA_INGEST_QUEUE_URL = os.environ["CACHE_URL"]
    agent = FakeNode(NODE)
    node = Node.objects.get(name=NODE)
    ok = 202 if queued else 200
    before = commands_in_answer(client, agent, T0)

    # when: a batch is queued for the node (its flag is set once it commits)
    with django_capture_on_commit_callbacks(execute=True):
        queue_agent_commands(node_id=node.pk, gpu_index=0, operations=PLAN, batch_key="reconfiguration:1")
    waiting = commands_in_answer(client, agent, T0 + 5)
    listed = list_commands(client)
    after = commands_in_answer(client, agent, T0 + 10)

    # then: told once they wait, and no more once the agent has listed them
    assert before == (ok, 0)
    assert waiting == (ok, 1 if queued else len(PLAN))
    assert listed == len(PLAN)
    assert after == (ok, 0)


def test_the_schema_documents_the_plain_telemetry_view(world):
    client = APIClient()
    schema = client.get("/api/v1/schema/", {"format": "json"}).json()
    operation = schema["paths"]["/api/v1/agent/telemetry/"]["post"]
    assert operation["operationId"] == "agent_telemetry"
    assert set(operation["responses"]) >= {"200", "202", "503"}
