"""POST /api/v1/agent/bootstrap/: an agent pod trades its projected ServiceAccount token for its node's credential.

The Kubernetes adapter is faked at its boundary (kube.review_token, kube.read_pod_placement) so that every refusal
can be set up; tests/kube/test_agent_bootstrap.py runs the same path against a real API server's TokenReview.
"""

from __future__ import annotations

import pytest

from allocations.cluster import kube
from allocations.models import Node
from allocations.nodeagent import services
from allocations.nodeagent.models import AgentCredential
from tenants.models import AuditEvent
from tests.nodeagent.fake_cluster import NODE, POD_UID, SA, FakeCluster, agent_identity, install_fake_cluster
from tests.nodeagent.payloads import FakeNode
from tests.test_settings import boot

pytestmark = pytest.mark.django_db

URL = "/api/v1/agent/bootstrap/"


@pytest.fixture
def cluster(settings, monkeypatch) -> FakeCluster:
    return install_fake_cluster(settings, monkeypatch)


def test_an_agent_pod_gets_a_credential_for_its_own_node_which_then_reports(world, cluster):
    # when
    response = world.client(None).post(URL, {"node": NODE, "token": "projected.jwt.token"}, format="json")

    # then: the token went to the review with the agents' audience, and a credential came back once
    assert response.status_code == 201, response.json()
    body = response.json()
    assert cluster.reviewed == [("projected.jwt.token", "fatia-agent")]
    credential = AgentCredential.objects.get()
    assert (body["node"], body["prefix"]) == (NODE, credential.prefix)
    assert (credential.node.name, credential.origin, credential.revoked_at) == (NODE, "bootstrap", None)
    assert services.hash_agent_token(body["token"]) == credential.digest
    event = AuditEvent.objects.get(verb="bootstrap_agent_credential")
    assert event.actor_name == f"system:serviceaccount:{SA}"
    assert event.after == {
        "node": NODE,
        "prefix": credential.prefix,
        "pod": "fatia-system/fatia-agent-x7k2p",
        "pod_uid": POD_UID,
    }
    # and the credential reports for that node (and only that node)
    agent = world.client(None)
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {body['token']}")
    assert agent.post("/api/v1/agent/inventory/", FakeNode(NODE).inventory(), format="json").status_code == 200
    other = FakeNode("h100-node-1").inventory()
    assert agent.post("/api/v1/agent/inventory/", other, format="json").status_code == 403


def test_a_second_bootstrap_revokes_the_nodes_previous_bootstrapped_credential_but_not_an_admins(world, cluster):
    # given: an admin's credential and a first bootstrap
    node = Node.objects.get(name=NODE)
    admins, _ = services.issue_agent_credential(node_id=node.pk, actor=world.root)
    first = world.client(None).post(URL, {"node": NODE, "token": "t1"}, format="json").json()

    # when: the agent restarts (or its credential was revoked) and bootstraps again
    second = world.client(None).post(URL, {"node": NODE, "token": "t2"}, format="json")

    # then
    assert second.status_code == 201
    states = dict(AgentCredential.objects.values_list("prefix", "revoked_at"))
    assert states[second.json()["prefix"]] is None
    assert states[first["prefix"]] is not None
    assert states[admins.prefix] is None
    event = AuditEvent.objects.filter(verb="bootstrap_agent_credential").latest("pk")
    assert event.before == {"revoked": [first["prefix"]]}
    agent = world.client(None)
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {first['token']}")
    assert agent.post("/api/v1/agent/inventory/", FakeNode(NODE).inventory(), format="json").status_code == 401


def _refuse(fake: FakeCluster, case: str) -> None:
    pod = fake.pod
    assert pod is not None
    if case == "not authenticated":
        fake.identity = kube.TokenIdentity(authenticated=False, error="token has expired")
    elif case == "another service account":
        fake.identity = agent_identity(user="system:serviceaccount:fatia-system:default")
    elif case == "a person":
        fake.identity = agent_identity(user="alice@example.com")
    elif case == "another audience":
        fake.identity = agent_identity(audiences=("https://kubernetes.default.svc",))
    elif case == "not bound to a pod":
        fake.identity = agent_identity(extra={})
    elif case == "pod gone":
        fake.pod = None
    elif case == "pod replaced":
        fake.pod = kube.PodPlacement(pod.namespace, pod.name, "another-uid", pod.node_name)
    elif case == "pod elsewhere":
        fake.pod = kube.PodPlacement(pod.namespace, pod.name, pod.uid, "h100-node-1")
    else:
        raise AssertionError(case)


