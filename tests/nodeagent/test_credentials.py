"""Node agent credentials through the admin API and manage.py: admins only, the token shown once."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from allocations.models import Node
from allocations.nodeagent import services
from allocations.nodeagent.models import AgentCredential
from tenants.models import AuditEvent

pytestmark = pytest.mark.django_db


def test_an_admin_issues_lists_and_revokes_a_credential_through_the_api(world):
    # given
    client = world.client(world.root)

    # when
    created = client.post("/api/v1/agent-credentials/", {"node": "h100-node-0"}, format="json")
    listed = client.get("/api/v1/agent-credentials/")
    revoked = client.post(f"/api/v1/agent-credentials/{created.json()['id']}/revoke/")
    again = client.post(f"/api/v1/agent-credentials/{created.json()['id']}/revoke/")

    # then
    credential = AgentCredential.objects.get()
    body = created.json()
    assert created.status_code == 201
    assert (body["node"], body["prefix"], body["revoked_at"]) == ("h100-node-0", credential.prefix, None)
    assert services.hash_agent_token(body["token"]) == credential.digest
    assert listed.status_code == 200
    assert [(c["node"], c["prefix"]) for c in listed.json()["results"]] == [("h100-node-0", credential.prefix)]
    assert "token" not in listed.json()["results"][0]
    assert revoked.status_code == 200
    assert revoked.json()["revoked_at"] is not None
    assert again.status_code == 409
    assert AuditEvent.objects.filter(verb__in=["issue_agent_credential", "revoke_agent_credential"]).count() == 2


@pytest.mark.parametrize("who", ["alice", "mallory", "charlie"])
def test_people_who_are_not_platform_admins_get_403_and_nothing_changes(world, who):
    node = Node.objects.get(name="h100-node-0")
    existing = services.issue_agent_credential(node_id=node.pk, actor=world.root)[0]
    client = world.client(getattr(world, who))
    assert client.post("/api/v1/agent-credentials/", {"node": "h100-node-0"}, format="json").status_code == 403
    assert client.get("/api/v1/agent-credentials/").status_code == 403
    assert client.post(f"/api/v1/agent-credentials/{existing.pk}/revoke/").status_code == 403
    assert list(AgentCredential.objects.values_list("pk", "revoked_at")) == [(existing.pk, None)]


def test_anonymous_callers_are_refused(world):
    response = world.client(None).post("/api/v1/agent-credentials/", {"node": "h100-node-0"}, format="json")
    assert response.status_code in (401, 403)
    assert not AgentCredential.objects.exists()


def test_an_unknown_node_is_a_400_with_a_field_message(world):
    response = world.client(world.root).post("/api/v1/agent-credentials/", {"node": "nowhere"}, format="json")
    assert (response.status_code, response.json()["errors"]) == (400, {"node": ["No node of that name."]})
    assert not AgentCredential.objects.exists()


def test_the_management_command_issues_lists_and_revokes(world):
    # when
    out, err = StringIO(), StringIO()
    call_command("agent_credential", "issue", "h100-node-1", stdout=out, stderr=err)
    credential = AgentCredential.objects.get()
    listed = StringIO()
    call_command("agent_credential", "list", stdout=listed)
    revoked = StringIO()
    call_command("agent_credential", "revoke", credential.prefix, stdout=revoked)

    # then
    token = out.getvalue().strip()
    assert services.hash_agent_token(token) == credential.digest
    assert err.getvalue() == f"Credential {credential.prefix} for node h100-node-1; the token is shown only now:\n"
    assert listed.getvalue() == f"{credential.prefix}  h100-node-1  active  never used\n"
    assert revoked.getvalue() == f"Revoked credential {credential.prefix} of node h100-node-1.\n"
    with pytest.raises(CommandError, match=f"Credential {credential.prefix} is already revoked."):
        call_command("agent_credential", "revoke", credential.prefix)
    with pytest.raises(CommandError, match="No node named 'nowhere'."):
        call_command("agent_credential", "issue", "nowhere")
