"""Static MIG in the fake fleet: what NVIDIA's DRA kubelet plugin publishes for MIG devices that already exist.

Without the DynamicMIG gate the driver (kubernetes-sigs/dra-driver-nvidia-gpu, cmd/gpu-kubelet-plugin at
95932046: deviceinfo.go `MigDeviceInfo.GetDevice`, driver.go `generateCombinedResourceSlices`) publishes, per
GPU with MIG on, one slice holding the MIG devices that exist on it and nothing else: no counter sets, no
consumed counters, no full GPU. Each device is named like a DynamicMIG one (`gpu-<minor>-mig-<profile>-<profile
id>-<start>`, MigSpecTuple.ToCanonicalName), carries the MIG attributes plus `uuid` (the MIG device UUID) and
the profile's capacities plus `memorySlice<i>: 1` for each memory slot it takes. The plugin reads the GPUs once,
at start: a layout changed behind it shows only after a restart, which republishes the pool under a higher
generation (shared/reference/dra-mig.md §3).

`static_slices` builds the bodies from an `agent.nvml.Inventory` (the fake NVML's, in tests), so a test can
play the plugin's restart: change the fake GPUs, then `republish_static` the node's pool.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from kubernetes import client

from agent.nvml import GpuInfo, Inventory
from allocations.cluster.fake_fleet import DRIVER, _attributes, _capacity, _figures
from allocations.mig.catalog import GpuModel
from allocations.placement import dra_device_name


def _static_devices(model: GpuModel, gpu: GpuInfo, gpu_count: int) -> list[dict[str, Any]]:
    common = _attributes(model, gpu.minor, gpu_count)
    devices: list[dict[str, Any]] = []
    for gi in gpu.instances:
        profile = model.profile(gi.profile)
        mig_uuid = next((ci.uuid for ci in gi.compute_instances if ci.uuid), "")
        if not mig_uuid:
            continue  # a GPU instance without a compute instance is no MIG device: the driver cannot hand it out
        capacity = _capacity(_figures(model, profile))
        capacity |= {f"memorySlice{s}": {"value": "1"} for s in range(gi.start, gi.start + gi.size)}
        devices.append(
            {
                "name": dra_device_name(
                    gpu_index=gpu.minor, profile=profile.name, profile_id=profile.profile_id, start=gi.start
                ),
                "attributes": {
                    "type": {"string": "mig"},
                    "parentUUID": {"string": gpu.uuid},
                    "profile": {"string": profile.name},
                    "uuid": {"string": mig_uuid},
                }
                | common,
                "capacity": capacity,
            }
        )
    return sorted(devices, key=lambda d: d["name"].encode())


def static_slices(
    model: GpuModel, node: str, node_uid: str, inventory: Inventory, *, generation: int = 1
) -> list[dict[str, Any]]:
    """The driver's slices for `node` whose GPUs hold what `inventory` lists (bodies to create): one slice per
    GPU with MIG on, in PCI bus id order (the fake fleet's bus ids follow the minor number)."""
    gpus = sorted((g for g in inventory.gpus if g.mig_current), key=lambda g: g.minor)
    owner = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}]
    pool = {"name": node, "generation": generation, "resourceSliceCount": len(gpus)}
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"generateName": f"{i:05x}-{DRIVER}-{node}-", "ownerReferences": copy.deepcopy(owner)},
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": dict(pool),
                "devices": _static_devices(model, gpu, len(inventory.gpus)),
            },
        }
        for i, gpu in enumerate(gpus)
    ]


def node_slices(api: client.ApiClient, node: str) -> list[Any]:
    """The `gpu.nvidia.com` slices of `node`'s pool as the API server has them."""
    resource = client.ResourceV1Api(api)
    found = resource.list_resource_slice(field_selector=f"spec.nodeName={node},spec.driver={DRIVER}")
    return list(found.items)


def pool_generation(api: client.ApiClient, node: str) -> int:
    """The highest generation of the node's pool (0: no slice)."""
    return max((int(s.spec.pool.generation) for s in node_slices(api, node)), default=0)


def republish_static(
    api: client.ApiClient, model: GpuModel, node: str, node_uid: str, inventory: Inventory
) -> tuple[int, tuple[str, ...]]:
    """What a restarted plugin does: publish the node's pool again under the next generation, then delete the
    slices of the old one (the resourceslice controller's order). Returns the new generation and slice names."""
    resource = client.ResourceV1Api(api)
    old = node_slices(api, node)
    generation = max((int(s.spec.pool.generation) for s in old), default=0) + 1
    bodies: Sequence[Any] = static_slices(model, node, node_uid, inventory, generation=generation)
    names = tuple(str(getattr(resource.create_resource_slice(body=body).metadata, "name", "")) for body in bodies)
    for stale in old:
        resource.delete_resource_slice(str(getattr(stale.metadata, "name", "")))
    return generation, names
