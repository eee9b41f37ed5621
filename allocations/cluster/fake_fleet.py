"""A fake GPU fleet on a real API server: what the kubelet, GPU feature discovery and NVIDIA's DRA kubelet
plugin would publish for a node, for any GPU model of the MIG catalog. Tests and bench/provision.py use it.

`resource_slices` writes the driver's DynamicMIG layout (kubernetes-sigs/dra-driver-nvidia-gpu, see
shared/reference/dra-mig.md §3 and tests/kube/data): slice 0 holds one counter set per GPU (multiprocessors,
engines, memory and one counter per memory slice), then one slice per GPU holds the full GPU and every MIG
profile x placement, each consuming its counters. Figures come from the catalog (allocations/mig); where the
catalog has none, this fake driver makes some up (`driver_counters`): such a fleet exercises the counters, not
NVML's exact numbers, and the portal uses them only as what that node publishes.

Where the driver's own choices show, they are followed as its source (cmd/gpu-kubelet-plugin/driver.go, nvlib.go
at 95932046) and the resourceslice controller it uses (k8s.io/dynamic-resource-allocation) make them:

- the GPUs' slices come in PCI bus id order, and a slice's devices are sorted by name as strings (byte order:
  `...-19-1` < `...-19-10` < `...-19-2`). kube-scheduler walks them in that order and takes the first device that
  fits, so this order is the one allocations/mig/scheduler.py predicts;
- a slice's generateName starts with its index in the pool as 5 hex digits (`0000a-` for the eleventh);
- on Ampere (A100, A30), which cannot leave MIG mode without a GPU reset, the full GPU `gpu-<i>` is not
  published while MIG is on (the only way this fleet runs them); Hopper and later publish it.

`publish_node` writes a Ready Node with GFD labels and its slices; `register_node_in_pool` records the same
node and GPU UUIDs in the portal's database. No kubelet runs, so the admin client plays the node's parts.
"""

from __future__ import annotations

import copy
import time
import uuid
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from allocations.mig import counters
from allocations.mig.catalog import EngineCounts, GpuModel, MigProfile
from allocations.placement import dra_device_name

DRIVER = "gpu.nvidia.com"
DRIVER_VERSION = "580.95.5"
CUDA_DRIVER_VERSION = "13.0.0"
# (bus, root port) of GPUs 0-7 on a typical 8-GPU board; GPUs 0 and 1 are those of NVIDIA's example. GPUs 8-15
# (register_node allows 16) sit in the next PCI domain, so every GPU of a node has a bus id of its own and bus id
# order is index order, as the driver's slice order needs.
PCI = [(0x18, 0x15), (0x2A, 0x27), (0x3A, 0x37), (0x5D, 0x5A), (0x9A, 0x97), (0xAB, 0xA8), (0xBA, 0xB7), (0xDB, 0xD8)]


def _nvidia_device_class(name: str, device_type: str, **spec: Any) -> dict[str, Any]:
    expression = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{device_type}'"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}], **spec},
    }


# The DeviceClasses the driver's Helm chart installs (deployments/helm/dra-driver-nvidia-gpu/templates/).
NVIDIA_DEVICE_CLASSES: list[dict[str, Any]] = [
    _nvidia_device_class("gpu.nvidia.com", "gpu", extendedResourceName="nvidia.com/gpu"),
    _nvidia_device_class("mig.nvidia.com", "mig"),
    _nvidia_device_class("vfio.gpu.nvidia.com", "vfio"),
]


