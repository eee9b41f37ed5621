"""The node agent in the Helm chart (agent.enabled): a DaemonSet on GPU nodes only, each pod with a projected
ServiceAccount token for the portal and no Kubernetes API token, and the portal told whose tokens to accept.
The last test installs it on the local control plane, where kube-controller-manager's DaemonSet controller and
kube-scheduler place its pods (no kubelet runs them)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from allocations.cluster.fake_fleet import create_ready_node
from tests.deploy.test_chart import CHART, KUBE_VERSION, RELEASE, VALUES, by_kind, kubectl, render, run_helm
from tests.kube.conftest import GFD_LABELS, ControlPlane, wait_for

AGENT = "fatia-agent"


def daemon_set(docs: list[dict]) -> dict:
    (ds,) = by_kind(docs, "DaemonSet").values()
    return ds


def test_the_daemon_set_renders_with_agent_enabled_and_not_without(helm: Path) -> None:
    on = render(helm, "kubernetes")
    off = render(helm, "kubernetes", "fatia", "agent.enabled=false")
    assert list(by_kind(on, "DaemonSet")) == [AGENT]
    assert AGENT in by_kind(on, "ServiceAccount")
    assert AGENT in by_kind(on, "NetworkPolicy")
    assert by_kind(off, "DaemonSet") == {}
    assert AGENT not in by_kind(off, "ServiceAccount") and AGENT not in by_kind(off, "NetworkPolicy")
    # the portal accepts bootstrap tokens only when the agents run, and only from their ServiceAccount
    assert {k: v for k, v in by_kind(on, "ConfigMap")["fatia"]["data"].items() if "AGENT" in k} == {
        "FATIA_AGENT_SERVICE_ACCOUNT": "fatia:fatia-agent",
        "FATIA_AGENT_TOKEN_AUDIENCE": "fatia-agent",
    }
    assert not any("AGENT" in k for k in by_kind(off, "ConfigMap")["fatia"]["data"])
    # web calls the API (TokenReview) only then: off, it keeps the ServiceAccount without a token
    web_off = by_kind(off, "Deployment")["fatia-web"]["spec"]["template"]["spec"]
    assert (web_off["serviceAccountName"], web_off["automountServiceAccountToken"]) == ("fatia", False)
    web_policy = by_kind(on, "NetworkPolicy")["fatia-web"]["spec"]["egress"]
    assert {"ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}]} in web_policy


def test_the_agent_pod_runs_on_gpu_nodes_with_nvidias_runtime_and_a_token_for_the_portal_only(helm: Path) -> None:
    ds = daemon_set(render(helm, "kubernetes"))
    spec = ds["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    # GPU nodes only: GPU feature discovery's label or NFD's NVIDIA PCI label; GPU taints tolerated
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [term["matchExpressions"] for term in terms] == [
        [{"key": label, "operator": "In", "values": ["true"]}]
        for label in ("nvidia.com/gpu.present", "feature.node.kubernetes.io/pci-10de.present")
    ]
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["runtimeClassName"] == "nvidia"
    # its identity: no API token mounted, one projected token with the portal's audience and a short life
    assert (spec["serviceAccountName"], spec["automountServiceAccountToken"]) == (AGENT, False)
    (token_volume,) = [v for v in spec["volumes"] if v["name"] == "portal-token"]
    assert token_volume["projected"]["sources"] == [
        {"serviceAccountToken": {"audience": "fatia-agent", "expirationSeconds": 3600, "path": "token"}}
    ]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env == {
        "NODE_NAME": {"fieldRef": {"fieldPath": "spec.nodeName"}},
        "FATIA_AGENT_PORTAL_URL": "https://fatia.example.com",
        "FATIA_AGENT_BOOTSTRAP_TOKEN_FILE": "/var/run/secrets/fatia-agent/token",
        "FATIA_AGENT_INTERVAL_S": "5",
        "FATIA_AGENT_SEND_INTERVAL_S": "0",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "NVIDIA_DRIVER_CAPABILITIES": "utility",
    }
    assert {"name": "portal-token", "mountPath": "/var/run/secrets/fatia-agent", "readOnly": True} in container[
        "volumeMounts"
    ]
    assert container["args"] == ["agent"]
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == 10001
    assert container["securityContext"]["runAsNonRoot"] is True
    assert container["resources"] == {
        "requests": {"cpu": "20m", "memory": "64Mi"},
        "limits": {"cpu": "200m", "memory": "128Mi"},
    }
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}}
    # the agent reaches DNS and the portal, nothing else (no database, no API server)
    policy = by_kind(render(helm, "kubernetes"), "NetworkPolicy")[AGENT]["spec"]
    assert policy["ingress"] == []
    assert [rule["ports"] for rule in policy["egress"]] == [
        [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        [{"protocol": "TCP", "port": 443}],
    ]


def test_the_agents_placement_runtime_url_and_identity_are_configurable(helm: Path) -> None:
    docs = render(
        helm, "kubernetes", "gpu", "agent.runtimeClassName=", "agent.nodeSelector.pool=h100",
        "agent.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution=null",
        "agent.portalUrl=http://fatia-web.gpu.svc:8000", "agent.serviceAccount.name=gpu-agent",
        "agent.token.audience=fatia-agent-gpu", "agent.podSecurityContext.runAsUser=0",
        "agent.podSecurityContext.runAsNonRoot=false",
    )  # fmt: skip
    spec = daemon_set(docs)["spec"]["template"]["spec"]
    assert "runtimeClassName" not in spec
    assert spec["nodeSelector"] == {"pool": "h100"}
    assert spec["serviceAccountName"] == "gpu-agent"
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert env["FATIA_AGENT_PORTAL_URL"] == "http://fatia-web.gpu.svc:8000"
    assert spec["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"]["audience"] == "fatia-agent-gpu"
    # static-MIG agent mode: root, said at the pod and the container level alike
    assert (spec["securityContext"]["runAsUser"], spec["securityContext"]["runAsNonRoot"]) == (0, False)
    assert spec["containers"][0]["securityContext"]["runAsNonRoot"] is False
    config = by_kind(docs, "ConfigMap")["fatia"]["data"]
    assert (config["FATIA_AGENT_SERVICE_ACCOUNT"], config["FATIA_AGENT_TOKEN_AUDIENCE"]) == (
        "gpu:gpu-agent",
        "fatia-agent-gpu",
    )


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("cluster.backend=simulated", "at '/cluster/backend': value must be 'kubernetes'"),
        ("agent.enabled=yes", "at '/agent/enabled': got string, want boolean"),
        ("agent.token.expirationSeconds=60", "at '/agent/token/expirationSeconds': minimum: got 60, want 600"),
        ("agent.token.audience=", "at '/agent/token/audience'"),
        ("agent.portalUrl=ftp://fatia.example.com", "at '/agent/portalUrl'"),
        ("agent.gpuNodeLabels[0]=not a label", "at '/agent/gpuNodeLabels/0'"),
        ("agent.updateStrategy.maxUnavailable=most", "at '/agent/updateStrategy/maxUnavailable'"),
        ("agent.intervalSeconds=0", "at '/agent/intervalSeconds'"),
        ("agent.hostNetwork=true", "additional properties 'hostNetwork' not allowed"),
    ],
)
def test_the_values_schema_refuses_bad_agent_values_and_names_the_field(helm: Path, setting: str, message: str) -> None:
    result = run_helm(
        helm, "template", RELEASE, str(CHART), "-f", str(VALUES["kubernetes"]), "--set", setting, "--kube-version",
        KUBE_VERSION,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stdout == ""
    assert message in result.stderr


def test_installed_its_pods_land_on_the_gpu_nodes_only(
    helm: Path, control_plane: ControlPlane, admin: client.ApiClient, nvidia_runtime_class: str
) -> None:
    # given: a GPU node (GPU feature discovery's labels), a node NFD labelled as NVIDIA's, and a node without a GPU
    suffix = uuid.uuid4().hex[:6]
    gpu, nfd, plain = f"agent-gpu-{suffix}", f"agent-nfd-{suffix}", f"agent-cpu-{suffix}"
    create_ready_node(admin, gpu, GFD_LABELS)
    create_ready_node(admin, nfd, {"feature.node.kubernetes.io/pci-10de.present": "true"})
    create_ready_node(admin, plain, {"node-role.kubernetes.io/worker": ""})
    core = client.CoreV1Api(admin)
    ns = f"agent-{suffix}"
    core.create_namespace(body={"metadata": {"name": ns}})
    docs = [d for d in render(helm, "kubernetes", ns) if d["kind"] in ("ServiceAccount", "DaemonSet")]
    try:
        # when: the agent's ServiceAccount and DaemonSet are installed for real
        applied = kubectl(control_plane, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(docs))
        assert applied.returncode == 0, applied.stderr

        # then: the DaemonSet controller made one pod per GPU node and the scheduler bound each there
        def placed() -> dict[str, str] | None:
            pods = core.list_namespaced_pod(ns, label_selector="app.kubernetes.io/component=agent").items
            ours = {p.spec.node_name: p.metadata.name for p in pods if p.spec.node_name in (gpu, nfd, plain)}
            return ours if set(ours) == {gpu, nfd} else None

        pods = wait_for("agent pods on both GPU nodes", placed, timeout=90)
        assert plain not in pods
        pod = core.read_namespaced_pod(pods[gpu], ns)
        assert pod.spec.runtime_class_name == "nvidia"
        assert pod.spec.service_account_name == AGENT
        assert not any(v.name.startswith("kube-api-access") for v in pod.spec.volumes)
    finally:
        kubectl(control_plane, "delete", "namespace", ns, "--wait=false")
        for node in (gpu, nfd, plain):
            kubectl(control_plane, "delete", "node", node, "--wait=false")
