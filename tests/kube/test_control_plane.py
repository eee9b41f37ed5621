"""The real kube-scheduler allocates MIG slices from NVIDIA's DynamicMIG ResourceSlices.

Each test gets a node of its own with two H100 80GB (gpu_node: the example slices of
tests/kube/data, node, pool and GPU UUIDs renamed). The portal's ServiceAccount creates the namespaces, claims
and pods, as the portal will; the admin plays the driver (Node, DeviceClasses, ResourceSlices).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kube.conftest import DRIVER, ControlPlane, GpuNode, as_json, wait_for


def mig_claim(
    name: str, profile: str, gpu_uuid: str, tolerations: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """One MIG device of `profile` on the GPU whose UUID is `gpu_uuid`, in the driver's attribute names."""
    attrs = f"device.attributes['{DRIVER}']"
    extra = {"tolerations": tolerations} if tolerations else {}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "mig",
                        "exactly": {
                            "deviceClassName": "mig.nvidia.com",
                            "selectors": [
                                {"cel": {"expression": f"{attrs}.profile == '{profile}'"}},
                                {"cel": {"expression": f"{attrs}.parentUUID == '{gpu_uuid}'"}},
                            ],
                            **extra,
                        },
                    }
                ]
            }
        },
    }


def holder_pod(name: str, claim: str) -> dict[str, Any]:
    """A pause pod that references the claim: what makes the scheduler allocate it (no kubelet runs it)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "pause", "image": "pause:3.10", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
        },
    }


def request_slice(portal: client.ApiClient, ns: str, name: str, profile: str, gpu_uuid: str, **claim: Any) -> None:
    client.ResourceV1Api(portal).create_namespaced_resource_claim(ns, body=mig_claim(name, profile, gpu_uuid, **claim))
    client.CoreV1Api(portal).create_namespaced_pod(ns, body=holder_pod(name, name))


def read_claim(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    return as_json(api, client.ResourceV1Api(api).read_namespaced_resource_claim(name, ns))


def read_pod(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    return as_json(api, client.CoreV1Api(api).read_namespaced_pod(name, ns))


def wait_scheduled(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    return wait_for(f"pod {ns}/{name} to be scheduled", lambda: _scheduled(read_pod(api, ns, name)))


def _scheduled(pod: dict[str, Any]) -> dict[str, Any] | None:
    return pod if pod["spec"].get("nodeName") else None


def pod_scheduled_condition(pod: dict[str, Any]) -> dict[str, Any] | None:
    for cond in pod.get("status", {}).get("conditions", []):
        if cond["type"] == "PodScheduled":
            return cond
    return None


def wait_unschedulable(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    """Waits until the scheduler has tried the pod and given up on it for now."""

    def unschedulable() -> dict[str, Any] | None:
        pod = read_pod(api, ns, name)
        cond = pod_scheduled_condition(pod)
        return pod if cond and cond["status"] == "False" and cond["reason"] == "Unschedulable" else None

    return wait_for(f"the scheduler to find pod {ns}/{name} unschedulable", unschedulable)


def allocated(node: GpuNode, device: str, **result: Any) -> dict[str, Any]:
    """A claim's status.allocation for one device of `node`, as kube-scheduler writes it."""
    return {
        "devices": {"results": [{"request": "mig", "driver": DRIVER, "pool": node.name, "device": device, **result}]},
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node.name]}]}]
        },
    }


def allocation_of(claim: dict[str, Any]) -> dict[str, Any] | None:
    allocation = claim.get("status", {}).get("allocation")
    if allocation is None:
        return None
    # allocationTimestamp is a time; the rest is exact.
    return {key: value for key, value in allocation.items() if key != "allocationTimestamp"}


