"""What NVIDIA's DRA driver publishes for a node, assembled from its ResourceSlices (pure Python, no Django).

The driver publishes one resource pool per node, named after it (dra-mig.md §3). With DynamicMIG on Kubernetes
1.35+ the pool is G + 1 slices for G GPUs: one with a counter set per GPU (`sharedCounters`), then one per GPU
with its devices: `gpu-<minor>` (the whole GPU; absent on an Ampere GPU while MIG is on) and every MIG profile x
placement `gpu-<minor>-mig-<profile>-<profile id>-<start>`, each consuming its counters. Static MIG publishes
the MIG devices that exist, without counters.

Only a complete pool counts: every slice of its highest `pool.generation`, as many as `resourceSliceCount`
says (a driver that restarts replaces its slices one by one under a new generation). Until a pool is complete
again, the last complete one stands.

Each slice is cut down to a `SliceSummary` as soon as it is read; a GPU's figures (its counter set and its MIG
devices with what each consumes, stripped of the minor) are interned by digest, so 8,000 GPUs of one model
hold one copy of them.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from allocations.cluster.kube import DeviceInfo, SliceInfo
from allocations.mig.catalog import GpuModel
from allocations.mig.figures import model_from_figures

MIB = 1 << 20
_WHOLE_GPU = re.compile(r"^gpu-(?P<minor>\d+)$")
# The driver's canonical MIG device name (MigSpecTuple.ToCanonicalName).
_MIG_DEVICE = re.compile(r"^gpu-(?P<minor>\d+)-(?P<suffix>mig-.+-(?P<profile_id>\d+)-(?P<start>\d+))$")
_MEMORY_SLICE = re.compile(r"^memory-slice-(?P<slot>\d+)$")
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"


def minor_of(device: str) -> int | None:
    """The GPU minor number of a device name: gpu-3 and gpu-3-mig-1g10gb-19-0 are on GPU 3."""
    match = _WHOLE_GPU.match(device) or _MIG_DEVICE.match(device)
    return int(match["minor"]) if match else None


def mig_suffix(device: str) -> str | None:
    """'mig-1g10gb-19-0' for gpu-3-mig-1g10gb-19-0; None for anything else."""
    match = _MIG_DEVICE.match(device)
    return match["suffix"] if match else None


def _mib(counters: dict[str, int]) -> dict[str, int]:
    """Counters with memory in MiB (the API server has it in bytes)."""
    return {k: (v // MIB if k == "memory" else v) for k, v in counters.items()}


@dataclass(frozen=True, slots=True)
class DeviceFigure:
    """One MIG device as published: its name after "gpu-<minor>-", profile, the memory slots it takes
    (`start`, `size`, from the memory-slice counters it consumes, else its name) and what else it consumes."""

    suffix: str
    profile: str
    profile_id: int
    start: int
    size: int
    counters: tuple[tuple[str, int], ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "suffix": self.suffix,
            "profile": self.profile,
            "profile_id": self.profile_id,
            "start": self.start,
            "size": self.size,
            "counters": dict(self.counters),
        }


@dataclass(frozen=True, slots=True)
class Figures:
    """A GPU's counter set and MIG devices, with nothing that names the GPU; `digest` identifies them."""

    product: str
    counters: tuple[tuple[str, int], ...]
    devices: tuple[DeviceFigure, ...]
    digest: str = field(default="", compare=False)

    @staticmethod
    def of(product: str, counters: dict[str, int], devices: tuple[DeviceFigure, ...]) -> Figures:
        ordered = tuple(sorted(counters.items()))
        text = json.dumps([product, ordered, [d.as_json() for d in devices]], separators=(",", ":"))
        return Figures(product, ordered, devices, hashlib.sha256(text.encode()).hexdigest())

    @property
    def memory_slices(self) -> int:
        return sum(1 for name, _ in self.counters if _MEMORY_SLICE.match(name))


@dataclass(frozen=True, slots=True)
class StaticInstance:
    """A MIG device that exists (static MIG): where it sits, its MIG device `uuid` (what a claim pins) and the
    driver's name for it."""

    profile: str
    start: int
    size: int
    uuid: str
    device: str

    def as_json(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "start": self.start,
            "size": self.size,
            "uuid": self.uuid,
            "device": self.device,
        }


@dataclass(frozen=True, slots=True)
class GpuPart:
    """What one slice says about one GPU."""

    minor: int
    uuid: str
    product: str
    pci_bus_id: str
    driver_version: str
    memory_mib: int | None
    counter_set: str
    devices: tuple[DeviceFigure, ...]
    static_mig: bool  # MIG devices without counters: MIG partitions made beforehand (mig-parted), not DynamicMIG
    instances: tuple[StaticInstance, ...] = ()  # static MIG: the devices that exist, in start order
    shareable: bool = False  # the whole GPU is published with allowMultipleAllocations (consumable shares)