def gpu_uuid(node: str, index: int) -> str:
    """A stable UUID per node and GPU, so a selector on a GPU's UUID means one GPU of the fleet."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'gpu{index}.{node}.fatia.test')}"


def _architecture(model: GpuModel) -> tuple[str, str]:
    name = model.name
    if "Blackwell" in name or "RTX PRO" in name:
        return "Blackwell", "12.0.0"
    if "B200" in name:
        return "Blackwell", "10.0.0"
    if "H100" in name or "H200" in name or "GH200" in name:
        return "Hopper", "9.0.0"
    return "Ampere", "8.0.0"


def _full_profile(model: GpuModel) -> MigProfile:
    return counters.full_profile(model)


def driver_counters(model: GpuModel, profile: MigProfile) -> dict[str, int]:
    """What this fake driver says a device of `profile` consumes: the catalog's NVML figures where it has them.
    Where it has none (A100-40GB 1g.10gb, B200 3g/4g/7g, ...) a real driver would read them from NVML; this fake
    one makes some up from the profile's share of the whole GPU, so that such a fleet can be published at all.
    They are this fake driver's figures, not NVIDIA's: the portal never uses them unless a (fake) node
    publishes them (allocations/mig/counters.py)."""
    known = counters.profile_counters(model, profile)
    if known is not None:
        return known
    full = counters.full_profile(model)
    full_sm = full.sm_count or 16 * model.compute_slices
    sm = profile.sm_count or full_sm * profile.compute_slices // model.compute_slices
    engines = profile.engines or _engines_by_share(model, profile, full)
    # The memory the whole GPU's device has (not the board's), shared by memory slot: never more than fits.
    memory = profile.memory_mib or (full.memory_mib or model.memory_mib) * profile.memory_slices // model.memory_slices
    return dict(
        zip(counters.NAMES, (sm, engines.ce, engines.dec, engines.enc, engines.jpeg, engines.ofa, memory), strict=True)
    )


def _engines_by_share(model: GpuModel, profile: MigProfile, full: MigProfile) -> EngineCounts:
    """The profile's share of the whole GPU's engines (rounded down, at least one copy engine), all JPEG and
    OFA engines for media-extension profiles; one of each per compute slice where the whole GPU's are unknown."""
    whole = full.engines
    if whole is None or profile is full:
        return EngineCounts(
            dec=profile.compute_slices,
            ce=profile.compute_slices,
            jpeg=profile.compute_slices,
            ofa=1 if profile is full or profile.has_media_extensions else 0,
        )
    share = profile.compute_slices / model.compute_slices
    media = profile.has_media_extensions
    return EngineCounts(
        dec=max(int(whole.dec * share), 1 if media else 0),
        enc=int(whole.enc * share),
        ce=max(int(whole.ce * share), 1),
        jpeg=whole.jpeg if media else int(whole.jpeg * share),
        ofa=whole.ofa if media else 0,
    )


def _figures(model: GpuModel, profile: MigProfile) -> dict[str, str]:
    """A profile's counters as the driver writes them (allocations/mig/counters.py), quantities as strings."""
    figures = {name: str(v) for name, v in driver_counters(model, profile).items()}
    memory = driver_counters(model, profile)["memory"]
    # The API server keeps quantities in canonical form: 40960Mi is stored as 40Gi.
    figures["memory"] = f"{memory // 1024}Gi" if memory % 1024 == 0 else f"{memory}Mi"
    return figures


def _quantities(figures: dict[str, str]) -> dict[str, dict[str, str]]:
    return {name: {"value": value} for name, value in figures.items()}


def _capacity(figures: dict[str, str]) -> dict[str, dict[str, str]]:
    names = {
        "multiprocessors": "multiprocessors",
        "copy-engines": "copyEngines",
        "decoders": "decoders",
        "encoders": "encoders",
        "jpeg-engines": "jpegEngines",
        "ofa-engines": "ofaEngines",
        "memory": "memory",
    }
    return {names[k]: {"value": v} for k, v in figures.items()}