@pytest.mark.parametrize(
    "case",
    [
        "not authenticated",
        "another service account",
        "a person",
        "another audience",
        "not bound to a pod",
        "pod gone",
        "pod replaced",
        "pod elsewhere",
    ],
)
def test_a_token_the_cluster_does_not_vouch_for_as_this_nodes_agent_pod_is_a_401(world, cluster, case):
    _refuse(cluster, case)
    response = world.client(None).post(URL, {"node": NODE, "token": "t"}, format="json")
    assert response.status_code == 401, response.json()
    assert response.json()["code"] == "authentication_failed"
    assert list(response.json()["errors"]) == ["token"]
    assert not AgentCredential.objects.exists()


def test_a_token_of_an_agent_pod_on_another_node_is_a_403(world, cluster):
    cluster.identity = agent_identity(node="h100-node-1")
    response = world.client(None).post(URL, {"node": NODE, "token": "t"}, format="json")
    assert response.status_code == 403
    assert response.json()["errors"] == {"node": [f"This token belongs to a pod on node h100-node-1, not {NODE}."]}
    assert not AgentCredential.objects.exists()


@pytest.mark.parametrize(
    "error",
    [
        kube.KubeUnavailable("tokenreview: the Kubernetes API is unreachable"),
        kube.KubeRejected("forbidden", status=403),
    ],
)
def test_a_cluster_that_cannot_answer_is_a_503(world, cluster, error):
    cluster.error = error
    response = world.client(None).post(URL, {"node": NODE, "token": "t"}, format="json")
    assert response.status_code == 503
    assert response.json()["code"] == "unavailable"
    assert "forbidden" not in response.json()["detail"] and "unreachable" not in response.json()["detail"]
    assert not AgentCredential.objects.exists()


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ({}, {"node": ["This field is required."], "token": ["This field is required."]}),
        (
            {"node": "Not_A_Node", "token": "t"},
            {"node": ["A Kubernetes node name (lower-case letters, digits, '-' and '.')."]},
        ),
        ({"node": NODE, "token": ""}, {"token": ["This field may not be blank."]}),
        ({"node": NODE, "token": "t" * 16385}, {"token": ["Ensure this field has no more than 16384 characters."]}),
        ({"node": NODE, "token": "t", "pod": "x"}, {"pod": ["Unknown field."]}),
        ({"node": "no-such-node", "token": "t"}, {"node": ["No node of that name."]}),
    ],
)
def test_bad_input_is_a_400_with_a_message_per_field(world, cluster, body, errors):
    if body.get("node") == "no-such-node":
        cluster.identity = agent_identity(node="no-such-node")
        assert cluster.pod is not None
        cluster.pod = kube.PodPlacement(cluster.pod.namespace, cluster.pod.name, POD_UID, "no-such-node")
    response = world.client(None).post(URL, body, format="json")
    assert (response.status_code, response.json()["errors"]) == (400, errors)
    assert not AgentCredential.objects.exists()


def test_without_an_agent_service_account_configured_the_endpoint_is_a_404(world, cluster, settings):
    settings.FATIA_AGENT_SERVICE_ACCOUNT = ""
    response = world.client(None).post(URL, {"node": NODE, "token": "t"}, format="json")
    assert response.status_code == 404
    assert cluster.reviewed == []


def test_bootstraps_are_throttled_per_address(world, cluster, settings):
    settings.FATIA_THROTTLE_RATES = {**settings.FATIA_THROTTLE_RATES, "anon": "3/min"}
    cluster.identity = kube.TokenIdentity(authenticated=False)
    statuses = [
        world.client(None).post(URL, {"node": NODE, "token": "guess"}, format="json").status_code for _ in range(4)
    ]
    assert statuses == [401, 401, 401, 429]
    assert len(cluster.reviewed) == 3


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"FATIA_AGENT_SERVICE_ACCOUNT": "fatia-agent"}, "FATIA_AGENT_SERVICE_ACCOUNT must be <namespace>:<name>"),
        ({"FATIA_AGENT_SERVICE_ACCOUNT": "Fatia:agent"}, "FATIA_AGENT_SERVICE_ACCOUNT must be <namespace>:<name>"),
        ({"FATIA_AGENT_SERVICE_ACCOUNT": SA}, "FATIA_AGENT_SERVICE_ACCOUNT needs FATIA_CLUSTER_BACKEND 'kubernetes'"),
    ],
)
def test_a_bad_agent_service_account_setting_stops_the_portal_with_a_message(env, message):
    result = boot(DEBUG="True", **env)
    assert result.returncode == 1
    assert message in result.stderr
