"""A fake fleet of shareable whole GPUs (issue 13): what NVIDIA's DRA driver publishes for GPUs without MIG (L4,
L40S, ...) or MIG-capable GPUs kept whole, with its ConsumableShares feature on.

The format follows kubernetes-sigs/dra-driver-nvidia-gpu at 95932046 (docs/sharing.md, "On Kubernetes"):

- without DynamicMIG the driver publishes ONE ResourceSlice per node holding every device (driver.go,
  publishResources), no counter sets; a GPU is the device `gpu-<minor>` with the attributes of
  GpuInfo.Attributes() (deviceinfo.go) and one capacity, `memory`, its NVML total memory in bytes
  (partitions.go, fullGpuCapacity);
- with `--consumable-shares=memory` (consumable_shares.go, applyConsumableShares) each such device also has
  `allowMultipleAllocations: true`, its memory rounded down to whole MiB, and a request policy on `memory`:
  default the whole memory (a claim that asks for no memory takes the whole GPU), valid range 1Mi to the whole
  memory in steps of 1Mi. So kube-scheduler hands out one GPU to several claims, each consuming what it asked for,
  and refuses a claim that no longer fits.

The driver walks a Go map to build the slice, so its device order is not defined; here the devices come sorted
by name (byte order), so that a test sees the same slice each time. The GPUs' memory sizes are this fake driver's
table (NVML's totals as nvidia-smi shows them), not a catalog: the portal reads what a node publishes.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from allocations.cluster.fake_fleet import (
    CUDA_DRIVER_VERSION,
    DRIVER,
    DRIVER_VERSION,
    PCI,
    FakeNode,
    create_ready_node,
    gpu_uuid,
    publish_slices,
)
from allocations.cluster.kube import mib_quantity


@dataclass(frozen=True, slots=True)
class ShareableGpu:
    """A GPU model as this fake driver publishes it whole: NVML's total memory, architecture, compute capability,
    whether it could run MIG (GFD's `nvidia.com/mig.capable`)."""

    name: str
    memory_mib: int
    architecture: str
    compute_capability: str
    mig_capable: bool = False


SHAREABLE_GPUS = {
    gpu.name: gpu
    for gpu in (
        ShareableGpu("NVIDIA L4", 23034, "Ada Lovelace", "8.9.0"),
        ShareableGpu("NVIDIA L40S", 46068, "Ada Lovelace", "8.9.0"),
        ShareableGpu("NVIDIA A10", 23028, "Ampere", "8.6.0"),
        ShareableGpu("Tesla T4", 15360, "Turing", "7.5.0"),
        # A MIG-capable GPU kept whole: the same device format, MIG off (GFD label and the H100's memory).
        ShareableGpu("NVIDIA H100 80GB HBM3", 81559, "Hopper", "9.0.0", mig_capable=True),
    )
}


def memory_capacity(memory_mib: int) -> dict[str, Any]:
    """The `memory` capacity of a shareable GPU, with the request policy of `--consumable-shares=memory`."""
    whole = mib_quantity(memory_mib)
    return {
        "value": whole,
        "requestPolicy": {"default": whole, "validRange": {"min": "1Mi", "max": whole, "step": "1Mi"}},
    }


def shared_gpu_device(gpu: ShareableGpu, node: str, index: int, gpu_count: int) -> dict[str, Any]:
    """The device `gpu-<index>` as the driver publishes it with consumable shares on."""
    bus, root = PCI[index % len(PCI)]
    domain = index // len(PCI)
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": gpu_uuid(node, index)},
            "productName": {"string": gpu.name},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": gpu.architecture},
            "cudaComputeCapability": {"version": gpu.compute_capability},
            "driverVersion": {"version": DRIVER_VERSION},
            "cudaDriverVersion": {"version": CUDA_DRIVER_VERSION},
            "resource.kubernetes.io/pciBusID": {"string": f"{domain:04x}:{bus:02x}:00.0"},
            "resource.kubernetes.io/pcieRoot": {"string": f"pci{domain:04x}:{root:02x}"},
            "resource.kubernetes.io/numaNode": {"int": 0 if index < max(gpu_count // 2, 2) else 1},
            "addressingMode": {"string": "HMM"},
        },
        "capacity": {"memory": memory_capacity(gpu.memory_mib)},
        "allowMultipleAllocations": True,
    }


def shared_resource_slices(gpu: ShareableGpu, node: str, node_uid: str, gpu_count: int) -> list[dict[str, Any]]:
    """The driver's one ResourceSlice for a node of `gpu_count` shareable GPUs (a body to create)."""
    owner = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}]
    devices = [shared_gpu_device(gpu, node, i, gpu_count) for i in range(gpu_count)]
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"generateName": f"00000-{DRIVER}-{node}-", "ownerReferences": copy.deepcopy(owner)},
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": sorted(devices, key=lambda d: str(d["name"]).encode()),
            },
        }
    ]


def shared_gfd_labels(gpu: ShareableGpu, gpu_count: int) -> dict[str, str]:
    """What GPU feature discovery labels a node of these GPUs with (no MIG strategy: they run whole)."""
    major, minor, _ = gpu.compute_capability.split(".")
    return {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": gpu.name.replace(" ", "-"),
        "nvidia.com/gpu.family": gpu.architecture.split()[0].lower(),
        "nvidia.com/gpu.count": str(gpu_count),
        "nvidia.com/gpu.memory": str(gpu.memory_mib),
        "nvidia.com/gpu.compute.major": major,
        "nvidia.com/gpu.compute.minor": minor,
        "nvidia.com/mig.capable": "true" if gpu.mig_capable else "false",
        "nvidia.com/mps.capable": "true",
        "nvidia.com/cuda.driver-version.full": "580.95.05",
    }


def publish_shared_node(
    api: client.ApiClient, model: str, name: str, gpu_count: int, *, labels: dict[str, str] | None = None
) -> FakeNode:
    """A Ready node with `gpu_count` shareable GPUs of `model` (a key of SHAREABLE_GPUS) and its slice."""
    gpu = SHAREABLE_GPUS[model]
    uid = create_ready_node(api, name, {**shared_gfd_labels(gpu, gpu_count), **(labels or {})})
    names = publish_slices(api, shared_resource_slices(gpu, name, uid, gpu_count))
    return FakeNode(name, uid, tuple(gpu_uuid(name, i) for i in range(gpu_count)), names)