def test_resource_v1_is_served_with_the_partitionable_fields_kept(
    control_plane: ControlPlane, admin: client.ApiClient, gpu_node: Callable[..., GpuNode]
) -> None:
    versions = client.ApisApi(admin).get_api_versions()
    groups = {group.name: [v.version for v in group.versions] for group in versions.groups}
    assert groups["resource.k8s.io"] == ["v1"]  # the beta versions are off by default, as on OpenShift
    assert client.VersionApi(admin).get_code().git_version == "v1.37.2"

    node = gpu_node()
    # The server stored NVIDIA's slices field for field: had DRAPartitionableDevices been off, it would have
    # dropped sharedCounters and consumesCounters without an error.
    api = client.ResourceV1Api(admin)
    stored = [as_json(admin, api.read_resource_slice(name))["spec"] for name in node.slice_names]
    assert stored == [body["spec"] for body in node.slices]
    assert [c["name"] for c in stored[0]["sharedCounters"]] == ["gpu-0-counter-set", "gpu-1-counter-set"]
    assert stored[0]["sharedCounters"][0]["counters"]["memory-slice-7"] == {"value": "1"}
    devices = {d["name"]: d for d in stored[1]["devices"]}
    assert devices["gpu-0-mig-1g10gb-19-3"]["consumesCounters"][0]["counterSet"] == "gpu-0-counter-set"
    assert sorted(devices["gpu-0-mig-1g10gb-19-3"]["consumesCounters"][0]["counters"]) == [
        "copy-engines",
        "decoders",
        "encoders",
        "jpeg-engines",
        "memory",
        "memory-slice-3",
        "multiprocessors",
        "ofa-engines",
    ]
    listed = api.list_resource_slice(field_selector=f"spec.driver={DRIVER},spec.nodeName={node.name}")
    assert sorted(s.metadata.name for s in listed.items) == sorted(node.slice_names)


def test_the_portal_identity_has_its_rbac_and_no_more(
    control_plane: ControlPlane, portal: client.ApiClient, gpu_node: Callable[..., GpuNode]
) -> None:
    node = gpu_node()
    res = client.ResourceV1Api(portal)
    # It reads what the driver publishes ...
    assert {s.metadata.name for s in res.list_resource_slice(field_selector=f"spec.nodeName={node.name}").items} == set(
        node.slice_names
    )
    assert {c.metadata.name for c in res.list_device_class().items} >= {"gpu.nvidia.com", "mig.nvidia.com"}
    assert client.CoreV1Api(portal).read_node(node.name).metadata.labels["nvidia.com/mig.capable"] == "true"
    # ... and cannot write it, nor read secrets.
    with pytest.raises(ApiException) as denied:
        res.delete_resource_slice(node.slice_names[0])
    assert denied.value.status == 403
    assert json.loads(denied.value.body)["message"] == (
        f'resourceslices.resource.k8s.io "{node.slice_names[0]}" is forbidden: '
        'User "system:serviceaccount:fatia-system:fatia-portal" cannot delete resource "resourceslices" '
        'in API group "resource.k8s.io" at the cluster scope'
    )
    with pytest.raises(ApiException) as denied:
        client.CoreV1Api(portal).list_namespaced_secret("kube-system")
    assert denied.value.status == 403


def test_scheduler_allocates_the_mig_slice_by_profile_and_gpu(
    portal: client.ApiClient, gpu_node: Callable[..., GpuNode], namespace: Callable[[str], str]
) -> None:
    node = gpu_node()
    ns = namespace("team-a")
    # A 1g.10gb on GPU 1: without the GPU selector the allocator would take GPU 0's first 1g.10gb.
    request_slice(portal, ns, "notebook", "1g.10gb", node.gpu_uuids[1])

    pod = wait_scheduled(portal, ns, "notebook")
    assert pod["spec"]["nodeName"] == node.name
    claim = read_claim(portal, ns, "notebook")
    assert allocation_of(claim) == allocated(node, "gpu-1-mig-1g10gb-19-0")
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "notebook", "uid": pod["metadata"]["uid"]}]