@dataclass(frozen=True, slots=True)
class SliceSummary:
    name: str
    pool: str
    node_name: str
    generation: int
    slice_count: int
    counter_sets: dict[str, dict[str, int]]
    gpus: tuple[GpuPart, ...]


def _figure(device: DeviceInfo, suffix: str, profile_id: int, named_start: int) -> tuple[DeviceFigure, str]:
    counter_set = device.consumes[0][0] if device.consumes else ""
    consumed = dict(device.consumes[0][1]) if device.consumes else {}
    slots = sorted(int(m["slot"]) for name in consumed if (m := _MEMORY_SLICE.match(name)))
    if not slots:  # static MIG: the slots are capacities named memorySlice<i>
        slots = sorted(
            int(name.removeprefix("memorySlice")) for name in device.capacity if name.startswith("memorySlice")
        )
    others = {k: v for k, v in consumed.items() if not _MEMORY_SLICE.match(k)}
    figure = DeviceFigure(
        suffix=suffix,
        profile=str(device.attributes.get("profile", "")),
        profile_id=profile_id,
        start=slots[0] if slots else named_start,
        size=len(slots),
        counters=tuple(_mib(others).items()),
    )
    return figure, counter_set


# Every GPU of a model publishes the same devices: one copy of each figure and of each GPU's tuple of them.
_INTERNED: dict[Any, Any] = {}


def _intern(value: Any) -> Any:
    return _INTERNED.setdefault(value, value)


def summarize(info: SliceInfo) -> SliceSummary:
    """Cut a slice down to what discovery keeps."""
    by_minor: dict[int, dict[str, Any]] = {}
    for device in info.devices:
        whole = _WHOLE_GPU.match(device.name)
        mig = _MIG_DEVICE.match(device.name)
        named = whole or mig
        if named is None:
            continue  # a VFIO device or a name this driver version does not use
        minor = int(named["minor"])
        gpu = by_minor.setdefault(
            minor, {"devices": [], "uuid": "", "counter_set": "", "static": False, "instances": []}
        )
        attributes = device.attributes
        for key, attribute in (("product", "productName"), ("pci", PCI_BUS_ID), ("driver", "driverVersion")):
            if not gpu.get(key):
                gpu[key] = str(attributes.get(attribute, ""))
        if whole is not None:
            gpu["uuid"] = str(attributes.get("uuid", "")) or gpu["uuid"]
            gpu["shareable"] = device.shareable
            memory = device.capacity.get("memory")
            gpu["memory"] = memory // MIB if memory is not None else None
            if device.consumes and not gpu["counter_set"]:
                gpu["counter_set"] = device.consumes[0][0]
            continue
        if mig is None:
            continue
        gpu["uuid"] = gpu["uuid"] or str(attributes.get("parentUUID", ""))
        figure, counter_set = _figure(device, mig["suffix"], int(mig["profile_id"]), int(mig["start"]))
        if counter_set:
            gpu["devices"].append(_intern(figure))
            gpu["counter_set"] = gpu["counter_set"] or counter_set
        else:
            # Static MIG: the device is one instance that exists, not one of the profile x placement menu, so it
            # says nothing about the GPU's figures (the catalog's stand); it is the GPU's layout.
            gpu["static"] = True
            gpu["instances"].append(
                StaticInstance(
                    profile=figure.profile,
                    start=figure.start,
                    size=figure.size,
                    uuid=str(attributes.get("uuid", "")),
                    device=device.name,
                )
            )
    parts = tuple(
        GpuPart(
            minor=minor,
            uuid=gpu["uuid"],
            product=gpu["product"],
            pci_bus_id=gpu["pci"],
            driver_version=gpu["driver"],
            memory_mib=gpu.get("memory"),
            counter_set=gpu["counter_set"],
            devices=_intern(tuple(gpu["devices"])),
            static_mig=gpu["static"],
            instances=tuple(sorted(gpu["instances"], key=lambda i: i.start)),
            shareable=gpu.get("shareable", False),
        )
        for minor, gpu in sorted(by_minor.items())
    )
    return SliceSummary(
        name=info.name,
        pool=info.pool,
        node_name=info.node_name or info.pool,
        generation=info.generation,
        slice_count=info.slice_count,
        counter_sets=info.counter_sets,
        gpus=parts,
    )


@dataclass(frozen=True, slots=True)
class PublishedGpu:
    minor: int
    uuid: str
    product: str
    memory_mib: int | None
    pci_bus_id: str
    figures: Figures | None  # None: no counters and no MIG devices published (a whole GPU, MIG off), or static MIG
    static_mig: bool = False  # the driver publishes the MIG devices that exist (no DynamicMIG)
    instances: tuple[StaticInstance, ...] = ()  # static MIG: those devices, in start order
    shareable: bool = False  # the whole GPU allows multiple allocations: shared and MPS pools can use it


