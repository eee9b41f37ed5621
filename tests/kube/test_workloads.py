"""Manifests that just work (issue 17), on the real control plane: every generated manifest and every attached
one is accepted by the API server's server-side dry-run (validation, and the PodSecurity admission that tenant
namespaces enforce at `restricted`), and a Pod from the template is scheduled onto the claim's node with the claim
reserved for it."""

from __future__ import annotations

import dataclasses
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from allocations.models import Allocation, NodePool
from allocations.workloads.attach import POD_SPEC_PATHS, attach_claims
from allocations.workloads.documents import dump_documents
from allocations.workloads.from_allocation import claim_target
from allocations.workloads.manifests import KINDS, build_manifests, parse_options
from tests.conftest import World
from tests.kube.conftest import ControlPlane, KubeWorld, wait_for
from tests.kube.shared_world import approve, make_shared_world, share_request
from tests.kube.test_provisioning import claim_json, provision_and_wait, request

RESTRICTED_CONTAINER = {
    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
}
RESTRICTED_POD = {
    "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}}
}


@pytest.fixture
def active(kube_world: KubeWorld) -> Allocation:
    return provision_and_wait(request(kube_world, "1g.10gb").pk)


def dry_run(control_plane: ControlPlane, objects: list[dict[str, Any]], tmp_path: Path) -> str:
    """`kubectl apply --dry-run=server` as the admin; fails the test when the API server refuses anything, and
    returns kubectl's warnings (PodSecurity warns about workload templates it would refuse as pods)."""
    path = tmp_path / f"{uuid.uuid4().hex}.yaml"
    path.write_text(dump_documents(objects))
    done = subprocess.run(
        [
            str(control_plane.bin_dir / "kubectl"),
            f"--kubeconfig={control_plane.admin_kubeconfig}",
            "apply",
            "--dry-run=server",
            "-f",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"{done.stderr}\n{path.read_text()}"
    return done.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_every_generated_manifest_passes_server_side_dry_run_under_restricted_pod_security(
    kind: str, active: Allocation, control_plane: ControlPlane, tmp_path: Path
) -> None:
    # given: the pool's node selection too (GPU feature discovery's labels, as a pool would select its nodes)
    target = dataclasses.replace(
        claim_target(active), node_selector="nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3,nvidia.com/mig.capable"
    )
    objects = build_manifests(target, parse_options({"kind": kind, "name": f"w-{kind}"}, target))
    # when
    warnings = dry_run(control_plane, objects, tmp_path)
    # then
    assert "PodSecurity" not in warnings, warnings


def user_manifest(kind: str) -> dict[str, Any]:
    """A workload of `kind` as a team writes it: no claim, no namespace, restricted-compliant."""
    name = f"mine-{kind.lower()}"
    labels = {"app": name}
    pod_spec: dict[str, Any] = {
        **RESTRICTED_POD,
        "containers": [
            {"name": "trainer", "image": "example.org/train:1", **RESTRICTED_CONTAINER},
            {"name": "logger", "image": "example.org/log:1", **RESTRICTED_CONTAINER},
        ],
    }
    if kind in ("Job", "CronJob"):
        pod_spec["restartPolicy"] = "Never"
    template = {"metadata": {"labels": labels}, "spec": pod_spec}
    body: dict[str, Any] = {"metadata": {"name": name, "labels": labels}}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": kind, **body, "spec": pod_spec}
    if kind == "PodTemplate":
        return {"apiVersion": "v1", "kind": kind, **body, "template": template}
    if kind == "ReplicationController":
        return {
            "apiVersion": "v1",
            "kind": kind,
            **body,
            "spec": {"replicas": 1, "selector": labels, "template": template},
        }
    if kind == "Job":
        return {"apiVersion": "batch/v1", "kind": kind, **body, "spec": {"template": template}}
    if kind == "CronJob":
        return {
            "apiVersion": "batch/v1",
            "kind": kind,
            **body,
            "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": template}}},
        }
    spec: dict[str, Any] = {"replicas": 1, "selector": {"matchLabels": labels}, "template": template}
    if kind == "StatefulSet":
        spec["serviceName"] = name
    return {"apiVersion": "apps/v1", "kind": kind, **body, "spec": spec}