def test_counters_keep_a_full_gpu_from_being_sliced_again(
    portal: client.ApiClient, gpu_node: Callable[..., GpuNode], namespace: Callable[[str], str]
) -> None:
    node = gpu_node()
    gpu0, gpu1 = node.gpu_uuids
    ns = namespace("team-b")

    # 7g.80gb takes every counter of GPU 0: all 8 memory slices and 132 of its 132 multiprocessors.
    request_slice(portal, ns, "whole-gpu0", "7g.80gb", gpu0)
    wait_scheduled(portal, ns, "whole-gpu0")
    assert allocation_of(read_claim(portal, ns, "whole-gpu0")) == allocated(node, "gpu-0-mig-7g80gb-0-0")

    # So a 1g.10gb on GPU 0 does not fit: its pod stays Pending and its claim unallocated ...
    request_slice(portal, ns, "small-gpu0", "1g.10gb", gpu0)
    pending = wait_unschedulable(portal, ns, "small-gpu0")
    assert pending["status"]["phase"] == "Pending"
    assert "nodeName" not in pending["spec"]
    condition = pod_scheduled_condition(pending)
    assert condition is not None
    message = condition["message"]
    assert message.startswith("0/"), message
    assert "cannot allocate all claims" in message, message
    assert allocation_of(read_claim(portal, ns, "small-gpu0")) is None

    # ... while the same request on GPU 1 is allocated at once.
    request_slice(portal, ns, "small-gpu1", "1g.10gb", gpu1)
    assert wait_scheduled(portal, ns, "small-gpu1")["spec"]["nodeName"] == node.name
    assert allocation_of(read_claim(portal, ns, "small-gpu1")) == allocated(node, "gpu-1-mig-1g10gb-19-0")

    # GPU 0 is still full.
    assert "nodeName" not in read_pod(portal, ns, "small-gpu0")["spec"]
    assert allocation_of(read_claim(portal, ns, "small-gpu0")) is None

    # Releasing the 7g.80gb (pod, then claim: kube-controller-manager deallocates it) gives GPU 0's first
    # 1g.10gb placement to the waiting pod.
    client.CoreV1Api(portal).delete_namespaced_pod("whole-gpu0", ns, grace_period_seconds=0)
    client.ResourceV1Api(portal).delete_namespaced_resource_claim("whole-gpu0", ns)
    assert wait_scheduled(portal, ns, "small-gpu0")["spec"]["nodeName"] == node.name
    assert allocation_of(read_claim(portal, ns, "small-gpu0")) == allocated(node, "gpu-0-mig-1g10gb-19-0")


def test_a_device_taint_keeps_untolerating_claims_off_the_device(
    portal: client.ApiClient, gpu_node: Callable[..., GpuNode], namespace: Callable[[str], str]
) -> None:
    # What the driver does to a device it finds unhealthy (DRADeviceTaints, GA in 1.37).
    taint = {"key": "gpu.nvidia.com/unhealthy", "value": "xid-79", "effect": "NoSchedule"}
    node = gpu_node(device_taints={"gpu-1-mig-1g10gb-19-0": [taint]})
    ns = namespace("team-c")

    request_slice(portal, ns, "plain", "1g.10gb", node.gpu_uuids[1])
    wait_scheduled(portal, ns, "plain")
    assert allocation_of(read_claim(portal, ns, "plain")) == allocated(node, "gpu-1-mig-1g10gb-19-1")

    toleration = {"key": "gpu.nvidia.com/unhealthy", "operator": "Exists", "effect": "NoSchedule"}
    request_slice(portal, ns, "tolerant", "1g.10gb", node.gpu_uuids[1], tolerations=[toleration])
    wait_scheduled(portal, ns, "tolerant")
    assert allocation_of(read_claim(portal, ns, "tolerant")) == allocated(
        node, "gpu-1-mig-1g10gb-19-0", tolerations=[toleration]
    )


def test_device_taint_rules_steer_the_scheduler_to_the_slot_left_untainted(
    admin: client.ApiClient, gpu_node: Callable[..., GpuNode], namespace: Callable[[str], str]
) -> None:
    # given: DeviceTaintRules (resource.k8s.io/v1 in 1.37) on the 1g.10gb devices at slots 0-5 of GPU 0
    node = gpu_node()
    ns = namespace("team-d")
    api = client.ResourceV1Api(admin)
    names = []
    for start in range(6):
        name = f"steer-{node.name}-{start}"
        api.create_device_taint_rule(
            body={
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceTaintRule",
                "metadata": {"name": name},
                "spec": {
                    "deviceSelector": {"driver": DRIVER, "pool": node.name, "device": f"gpu-0-mig-1g10gb-19-{start}"},
                    "taint": {"key": "fatia.io/steer", "value": "test", "effect": "NoSchedule"},
                },
            }
        )
        names.append(name)

    # when: a claim for a 1g.10gb on GPU 0 is scheduled
    request_slice(admin, ns, "steered", "1g.10gb", node.gpu_uuids[0])
    wait_scheduled(admin, ns, "steered")

    # then: the scheduler took the first untainted device whose counters fit: slot 6
    assert allocation_of(read_claim(admin, ns, "steered")) == allocated(node, "gpu-0-mig-1g10gb-19-6")

    # when: the rules are gone, the next claim takes first fit again
    for name in names:
        api.delete_device_taint_rule(name)
    wait_for(
        "the rules to be gone", lambda: not any(r.metadata.name in names for r in api.list_device_taint_rule().items)
    )
    request_slice(admin, ns, "after", "1g.10gb", node.gpu_uuids[0])
    wait_scheduled(admin, ns, "after")
    assert allocation_of(read_claim(admin, ns, "after")) == allocated(node, "gpu-0-mig-1g10gb-19-0")
