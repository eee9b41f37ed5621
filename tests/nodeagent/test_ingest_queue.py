"""Accept-then-apply telemetry (package `ingest`): the plain view queues a checked report in a real Redis stream and
answers 202; the drain worker applies queued reports of several nodes in one transaction, each sample once, also
after a crash between accepting and applying; a full queue answers 503 with Retry-After; refusals queue nothing."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from allocations.models import Node
from allocations.nodeagent import ingest_queue, services
from allocations.nodeagent.drain import drain_telemetry
from allocations.nodeagent.models import AgentCredential, AgentStatus, DeviceRollup, DeviceState
from allocations.nodeagent.telemetry import Report, apply_reports
from tests.nodeagent.payloads import T0, FakeNode

pytestmark = pytest.mark.django_db

NODES = ("h100-node-0", "h100-node-1")


@pytest.fixture
def queue(settings: Any) -> None:
    # The test runner's Redis (database 1, emptied before each test by tests/conftest.py's empty_cache).
    settings.FATIA_INGEST_QUEUE_URL = os.environ["CACHE_URL"]
    settings.FATIA_INGEST_CLAIM_IDLE_S = 30


@pytest.fixture
def tokens(world: Any, queue: None) -> dict[str, str]:
    return {
        name: services.issue_agent_credential(node_id=Node.objects.get(name=name).pk, actor=world.root)[1]
        for name in NODES
    }


def post(token: str, payload: Any) -> Any:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client.post("/api/v1/agent/telemetry/", payload, format="json")


def minute_samples(node_name: str) -> list[int]:
    return list(
        DeviceState.objects.filter(node__name=node_name, kind="mig")
        .order_by("uuid")
        .values_list("minute_samples", flat=True)
    )


def drain_all(consumer: str = "drain") -> int:
    total = 0
    while (done := drain_telemetry(consumer=consumer, count=100)).reports or done.buried:
        total += done.reports
    return total


def test_a_report_is_queued_with_202_and_applied_by_the_drain(tokens):
    # given
    agent = FakeNode("h100-node-0")

    # when
    response = post(tokens["h100-node-0"], agent.telemetry(T0, T0 + 5))

    # then: queued, nothing written yet
    assert (response.status_code, response.json()) == (202, {"queued": 2, "commands": 0})
    assert ingest_queue.backlog() == 1
    assert not DeviceState.objects.exists()

    # and when the worker drains
    assert drain_all() == 1

    # then: applied, the queue is empty, and the agent was last seen when its report was accepted
    status = AgentStatus.objects.get(node__name="h100-node-0")
    assert (status.boot, status.last_seq) == ("boot-1", 2)
    assert minute_samples("h100-node-0") == [2, 2, 2]
    assert ingest_queue.backlog() == 0
    assert status.last_seen_at is not None
    assert abs((datetime.now(UTC) - status.last_seen_at).total_seconds()) < 60


def test_a_report_queued_twice_is_applied_once(tokens):
    payload = FakeNode("h100-node-0").telemetry(T0, T0 + 5)
    assert [post(tokens["h100-node-0"], payload).status_code for _ in range(2)] == [202, 202]
    assert drain_all() == 2
    assert minute_samples("h100-node-0") == [2, 2, 2]
    assert AgentStatus.objects.get(node__name="h100-node-0").last_seq == 2


def test_several_nodes_reports_apply_in_one_batch_with_a_fixed_number_of_queries(tokens):
    # given: both nodes have sent their inventory and reported once (their device rows exist, matched to their
    # GPUs), then each sends two more reports
    agents = {name: FakeNode(name) for name in NODES}
    for name, agent in agents.items():
        credential = AgentCredential.objects.select_related("node").get(node__name=name)
        services.record_inventory(credential=credential, payload=agent.inventory())
        post(tokens[name], agent.telemetry(T0))
    drain_all()
    for k in (1, 2):
        for name, agent in agents.items():
            assert post(tokens[name], agent.telemetry(T0 + 5 * k)).status_code == 202

    # when: one drain step takes all four
    with CaptureQueriesContext(connection) as queries:
        done = drain_telemetry(consumer="drain", count=100)

    # then: one transaction (savepoint and release in the test's), one lock: no query per node or report (the one
    # read of the devices and the device and status UPDATEs go on psycopg's own cursor); every sample applied once
    assert (done.reports, done.samples) == (4, 4)
    assert len(queries) == 3, [q["sql"] for q in queries.captured_queries]
    assert minute_samples("h100-node-0") == minute_samples("h100-node-1") == [3, 3, 3]
    assert dict(AgentStatus.objects.values_list("node__name", "last_seq")) == {name: 3 for name in NODES}


@pytest.mark.parametrize("crash", ["before-commit", "after-commit"])
def test_a_worker_crash_between_accept_and_apply_loses_and_doubles_nothing(tokens, settings, crash):
    # given: two accepted reports a worker read, and then died: before its transaction committed, or after it
    # committed but before it acknowledged them
    agent = FakeNode("h100-node-0")
    post(tokens["h100-node-0"], agent.telemetry(T0))
    post(tokens["h100-node-0"], agent.telemetry(T0 + 5))
    read = ingest_queue.read_reports(consumer="worker-1", count=100, block_ms=0)
    assert len(read) == 2
    if crash == "after-commit":
        apply_reports([Report(node_id=r.node_id, payload=r.payload, accepted_at=r.accepted_at) for r in read])
    assert ingest_queue.backlog() == 2

    # when: another worker (a new name) drains; it takes the dead one's reports over once they are idle
    assert drain_all("worker-2") == 0  # not idle long enough yet
    settings.FATIA_INGEST_CLAIM_IDLE_S = 0
    assert drain_all("worker-2") == 2

    # then: both samples applied, each once
    assert minute_samples("h100-node-0") == [2, 2, 2]
    assert AgentStatus.objects.get(node__name="h100-node-0").last_seq == 2
    assert ingest_queue.backlog() == 0


def test_a_restarted_worker_takes_its_own_unfinished_reports_back_at_once(tokens):
    post(tokens["h100-node-0"], FakeNode("h100-node-0").telemetry(T0))
    assert len(ingest_queue.read_reports(consumer="drain", count=100, block_ms=0)) == 1  # then the worker died
    # a plain read (the running worker's, between recoveries) takes only new reports
    assert drain_telemetry(consumer="drain", count=100, recover=False).reports == 0
    assert drain_all("drain") == 1
    assert minute_samples("h100-node-0") == [1, 1, 1]


def test_past_the_bound_telemetry_is_refused_with_503_and_retry_after_until_the_worker_catches_up(tokens, settings):
    # given
    settings.FATIA_INGEST_BACKLOG_MAX = 2
    settings.FATIA_INGEST_RETRY_AFTER_S = 7
    agent = FakeNode("h100-node-0")
    accepted = [post(tokens["h100-node-0"], agent.telemetry(T0 + 5 * k)).status_code for k in range(2)]

    # when
    refused = post(tokens["h100-node-0"], agent.telemetry(T0 + 10))

    # then: refused, not queued; after a drain, the agent's resend is accepted
    assert accepted == [202, 202]
    assert (refused.status_code, refused["Retry-After"], refused.json()["code"]) == (503, "7", "unavailable")
    assert ingest_queue.backlog() == 2
    drain_all()
    assert post(tokens["h100-node-0"], agent.telemetry(T0 + 15)).status_code == 202


def test_an_unreachable_queue_is_a_503_not_a_500(tokens, settings):
    settings.FATIA_INGEST_QUEUE_URL = "redis://127.0.0.1:1/0"
    response = post(tokens["h100-node-0"], FakeNode("h100-node-0").telemetry(T0))
    assert (response.status_code, response["Retry-After"]) == (503, "5")


@pytest.mark.parametrize(
    ("header", "status"),
    [("Bearer fagent_nope_nope", 401), (None, 401), ("other-node", 403), ("revoked", 401)],
    ids=["unknown", "none", "other-node", "revoked"],
)
def test_refused_reports_are_not_queued(world, tokens, header, status):
    payload = FakeNode("h100-node-0").telemetry(T0)
    if header == "other-node":
        header = f"Bearer {tokens['h100-node-1']}"
    elif header == "revoked":
        credential = AgentCredential.objects.get(node__name="h100-node-0")
        services.revoke_agent_credential(credential_id=credential.pk, actor=world.root)
        header = f"Bearer {tokens['h100-node-0']}"
    client = APIClient()
    if header:
        client.credentials(HTTP_AUTHORIZATION=header)
    response = client.post("/api/v1/agent/telemetry/", payload, format="json")
    assert response.status_code == status
    assert response.json()["code"] in ("authentication_failed", "not_authenticated", "permission_denied")
    assert ingest_queue.backlog() == 0


def test_bad_input_is_400_with_field_messages_and_not_queued(tokens):
    payload = FakeNode("h100-node-0").telemetry(T0)
    payload["samples"][0]["seq"] = "one"
    response = post(tokens["h100-node-0"], payload)
    assert (response.status_code, response.json()["errors"]) == (
        400,
        {"samples": {"0": {"seq": ["A valid integer is required."]}}},
    )
    assert ingest_queue.backlog() == 0


def test_a_report_that_cannot_be_applied_is_set_aside_and_the_others_are_applied(tokens):
    # given: a queued report that breaks the apply (its node vanished from the payload: a bug, say), between two
    # good ones
    post(tokens["h100-node-0"], FakeNode("h100-node-0").telemetry(T0))
    bad = FakeNode("h100-node-1").telemetry(T0)
    del bad["samples"][0]["gpus"][0]["mig"]
    node1 = Node.objects.get(name="h100-node-1")
    ingest_queue.accept_report(node_id=node1.pk, payload=bad, accepted_at=datetime.now(UTC))
    post(tokens["h100-node-1"], FakeNode("h100-node-1").telemetry(T0 + 5, boot="boot-2"))

    # when
    done = drain_telemetry(consumer="drain", count=100)

    # then
    assert (done.reports, done.buried) == (2, 1)
    assert minute_samples("h100-node-0") == [1, 1, 1]
    assert minute_samples("h100-node-1") == [1, 1, 1]
    assert ingest_queue.backlog() == 0
    assert ingest_queue.client().xlen(ingest_queue.DEAD) == 1


def test_a_silent_node_is_ready_again_once_its_queued_report_is_applied(tokens, django_capture_on_commit_callbacks):
    node = Node.objects.get(name="h100-node-0")
    Node.objects.filter(pk=node.pk).update(state=Node.State.AGENT_SILENT)
    post(tokens["h100-node-0"], FakeNode("h100-node-0").telemetry(T0))
    with django_capture_on_commit_callbacks(execute=True):
        drain_all()
    assert Node.objects.get(pk=node.pk).state == Node.State.READY


def test_rollups_of_a_queued_minute_are_written_once_the_minute_ends(tokens):
    agent = FakeNode("h100-node-0")
    post(tokens["h100-node-0"], agent.telemetry(T0, T0 + 5))
    post(tokens["h100-node-0"], agent.telemetry(T0 + 60))
    drain_all()
    assert set(DeviceRollup.objects.values_list("samples", flat=True)) == {2}


def test_the_drain_command_applies_what_is_queued_and_refuses_without_a_queue(tokens, settings):
    post(tokens["h100-node-0"], FakeNode("h100-node-0").telemetry(T0))
    out = StringIO()
    call_command("drain_telemetry", "--once", stdout=out)
    assert out.getvalue().strip() == "1 reports applied; 0 left in the queue."
    settings.FATIA_INGEST_QUEUE_URL = ""
    with pytest.raises(CommandError, match="FATIA_INGEST_QUEUE_URL"):
        call_command("drain_telemetry", "--once")