def test_every_attached_kind_passes_server_side_dry_run(
    active: Allocation, control_plane: ControlPlane, tmp_path: Path
) -> None:
    # given: one multi-document file with every kind attach knows
    documents = [user_manifest(kind) for kind in sorted(POD_SPEC_PATHS)]
    # when: the claim goes to the trainer containers only
    result, attached = attach_claims(documents, claim_target(active), containers=("trainer",))
    # then
    assert [a.containers for a in attached] == [("trainer",)] * len(POD_SPEC_PATHS)
    warnings = dry_run(control_plane, result, tmp_path)
    assert "PodSecurity" not in warnings, warnings


def test_a_pod_from_the_template_is_scheduled_onto_the_claims_node_with_the_claim_reserved_for_it(
    active: Allocation, kube_world: KubeWorld, admin: client.ApiClient
) -> None:
    # given
    target = dataclasses.replace(claim_target(active), node_selector="nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3")
    (pod,) = build_manifests(target, parse_options({"kind": "pod", "name": "smoke"}, target))
    claim = claim_json(admin, target.namespace, active.claim_name)
    node = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]
    # when: the tenant's pod is created (no kubelet runs, so it stays Pending once bound)
    created = client.CoreV1Api(admin).create_namespaced_pod(target.namespace, body=pod)
    # then
    core = client.CoreV1Api(admin)
    bound = wait_for(
        "the pod to be scheduled", lambda: core.read_namespaced_pod("smoke", target.namespace).spec.node_name
    )
    assert bound == node == kube_world.nodes[0].name

    def reserved() -> list[str] | None:
        users = claim_json(admin, target.namespace, active.claim_name)["status"].get("reservedFor") or []
        uids = [u["uid"] for u in users]
        return uids if created.metadata.uid in uids else None

    assert created.metadata.uid in wait_for("the claim to be reserved for the pod", reserved)


def test_a_shared_requests_workloads_take_one_share_each_and_pass_dry_run(
    world: World, control_plane: ControlPlane, admin: client.ApiClient, settings: Any, tmp_path: Path
) -> None:
    # given: an active request for two 6000 MiB shares of an L4 (one claim per share)
    sw = make_shared_world(world, control_plane, admin, settings, kind=NodePool.Kind.SHARED, gpu_count=1)
    active = provision_and_wait(approve(sw, share_request(sw, memory_mib=6000, count=2)).pk)
    target = claim_target(active)
    # when
    objects = build_manifests(target, parse_options({"kind": "vllm"}, target))
    # then: a Service and a Deployment per share, each on its own claim, told its part of the GPU
    deployments = [o for o in objects if o["kind"] == "Deployment"]
    assert [d["spec"]["template"]["spec"]["resourceClaims"][0]["resourceClaimName"] for d in deployments] == (
        active.kube_claim_names
    )
    assert "--gpu-memory-utilization" in deployments[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    warnings = dry_run(control_plane, objects, tmp_path)
    assert "PodSecurity" not in warnings, warnings
    # and: a Pod for share 1 is bound to the node with that share's claim reserved for it
    (pod,) = build_manifests(target, parse_options({"kind": "pod", "name": "share", "share": 1}, target))
    created = client.CoreV1Api(admin).create_namespaced_pod(target.namespace, body=pod)
    core = client.CoreV1Api(admin)
    bound = wait_for(
        "the pod to be scheduled", lambda: core.read_namespaced_pod("share-1", target.namespace).spec.node_name
    )
    assert bound == sw.node.name

    def reserved() -> bool:
        users = claim_json(admin, target.namespace, active.kube_claim_names[1])["status"].get("reservedFor") or []
        return created.metadata.uid in [u["uid"] for u in users]

    wait_for("share 1's claim to be reserved for the pod", reserved)
