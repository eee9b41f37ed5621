"""Agent bootstrap against a real API server: a real ServiceAccount, a Pod bound to a (fake) node, a token from the
TokenRequest API bound to that pod with the agents' audience, the real TokenReview as the portal's identity
(deploy/control-plane/portal-rbac.yaml grants it `create` on tokenreviews), and a credential for that node only.
Tokens for another node, of another audience or of another ServiceAccount are refused; the agent's own bootstrap
code gets its credential from a live portal and reports with it."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from agent.bootstrap import BootstrapTransport
from agent.nvml import Nvml
from agent.runner import Agent
from agent.sender import Sender
from allocations import services as fleet
from allocations.cluster.fake_fleet import create_ready_node
from allocations.nodeagent.models import AgentCredential, AgentStatus
from tests.agent.scenarios import fake, two_gpus
from tests.conftest import World
from tests.kube.conftest import GFD_LABELS, ControlPlane, wait_for
from tests.nodeagent.payloads import FakeNode

URL = "/api/v1/agent/bootstrap/"
AUDIENCE = "fatia-agent"


@dataclass
class AgentCluster:
    namespace: str
    nodes: tuple[str, str]
    core: client.CoreV1Api

    def pod(self, node: str, account: str = "fatia-agent") -> tuple[str, str]:
        """A pod of `account` bound to `node` (no kubelet runs it; the binding is what the token records)."""
        name = f"agent-{uuid.uuid4().hex[:6]}"
        pod = self.core.create_namespaced_pod(
            self.namespace,
            body={
                "metadata": {"name": name},
                "spec": {
                    "nodeName": node,
                    "serviceAccountName": account,
                    "automountServiceAccountToken": False,
                    "containers": [{"name": "agent", "image": "registry.k8s.io/pause:3.10"}],
                },
            },
        )
        return name, pod.metadata.uid

    def token(self, pod: tuple[str, str], *, audience: str | None = AUDIENCE, account: str = "fatia-agent") -> str:
        """What the kubelet would project: a TokenRequest bound to the pod, for the audience (None: the API
        server's own)."""
        spec: dict = {
            "expirationSeconds": 600,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod[0], "uid": pod[1]},
        }
        if audience is not None:
            spec["audiences"] = [audience]
        request = self.core.create_namespaced_service_account_token(account, self.namespace, body={"spec": spec})
        return str(request.status.token)


@pytest.fixture
def agent_cluster(world: World, control_plane: ControlPlane, admin: client.ApiClient, settings) -> AgentCluster:
    """Two GPU nodes known to the cluster and to the portal, a namespace with the agents' ServiceAccount and
    another one, and the portal configured to accept the agents' tokens (as the chart configures it)."""
    suffix = uuid.uuid4().hex[:6]
    nodes = (f"gpu-a-{suffix}", f"gpu-b-{suffix}")
    for node in nodes:
        create_ready_node(admin, node, GFD_LABELS)
        fleet.register_node(pool_id=world.pool.pk, name=node, gpu_count=2, actor=world.root)
    core = client.CoreV1Api(admin)
    namespace = f"fatia-agents-{suffix}"
    core.create_namespace(body={"metadata": {"name": namespace}})
    for account in ("fatia-agent", "other"):
        core.create_namespaced_service_account(namespace, body={"metadata": {"name": account}})
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    settings.FATIA_KUBECONFIG = str(control_plane.portal_kubeconfig)
    settings.FATIA_AGENT_SERVICE_ACCOUNT = f"{namespace}:fatia-agent"
    settings.FATIA_AGENT_TOKEN_AUDIENCE = AUDIENCE
    return AgentCluster(namespace, nodes, core)


def _bootstrap(world: World, node: str, token: str):
    return world.client(None).post(URL, {"node": node, "token": token}, format="json")


@pytest.mark.django_db
def test_a_token_bound_to_an_agent_pod_gets_a_credential_for_that_node_only(world, agent_cluster):
    # given: an agent pod on node A and the token the kubelet would give it
    node_a, node_b = agent_cluster.nodes
    token = agent_cluster.token(agent_cluster.pod(node_a))

    # when: it asks for node B's credential, then for its own
    other = _bootstrap(world, node_b, token)
    own = _bootstrap(world, node_a, token)

    # then: refused for B (403), issued for A, and that credential reports for A and not for B
    assert other.status_code == 403, other.json()
    assert other.json()["errors"] == {"node": [f"This token belongs to a pod on node {node_a}, not {node_b}."]}
    assert own.status_code == 201, own.json()
    (credential,) = AgentCredential.objects.all()
    assert (credential.node.name, credential.origin) == (node_a, "bootstrap")
    agent = world.client(None)
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {own.json()['token']}")
    assert agent.post("/api/v1/agent/inventory/", FakeNode(node_a).inventory(), format="json").status_code == 200
    assert agent.post("/api/v1/agent/inventory/", FakeNode(node_b).inventory(), format="json").status_code == 403


@pytest.mark.django_db
@pytest.mark.parametrize(
    "case", ["the API server's audience", "another ServiceAccount", "a deleted pod", "not a token"]
)
def test_tokens_the_cluster_does_not_vouch_for_as_an_agent_pods_are_refused(world, agent_cluster, case):
    # given
    node_a, _ = agent_cluster.nodes
    if case == "the API server's audience":
        token = agent_cluster.token(agent_cluster.pod(node_a), audience=None)
    elif case == "another ServiceAccount":
        token = agent_cluster.token(agent_cluster.pod(node_a, account="other"), account="other")
    elif case == "a deleted pod":
        pod = agent_cluster.pod(node_a)
        token = agent_cluster.token(pod)
        agent_cluster.core.delete_namespaced_pod(pod[0], agent_cluster.namespace, grace_period_seconds=0)
        wait_for(
            "the pod to be gone",
            lambda: (
                not agent_cluster.core.list_namespaced_pod(
                    agent_cluster.namespace, field_selector=f"metadata.name={pod[0]}"
                ).items
            ),
        )
    else:
        token = "eyJhbGciOiJSUzI1NiJ9.e30.c2ln"

    # when
    response = _bootstrap(world, node_a, token)

    # then
    assert response.status_code == 401, response.json()
    assert list(response.json()["errors"]) == ["token"]
    assert not AgentCredential.objects.exists()


def test_the_agent_bootstraps_from_its_token_file_against_a_live_portal_and_reports(
    world, live_server, agent_cluster, tmp_path: Path
):
    # given: what the DaemonSet's pod has: the projected token in a file, the node's name
    node_a, _ = agent_cluster.nodes
    token_file = tmp_path / "token"
    token_file.write_text(agent_cluster.token(agent_cluster.pod(node_a)), encoding="utf-8")
    clock: Callable[[], float] = itertools.count(1000.0, 5.0).__next__
    transport = BootstrapTransport(live_server.url, node_a, str(token_file), timeout_s=30)
    sender = Sender(transport=transport, node=node_a, boot="boot-1", jitter=lambda d: d)
    agent = Agent(nvml=Nvml(fake(two_gpus())), sender=sender, node=node_a, clock=clock)

    # when
    agent.tick()
    outcomes = [sender.send_pending() for _ in range(3)]

    # then: bootstrapped once through the real TokenReview, and the inventory and sample arrived for node A
    assert outcomes == ["sent", "sent", "idle"]
    assert transport.bootstraps == 1
    status = AgentStatus.objects.get(node__name=node_a)
    assert (status.inventory["node"], status.last_seq) == (node_a, 1)
    assert AgentCredential.objects.get().node.name == node_a
