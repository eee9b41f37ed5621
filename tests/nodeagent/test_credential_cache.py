"""A web process trusts a credential it checked for FATIA_AGENT_CREDENTIAL_CACHE_S (a query saved per report);
a revocation reaches other processes within that bound and the revoking process at once (package `ingest`)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone
from rest_framework.test import APIClient

from allocations.models import Node
from allocations.nodeagent import services
from allocations.nodeagent.models import AgentCredential
from tests.nodeagent.payloads import T0, FakeNode

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent(world):
    node = Node.objects.get(name="h100-node-0")
    credential, token = services.issue_agent_credential(node_id=node.pk, actor=world.root)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return credential, client, FakeNode(node.name)


def _report(client, node, ts):
    return client.post("/api/v1/agent/telemetry/", node.telemetry(ts), format="json").status_code


def test_a_revocation_by_another_process_takes_effect_within_the_bound(agent, settings):
    # given: the credential was checked (and kept) by this process
    settings.FATIA_AGENT_CREDENTIAL_CACHE_S = 10
    credential, client, node = agent
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        assert _report(client, node, T0) == 200

    # when: another process revokes it (the row alone changes; this process is not told)
    AgentCredential.objects.filter(pk=credential.pk).update(revoked_at=start)

    # then: trusted until the bound, refused after it
    with time_machine.travel(start + timedelta(seconds=9), tick=False):
        assert _report(client, node, T0 + 5) == 200
    with time_machine.travel(start + timedelta(seconds=11), tick=False):
        assert _report(client, node, T0 + 10) == 401


def test_a_revocation_in_this_process_takes_effect_at_once(world, agent, settings):
    settings.FATIA_AGENT_CREDENTIAL_CACHE_S = 3600
    credential, client, node = agent
    assert _report(client, node, T0) == 200

    services.revoke_agent_credential(credential_id=credential.pk, actor=world.root)

    assert _report(client, node, T0 + 5) == 401


def test_without_the_cache_every_request_looks_the_credential_up(agent, settings):
    settings.FATIA_AGENT_CREDENTIAL_CACHE_S = 0
    credential, client, node = agent
    assert _report(client, node, T0) == 200

    AgentCredential.objects.filter(pk=credential.pk).update(revoked_at=timezone.now())

    assert _report(client, node, T0 + 5) == 401
