"""Queued ingest checks node-agent credentials against an entry every web process shares in Redis, in the same
round trip that queues the report (package `ingest`): no query per report, a revocation reaches every process at
once, the entry never outlives FATIA_INGEST_CREDENTIAL_TTL_S, and bad input from an unknown caller is still 401."""

from __future__ import annotations

import os
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from allocations.models import Node
from allocations.nodeagent import ingest_queue, services, shared_credentials
from allocations.nodeagent.authentication import forget_agent_credentials
from allocations.nodeagent.models import AgentCredential
from tests.nodeagent.payloads import T0, FakeNode

pytestmark = pytest.mark.django_db

NODE = "h100-node-0"


@pytest.fixture
def agent(world: Any, settings: Any) -> tuple[AgentCredential, str]:
    # The test runner's Redis (emptied before each test by tests/conftest.py).
    settings.FATIA_INGEST_QUEUE_URL = os.environ["CACHE_URL"]
    settings.FATIA_INGEST_CREDENTIAL_TTL_S = 60
    return services.issue_agent_credential(node_id=Node.objects.get(name=NODE).pk, actor=world.root)


def post(token: str, payload: Any) -> Any:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client.post("/api/v1/agent/telemetry/", payload, format="json")


def test_a_known_agent_is_queued_without_a_query_even_by_another_process(agent, django_assert_num_queries):
    # given: the first report looked the credential up (and wrote last_used_at)
    credential, token = agent
    assert post(token, FakeNode(NODE).telemetry(T0)).status_code == 202
    assert AgentCredential.objects.get(pk=credential.pk).last_used_at is not None
    # and this process forgot everything it kept itself, as another web process never knew it
    forget_agent_credentials()

    # when / then: the next reports are queued on the shared entry alone
    with django_assert_num_queries(0):
        answers = [post(token, FakeNode(NODE).telemetry(T0 + 5 * k)).status_code for k in (1, 2)]
    assert answers == [202, 202]
    assert ingest_queue.backlog() == 3


def test_a_revocation_reaches_every_process_at_once(world, agent, django_capture_on_commit_callbacks, settings):
    # given: the entry is shared, for an hour
    settings.FATIA_INGEST_CREDENTIAL_TTL_S = 3600
    credential, token = agent
    assert post(token, FakeNode(NODE).telemetry(T0)).status_code == 202
    assert ingest_queue.client().exists(shared_credentials.key(credential.digest))

    # when: an admin revokes it
    with django_capture_on_commit_callbacks(execute=True):
        services.revoke_agent_credential(credential_id=credential.pk, actor=world.root)

    # then: the shared entry is gone with the commit, and the next report is refused and not queued
    assert not ingest_queue.client().exists(shared_credentials.key(credential.digest))
    response = post(token, FakeNode(NODE).telemetry(T0 + 5))
    assert (response.status_code, response.json()["detail"]) == (401, "This node agent credential has been revoked.")
    assert ingest_queue.backlog() == 1


def test_the_shared_entry_lasts_the_bound_at_most_and_not_at_all_with_0(agent, settings):
    credential, token = agent
    r = ingest_queue.client()
    assert post(token, FakeNode(NODE).telemetry(T0)).status_code == 202
    # a revocation that bypassed the service (a row changed by hand) is seen when the entry expires: within 60 s,
    # not renewed by use
    assert 0 < r.ttl(shared_credentials.key(credential.digest)) <= 60
    r.expire(shared_credentials.key(credential.digest), 30)
    assert post(token, FakeNode(NODE).telemetry(T0 + 1)).status_code == 202
    assert 0 < r.ttl(shared_credentials.key(credential.digest)) <= 30

    # given: nothing is kept
    r.delete(shared_credentials.key(credential.digest))
    settings.FATIA_INGEST_CREDENTIAL_TTL_S = 0
    assert post(token, FakeNode(NODE).telemetry(T0 + 5)).status_code == 202
    assert not r.exists(shared_credentials.key(credential.digest))
    # then: a row revoked by hand is refused at the next report (this process's own cache aside)
    settings.FATIA_AGENT_CREDENTIAL_CACHE_S = 0
    AgentCredential.objects.filter(pk=credential.pk).update(revoked_at=timezone.now())
    assert post(token, FakeNode(NODE).telemetry(T0 + 10)).status_code == 401


def test_last_used_at_is_written_once_a_minute_per_credential(agent):
    credential, token = agent
    assert post(token, FakeNode(NODE).telemetry(T0)).status_code == 202
    first = AgentCredential.objects.get(pk=credential.pk).last_used_at
    assert first is not None
    assert 0 < ingest_queue.client().ttl(shared_credentials.used_key(credential.digest)) <= 60
    assert post(token, FakeNode(NODE).telemetry(T0 + 5)).status_code == 202
    assert AgentCredential.objects.get(pk=credential.pk).last_used_at == first


def test_a_shared_credential_of_another_node_is_403_and_queues_nothing(agent):
    credential, token = agent
    assert post(token, FakeNode(NODE).telemetry(T0)).status_code == 202
    response = post(token, FakeNode("h100-node-1").telemetry(T0 + 5))
    assert response.status_code == 403
    assert response.json()["errors"] == {"node": [f"This credential reports for node {NODE}, not h100-node-1."]}
    assert ingest_queue.backlog() == 1


@pytest.mark.parametrize("body", ["{not json", '{"node": "h100-node-0"}'], ids=["parse-error", "invalid"])
def test_bad_input_from_an_unknown_caller_is_401_and_from_a_known_one_400(agent, body):
    _, token = agent
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer fagent_nope_nope")
    unknown = client.post("/api/v1/agent/telemetry/", body, content_type="application/json")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    known = client.post("/api/v1/agent/telemetry/", body, content_type="application/json")
    assert (unknown.status_code, unknown.json()["code"]) == (401, "authentication_failed")
    assert known.status_code == 400
    assert known.json()["code"] in ("parse_error", "invalid")
    assert ingest_queue.backlog() == 0