@dataclass(frozen=True, slots=True)
class Published:
    """A node's complete pool: its GPUs in minor order, the driver version, DynamicMIG on or off."""

    generation: int
    gpus: tuple[PublishedGpu, ...]
    driver_version: str
    dynamic_mig: bool


class DriverPools:
    """Every pool's slices (summaries), and the last complete view of each pool."""

    def __init__(self) -> None:
        self._slices: dict[str, dict[str, SliceSummary]] = {}  # pool -> slice name -> summary
        self._pool_of_slice: dict[str, str] = {}
        self._complete: dict[str, Published] = {}
        self._figures: dict[str, Figures] = {}  # interned by digest

    def clear(self) -> None:
        """Forget the slices (a relist follows); the last complete views stay until replaced."""
        self._slices.clear()
        self._pool_of_slice.clear()

    def put(self, summary: SliceSummary) -> str:
        """Add or replace a slice; returns its pool."""
        current = self._slices.get(summary.pool, {})
        if current and summary.generation < max(s.generation for s in current.values()):
            return summary.pool  # a slice of a generation the driver has replaced: it never counts again
        old_pool = self._pool_of_slice.get(summary.name)
        if old_pool is not None and old_pool != summary.pool:
            self._slices.get(old_pool, {}).pop(summary.name, None)
        self._slices.setdefault(summary.pool, {})[summary.name] = summary
        self._pool_of_slice[summary.name] = summary.pool
        self._refresh(summary.pool)
        return summary.pool

    def remove(self, slice_name: str) -> str | None:
        """Forget a deleted slice; returns its pool (None if unknown)."""
        pool = self._pool_of_slice.pop(slice_name, None)
        if pool is not None:
            self._slices.get(pool, {}).pop(slice_name, None)
            self._refresh(pool)
        return pool

    def pools(self) -> set[str]:
        return set(self._slices) | set(self._complete)

    def published(self, pool: str) -> Published | None:
        return self._complete.get(pool)

    def _refresh(self, pool: str) -> None:
        slices = self._slices.get(pool, {})
        if not slices:
            return
        generation = max(s.generation for s in slices.values())
        current = [s for s in slices.values() if s.generation == generation]
        # Older generations are on their way out (the driver deletes them); they never count again.
        for stale in [s.name for s in slices.values() if s.generation < generation]:
            slices.pop(stale)
            self._pool_of_slice.pop(stale, None)
        if any(s.slice_count != len(current) for s in current):
            return  # incomplete: the last complete view stands
        known = self._complete.get(pool)
        if known is not None and known.generation > generation:
            return
        self._complete[pool] = self._assemble(generation, current)

    def _intern(self, figures: Figures) -> Figures:
        return self._figures.setdefault(figures.digest, figures)

    def _assemble(self, generation: int, slices: list[SliceSummary]) -> Published:
        counter_sets: dict[str, dict[str, int]] = {}
        for s in slices:
            counter_sets.update(s.counter_sets)
        parts: dict[int, list[GpuPart]] = {}
        for s in slices:
            for part in s.gpus:
                parts.setdefault(part.minor, []).append(part)
        gpus = []
        drivers = set()
        dynamic = False
        for minor, found in sorted(parts.items()):
            uuid = next((p.uuid for p in found if p.uuid), "")
            product = next((p.product for p in found if p.product), "")
            counter_set = next((p.counter_set for p in found if p.counter_set), "")
            devices = tuple(d for p in found for d in p.devices)
            counters = _mib(counter_sets.get(counter_set, {}))
            drivers |= {p.driver_version for p in found if p.driver_version}
            dynamic = dynamic or (bool(devices) and bool(counter_set) and not any(p.static_mig for p in found))
            memory = next((p.memory_mib for p in found if p.memory_mib is not None), None)
            if memory is None and "memory" in counters:
                memory = counters["memory"]
            figures = self._intern(Figures.of(product, counters, devices)) if devices or counters else None
            gpus.append(
                PublishedGpu(
                    minor=minor,
                    uuid=uuid,
                    product=product,
                    memory_mib=memory,
                    pci_bus_id=next((p.pci_bus_id for p in found if p.pci_bus_id), ""),
                    figures=figures,
                    static_mig=any(p.static_mig for p in found),
                    instances=tuple(sorted((i for p in found for i in p.instances), key=lambda i: i.start)),
                    shareable=any(p.shareable for p in found),
                )
            )
        return Published(
            generation=generation,
            gpus=tuple(gpus),
            driver_version=", ".join(sorted(drivers)),
            dynamic_mig=dynamic,
        )


def gpu_model_of(figures: Figures, base: GpuModel | None) -> GpuModel | None:
    """The GPU model these published figures describe (allocations/mig/figures.py), or None (MIG off)."""
    return model_from_figures(figures.product, dict(figures.counters), [d.as_json() for d in figures.devices], base)