def _attributes(model: GpuModel, index: int, gpu_count: int) -> dict[str, Any]:
    arch, capability = _architecture(model)
    bus, root = PCI[index % len(PCI)]
    domain = index // len(PCI)
    return {
        "productName": {"string": model.name},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": arch},
        "cudaComputeCapability": {"version": capability},
        "driverVersion": {"version": DRIVER_VERSION},
        "cudaDriverVersion": {"version": CUDA_DRIVER_VERSION},
        "resource.kubernetes.io/pciBusID": {"string": f"{domain:04x}:{bus:02x}:00.0"},
        "resource.kubernetes.io/pcieRoot": {"string": f"pci{domain:04x}:{root:02x}"},
        "resource.kubernetes.io/numaNode": {"int": 0 if index < max(gpu_count // 2, 2) else 1},
        "addressingMode": {"string": "HMM"},
    }


def _gpu_devices(model: GpuModel, node: str, index: int, gpu_count: int) -> list[dict[str, Any]]:
    common: dict[str, Any] = _attributes(model, index, gpu_count)
    parent = gpu_uuid(node, index)
    counter_set = f"gpu-{index}-counter-set"
    full = _figures(model, _full_profile(model))
    all_slices = {f"memory-slice-{s}": "1" for s in range(model.memory_slices)}
    devices: list[dict[str, Any]] = []
    if publishes_full_gpu(model):
        devices.append(
            {
                "name": f"gpu-{index}",
                "attributes": {"type": {"string": "gpu"}, "uuid": {"string": parent}, **common},
                "capacity": _capacity(full),
                "consumesCounters": [{"counterSet": counter_set, "counters": _quantities({**full, **all_slices})}],
            }
        )
    for profile in model.profiles:
        figures = _figures(model, profile)
        for placement in sorted(profile.placements):
            slots = {f"memory-slice-{s}": "1" for s in range(placement.start, placement.end)}
            devices.append(
                {
                    "name": dra_device_name(
                        gpu_index=index, profile=profile.name, profile_id=profile.profile_id, start=placement.start
                    ),
                    "attributes": {
                        "type": {"string": "mig"},
                        "parentUUID": {"string": parent},
                        "profile": {"string": profile.name},
                    }
                    | common,
                    "capacity": _capacity(figures),
                    "consumesCounters": [{"counterSet": counter_set, "counters": _quantities({**figures, **slots})}],
                }
            )
    # The driver sorts a GPU's devices by name (Go's slices.Sorted on strings: byte order).
    return sorted(devices, key=lambda d: d["name"].encode())


def publishes_full_gpu(model: GpuModel) -> bool:
    """Whether the driver publishes the full GPU next to its MIG devices: not on Ampere with MIG on (MIG mode
    cannot be switched off there without a GPU reset), on Hopper and later (it toggles MIG on demand)."""
    return _architecture(model)[0] != "Ampere"


# A ResourceSlice holds at most 8 counter sets (resource.k8s.io/v1 ResourceSliceMaxCounterSets, Kubernetes 1.35+).
MAX_COUNTER_SETS_PER_SLICE = 8


def resource_slices(model: GpuModel, node: str, node_uid: str, gpu_count: int) -> list[dict[str, Any]]:
    """The driver's ResourceSlices for `node` with `gpu_count` GPUs of `model` (bodies to create).

    Up to 8 GPUs this is the driver's layout exactly: one slice of counter sets, then one slice per GPU. The
    driver (at 95932046) would put the counter sets of more GPUs in that one slice too, which the API server
    refuses (8 counter sets per slice at most); here they go 8 to a slice, all before the GPUs' slices."""
    full = _figures(model, _full_profile(model))
    all_slices = {f"memory-slice-{s}": "1" for s in range(model.memory_slices)}
    owner = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}]
    counter_slices = max(1, -(-gpu_count // MAX_COUNTER_SETS_PER_SLICE))
    pool = {"name": node, "generation": 1, "resourceSliceCount": counter_slices + gpu_count}

    def body(i: int, spec: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            # The resourceslice controller's prefix: the slice's index in the pool, in hex, 5 digits at least.
            "metadata": {"generateName": f"{i:05x}-{DRIVER}-{node}-", "ownerReferences": copy.deepcopy(owner)},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": dict(pool), **spec},
        }

    counter_sets = [
        {"name": f"gpu-{i}-counter-set", "counters": _quantities({**full, **all_slices})} for i in range(gpu_count)
    ]
    per = MAX_COUNTER_SETS_PER_SLICE
    slices = [body(k, {"sharedCounters": counter_sets[k * per : (k + 1) * per]}) for k in range(counter_slices)]
    slices += [body(counter_slices + i, {"devices": _gpu_devices(model, node, i, gpu_count)}) for i in range(gpu_count)]
    return slices


def gfd_labels(model: GpuModel, gpu_count: int) -> dict[str, str]:
    """What GPU feature discovery labels a node with (shared/reference/dra-mig.md §4)."""
    arch, capability = _architecture(model)
    major, minor, _ = capability.split(".")
    return {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-" + model.name.removeprefix("NVIDIA ").replace(" ", "-"),
        "nvidia.com/gpu.family": arch.lower(),
        "nvidia.com/gpu.count": str(gpu_count),
        "nvidia.com/gpu.memory": str(model.memory_mib),
        "nvidia.com/gpu.compute.major": major,
        "nvidia.com/gpu.compute.minor": minor,
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mps.capable": "true",
        "nvidia.com/cuda.driver-version.full": "580.95.05",
    }


def create_ready_node(api: client.ApiClient, name: str, labels: dict[str, str]) -> str:
    """A Node that looks Ready with no taints (no kubelet runs); returns its uid."""
    core = client.CoreV1Api(api)
    # Any: the client accepts API JSON for any body, its annotations name only the model classes.
    body: Any = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **labels}},
    }
    node = core.create_node(body=body)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    core.patch_node_status(
        name,
        body={
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "fake: no kubelet runs in the test control plane",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
            }
        },
    )
    # TaintNodesByCondition taints every new Node not-ready; with no kubelet and no node lifecycle controller
    # (deploy/control-plane.sh) nothing would lift it.
    core.patch_node(name, body={"spec": {"taints": None}})
    return str(getattr(node.metadata, "uid", ""))


