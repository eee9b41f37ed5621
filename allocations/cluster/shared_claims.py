"""The ResourceClaims and holder pod of a request for shares of whole GPUs (shared and MPS pools, issue 13).

One claim per share (Allocation.kube_claim_names), so that each share can go to a pod of its own: a claim asks
the `gpu.nvidia.com` class for the one GPU its placement chose (selected by `uuid`) and for `memory_mib` of that
GPU's `memory` capacity (DRA consumable capacity: the driver publishes shareable GPUs with
`allowMultipleAllocations` and a request policy on `memory`; allocations/cluster/fake_shared.py). kube-scheduler
hands one GPU to several claims, across tenants and namespaces, until their memory requests fill it, and leaves a
claim that no longer fits unallocated. Each claim carries NVIDIA's opaque `GpuConfig` with the pool's sharing:
time-slicing with the pool's interval, or MPS with the share's pinned memory limit and active-thread percentage.
The one holder pod, on the placements' node, references every claim, so they are allocated together.
"""

from __future__ import annotations

from typing import Any

from allocations.cluster import kube
from allocations.models import Allocation, NodePool

GPU_DEVICE_CLASS = "gpu.nvidia.com"
# NVIDIA's opaque configuration type (api/nvidia.com/resource/v1beta1: GpuConfig, GpuSharing).
GPU_CONFIG_API_VERSION = "resource.nvidia.com/v1beta1"
SHARE_REQUEST = "share"


def gpu_config(*, pool: NodePool, memory_mib: int, thread_percentage: int | None) -> dict[str, Any]:
    """NVIDIA's GpuConfig for a share: TimeSlicing with the pool's interval, or MPS with the share's memory as
    the pinned device memory limit and its active-thread percentage (100 when the request named none)."""
    if pool.kind == NodePool.Kind.MPS:
        sharing: dict[str, Any] = {
            "strategy": "MPS",
            "mpsConfig": {
                "defaultActiveThreadPercentage": thread_percentage or 100,
                "defaultPinnedDeviceMemoryLimit": kube.mib_quantity(memory_mib),
            },
        }
    else:
        sharing = {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": pool.sharing_interval}}
    return {"apiVersion": GPU_CONFIG_API_VERSION, "kind": "GpuConfig", "sharing": sharing}


def shared_cluster_specs(
    allocation: Allocation, tolerations: tuple[kube.Toleration, ...]
) -> tuple[list[kube.ClaimSpec], kube.HolderPodSpec]:
    """The claims (one per placement, in placement order) and the holder pod of a planned shared allocation."""
    placements = list(allocation.placements.select_related("gpu__node").order_by("pk"))
    namespace = allocation.namespace
    names = allocation.kube_claim_names
    claims = [
        kube.ClaimSpec(
            namespace=namespace,
            name=name,
            allocation_uuid=str(allocation.uuid),
            tenant_slug=allocation.tenant.slug,
            requests=(
                kube.DeviceRequestSpec(
                    name=SHARE_REQUEST,
                    profile=p.profile,
                    gpu_uuid=p.gpu.uuid,
                    memory_mib=p.memory_mib or allocation.memory_mib or 0,
                ),
            ),
            device_class=GPU_DEVICE_CLASS,
            gpu_config=gpu_config(
                pool=allocation.pool,
                memory_mib=p.memory_mib or allocation.memory_mib or 0,
                thread_percentage=allocation.thread_percentage,
            ),
        )
        for name, p in zip(names, placements, strict=True)
    ]
    pod = kube.HolderPodSpec(
        namespace=namespace,
        name=allocation.kube_name,
        claim_names=tuple(names),
        node_name=placements[0].gpu.node.name,
        allocation_uuid=str(allocation.uuid),
        tenant_slug=allocation.tenant.slug,
        tolerations=tolerations,
    )
    return claims, pod