@dataclass(frozen=True)
class FakeNode:
    name: str
    uid: str
    gpu_uuids: tuple[str, ...]
    slice_names: tuple[str, ...]


def publish_node(api: client.ApiClient, model: GpuModel, name: str, gpu_count: int) -> FakeNode:
    """A Ready node with `gpu_count` GPUs of `model` and the driver's slices for it (admin client)."""
    uid = create_ready_node(api, name, gfd_labels(model, gpu_count))
    resource = client.ResourceV1Api(api)
    bodies: list[Any] = resource_slices(model, name, uid, gpu_count)
    names = tuple(str(getattr(resource.create_resource_slice(body=body).metadata, "name", "")) for body in bodies)
    return FakeNode(name, uid, tuple(gpu_uuid(name, i) for i in range(gpu_count)), names)


def ensure_device_classes(api: client.ApiClient) -> None:
    """Install the driver's DeviceClasses (server-side apply: harmless when they exist)."""
    resource = client.ResourceV1Api(api)
    for body in NVIDIA_DEVICE_CLASSES:
        resource.patch_device_class(
            body["metadata"]["name"],
            body=copy.deepcopy(body),
            field_manager="fatia-fake-fleet",
            force=True,
            _content_type="application/apply-patch+yaml",
        )


# --- discovery: nodes as GPU feature discovery labels them, GPUs by minor number -------------------------------


def resource_slices_for_minors(
    model: GpuModel, node: str, node_uid: str, minors: list[int], *, generation: int = 1
) -> list[dict[str, Any]]:
    """The driver's slices for a node whose GPUs have the minor numbers `minors` (say 4, 1, 6: GPUs bound to
    another driver leave gaps), published in the order given rather than by minor, under pool `generation`.
    Built from `resource_slices`, so the device format is the same."""
    full = resource_slices(model, node, node_uid, max(minors) + 1)
    counters, devices = full[0], full[1:]
    wanted = set(minors)
    counters["spec"]["sharedCounters"] = [
        c for c in counters["spec"]["sharedCounters"] if int(c["name"].split("-")[1]) in wanted
    ]
    by_minor = {}
    for body in devices:
        names = [d["name"] for d in body["spec"]["devices"]]
        by_minor[int(names[0].split("-")[1])] = body
    slices = [counters, *(by_minor[m] for m in minors)]
    for body in slices:
        body["spec"]["pool"]["generation"] = generation
        body["spec"]["pool"]["resourceSliceCount"] = len(slices)
    return slices


def set_device_counters(slices: list[dict[str, Any]], profile: str, counters: dict[str, str]) -> None:
    """Change what every device of `profile` consumes (the driver of another release, say, publishes other
    figures than the catalog's): `counters` maps counter names to quantities, e.g. {"jpeg-engines": "7"}."""
    for body in slices:
        for device in body["spec"].get("devices", []):
            if device["attributes"].get("profile", {}).get("string") == profile:
                for consumed in device["consumesCounters"]:
                    consumed["counters"].update({k: {"value": v} for k, v in counters.items()})


def publish_slices(api: client.ApiClient, bodies: list[dict[str, Any]]) -> tuple[str, ...]:
    """Create the slices (admin client); their names."""
    resource = client.ResourceV1Api(api)
    created: list[Any] = [copy.deepcopy(body) for body in bodies]
    return tuple(str(getattr(resource.create_resource_slice(body=body).metadata, "name", "")) for body in created)


def publish_gpu_node(
    api: client.ApiClient, model: GpuModel, name: str, minors: list[int], *, labels: dict[str, str] | None = None
) -> FakeNode:
    """A Ready node labelled as GPU feature discovery does (plus `labels`), with the driver's slices for GPUs
    of the given minor numbers; FakeNode.gpu_uuids follows `minors`."""
    uid = create_ready_node(api, name, {**gfd_labels(model, len(minors)), **(labels or {})})
    names = publish_slices(api, resource_slices_for_minors(model, name, uid, minors))
    return FakeNode(name, uid, tuple(gpu_uuid(name, m) for m in minors), names)
