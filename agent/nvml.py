"""The agent's only door to NVML.

Everything else in the agent sees the dataclasses below and two errors: :class:`NvmlUnavailable` (the driver or a
GPU is not answering; try again later) and :class:`NvmlRefused` (NVML said no; retrying will not help). ``lib`` is
the ``pynvml`` module itself or :mod:`agent.fake_nvml`'s stand-in with the same names, so this module is what the
fake is tested against.

Read-only apart from the MIG operations the portal sends (:meth:`Nvml.create_instance`, :meth:`Nvml.destroy_at`,
:meth:`Nvml.destroy_instance`): the agent never changes MIG mode and never resets a GPU.
Call patterns follow ``reference/mig-profiles.md`` §5: caller-allocated ctypes arrays, a NULL first call to count
placements, and ``.id`` (the GI profile id) from the profile info rather than the enum index.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

# Errors that say "not now" rather than "no": the driver is (re)loading, a GPU fell off the bus, a call timed out.
_RETRYABLE = (
    "NVML_ERROR_UNINITIALIZED",
    "NVML_ERROR_DRIVER_NOT_LOADED",
    "NVML_ERROR_LIBRARY_NOT_FOUND",
    "NVML_ERROR_GPU_IS_LOST",
    "NVML_ERROR_TIMEOUT",
    "NVML_ERROR_UNKNOWN",
)


_SHARED = 0  # NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED


# The ``name`` of a refusal that comes from the agent's own safety rules rather than from NVML.
AGENT_REFUSED = "AGENT_REFUSED"


class NvmlError(Exception):
    """An NVML call failed; ``code`` is the NVML_ERROR_* value and ``name`` its constant's name (what the portal
    records), or AGENT_REFUSED when the agent itself said no."""

    def __init__(self, message: str, code: int | None = None, name: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.name = name


class NvmlUnavailable(NvmlError):
    """Retryable: the driver or the GPU is not answering right now."""


class NvmlRefused(NvmlError):
    """Terminal: NVML refused the call (no permission, not supported, occupied, in use)."""


class InstanceBusy(NvmlRefused):
    """A GPU instance still runs processes (or NVML says it is in use), so it is left alone."""


@dataclass(frozen=True, slots=True)
class ProfileInfo:
    """One GPU-instance profile as ``nvmlDeviceGetGpuInstanceProfileInfo`` and ``...PossiblePlacements`` report
    it; the fields map one to one onto ``allocations.mig.catalog.NvmlProfileReport``."""

    name: str
    profile_id: int
    slice_count: int
    instance_count: int
    memory_mib: int
    sm_count: int
    placements: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class ComputeInstance:
    ci_id: int
    profile_id: int
    uuid: str  # the MIG device UUID ("MIG-..."); empty when NVML lists no MIG device for it


@dataclass(frozen=True, slots=True)
class GpuInstance:
    gi_id: int
    profile_id: int
    profile: str
    start: int
    size: int
    compute_instances: tuple[ComputeInstance, ...]


@dataclass(frozen=True, slots=True)
class CreatedInstance:
    """What :meth:`Nvml.create_instance` made (or found already there): the GPU instance, its one compute
    instance spanning it, and the MIG device UUID the driver gave it."""

    gi_id: int
    ci_id: int
    mig_uuid: str


@dataclass(frozen=True, slots=True)
class GpuInfo:
    index: int
    uuid: str
    minor: int
    product: str
    memory_mib: int
    mig_current: int
    mig_pending: int
    profiles: tuple[ProfileInfo, ...]
    instances: tuple[GpuInstance, ...]


@dataclass(frozen=True, slots=True)
class Inventory:
    driver_version: str
    gpus: tuple[GpuInfo, ...]


@dataclass(frozen=True, slots=True)
class MigSample:
    uuid: str
    gi_id: int
    ci_id: int
    profile: str
    start: int
    memory_used_mib: int
    memory_total_mib: int
    processes: int
    utilisation: float | None  # SM utilisation (%) from GPM for this GPU instance; None where NVML has none


@dataclass(frozen=True, slots=True)
class GpuSample:
    uuid: str
    memory_used_mib: int | None  # None: MIG on and NVML gives the aggregate only to privileged callers
    utilisation: float | None
    # Where ``utilisation`` (of this GPU and of its MIG devices) comes from: "gpm" (per GPU instance, Hopper and
    # later), "device" (whole GPU, MIG off) or "none" (MIG on without GPM: Ampere; NVML attributes nothing).
    utilisation_source: str
    ecc_corrected: int | None
    ecc_uncorrected: int | None
    mig: tuple[MigSample, ...]


@dataclass(frozen=True, slots=True)
class HealthEvent:
    gpu_uuid: str
    kind: str  # "xid" or "ecc"
    code: int  # the Xid number; for "ecc", the number of new uncorrected errors
    gi_id: int | None = None
    ci_id: int | None = None


@dataclass(slots=True)
class Sample:
    gpus: list[GpuSample] = field(default_factory=list)
    events: list[HealthEvent] = field(default_factory=list)
    stale: bool = False  # a MIG device vanished or appeared: read the inventory again


def _mib(n_bytes: int) -> int:
    return int(n_bytes) // (1024 * 1024)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class Nvml:
    """An initialised NVML session over ``lib`` (``pynvml`` or the fake). Not thread-safe: one sampler owns it."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        self._call(lib.nvmlInit)
        self._handles: list[Any] = []
        # (gpu index, gi id, ci id) -> MIG device handle, and what the inventory said about that instance.
        self._mig: dict[tuple[int, int, int], tuple[Any, str, GpuInstance]] = {}
        self._gpm_supported: dict[int, bool] = {}
        self._gpm_prev: dict[tuple[int, int], Any] = {}  # (gpu index, gi id) -> last GPM sample
        self._gpm_spare: dict[tuple[int, int], Any] = {}
        self._ecc_seen: dict[int, int] = {}
        self._events: Any = None
        self._inventory: Inventory | None = None
        self._error_names = {
            value: name
            for name in dir(lib)
            if name.startswith("NVML_ERROR_") and isinstance(value := getattr(lib, name), int)
        }

    # --- plumbing -------------------------------------------------------------------------------------------

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except self.lib.NVMLError as exc:
            code = getattr(exc, "value", None)
            name = getattr(fn, "__name__", "nvml")
            retryable = any(code == getattr(self.lib, n, object()) for n in _RETRYABLE)
            in_use = code in (self.lib.NVML_ERROR_IN_USE,)
            cls = NvmlUnavailable if retryable else InstanceBusy if in_use else NvmlRefused
            raise cls(f"{name}: {exc}", code, self._error_names.get(int(code or 0), "")) from exc

    def _maybe(self, fn: Any, *args: Any) -> Any:
        """The call's result, or None where NVML does not support or permit it on this GPU."""
        try:
            return self._call(fn, *args)
        except NvmlRefused:
            return None

    def close(self) -> None:
        for sample in (*self._gpm_prev.values(), *self._gpm_spare.values()):
            self._maybe(self.lib.nvmlGpmSampleFree, sample)
        self._gpm_prev.clear()
        self._gpm_spare.clear()
        if self._events is not None:
            self._maybe(self.lib.nvmlEventSetFree, self._events)
            self._events = None
        self._maybe(self.lib.nvmlShutdown)

    def _device(self, index: int) -> Any:
        while len(self._handles) <= index:
            self._handles.append(self._call(self.lib.nvmlDeviceGetHandleByIndex, len(self._handles)))
        return self._handles[index]

    # --- inventory ------------------------------------------------------------------------------------------

    def inventory(self) -> Inventory:
        """GPUs, their GI profiles with every possible placement, and the GPU/compute instances that exist."""
        lib = self.lib
        driver = _text(self._call(lib.nvmlSystemGetDriverVersion))
        gpus = []
        mig: dict[tuple[int, int, int], tuple[Any, str, GpuInstance]] = {}
        for index in range(self._call(lib.nvmlDeviceGetCount)):
            h = self._device(index)
            current, pending = self._call(lib.nvmlDeviceGetMigMode, h)
            profiles = self._profiles(h) if current == lib.NVML_DEVICE_MIG_ENABLE else ()
            instances = self._instances(h, profiles) if profiles else ()
            uuids = self._mig_devices(index, h, instances, mig)
            instances = tuple(
                GpuInstance(
                    gi.gi_id,
                    gi.profile_id,
                    gi.profile,
                    gi.start,
                    gi.size,
                    tuple(
                        ComputeInstance(ci.ci_id, ci.profile_id, uuids.get((gi.gi_id, ci.ci_id), ""))
                        for ci in gi.compute_instances
                    ),
                )
                for gi in instances
            )
            gpus.append(
                GpuInfo(
                    index=index,
                    uuid=_text(self._call(lib.nvmlDeviceGetUUID, h)),
                    minor=int(self._call(lib.nvmlDeviceGetMinorNumber, h)),
                    product=_text(self._call(lib.nvmlDeviceGetName, h)),
                    memory_mib=_mib(self._call(lib.nvmlDeviceGetMemoryInfo, h).total),
                    mig_current=int(current),
                    mig_pending=int(pending),
                    profiles=profiles,
                    instances=instances,
                )
            )
        self._mig = mig
        self._inventory = Inventory(driver_version=driver, gpus=tuple(gpus))
        return self._inventory

    def _profiles(self, h: Any) -> tuple[ProfileInfo, ...]:
        lib = self.lib
        out = []
        for enum in range(lib.NVML_GPU_INSTANCE_PROFILE_COUNT):
            info = self._maybe(lib.nvmlDeviceGetGpuInstanceProfileInfo, h, enum)
            if info is None:
                continue  # this GPU (or driver) has no profile of that kind
            count = ctypes.c_uint(0)
            self._call(lib.nvmlDeviceGetGpuInstancePossiblePlacements, h, info.id, None, ctypes.byref(count))
            placements = (lib.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
            self._call(lib.nvmlDeviceGetGpuInstancePossiblePlacements, h, info.id, placements, ctypes.byref(count))
            out.append(
                ProfileInfo(
                    # nvidia-smi prints "MIG 1g.10gb"; the catalog and the portal use the bare profile name.
                    name=_text(info.name).removeprefix("MIG ").strip(),
                    profile_id=int(info.id),
                    slice_count=int(info.sliceCount),
                    instance_count=int(info.instanceCount),
                    memory_mib=int(info.memorySizeMB),
                    sm_count=int(info.multiprocessorCount),
                    placements=tuple((int(p.start), int(p.size)) for p in placements[: count.value]),
                )
            )
        return tuple(out)

    def _instances(self, h: Any, profiles: tuple[ProfileInfo, ...]) -> tuple[GpuInstance, ...]:
        lib = self.lib
        out = []
        for profile in profiles:
            buf = (lib.c_nvmlGpuInstance_t * max(profile.instance_count, 1))()
            count = ctypes.c_uint(0)
            self._call(lib.nvmlDeviceGetGpuInstances, h, profile.profile_id, buf, ctypes.byref(count))
            for gi in buf[: count.value]:
                info = self._call(lib.nvmlGpuInstanceGetInfo, gi)
                out.append(
                    GpuInstance(
                        gi_id=int(info.id),
                        profile_id=int(info.profileId),
                        profile=profile.name,
                        start=int(info.placement.start),
                        size=int(info.placement.size),
                        compute_instances=self._compute_instances(gi),
                    )
                )
        return tuple(sorted(out, key=lambda g: (g.start, g.gi_id)))

    def _compute_instances(self, gi: Any) -> tuple[ComputeInstance, ...]:
        lib = self.lib
        out = []
        for enum in range(lib.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            info = self._maybe(lib.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, enum, _SHARED)
            if info is None:
                continue
            buf = (lib.c_nvmlComputeInstance_t * max(int(info.instanceCount), 1))()
            count = ctypes.c_uint(0)
            self._call(lib.nvmlGpuInstanceGetComputeInstances, gi, info.id, buf, ctypes.byref(count))
            for ci in buf[: count.value]:
                ci_info = self._call(lib.nvmlComputeInstanceGetInfo, ci)
                out.append(ComputeInstance(int(ci_info.id), int(ci_info.profileId), ""))
        return tuple(sorted(out, key=lambda c: c.ci_id))

    def _mig_devices(
        self,
        index: int,
        h: Any,
        instances: tuple[GpuInstance, ...],
        into: dict[tuple[int, int, int], tuple[Any, str, GpuInstance]],
    ) -> dict[tuple[int, int], str]:
        """MIG device handles and UUIDs by (gi, ci); the sampler keeps the handles."""
        lib = self.lib
        if not instances:
            return {}
        by_gi = {gi.gi_id: gi for gi in instances}
        uuids: dict[tuple[int, int], str] = {}
        for i in range(int(self._call(lib.nvmlDeviceGetMaxMigDeviceCount, h))):
            m = self._maybe(lib.nvmlDeviceGetMigDeviceHandleByIndex, h, i)
            if m is None:
                continue  # NOT_FOUND: an empty index
            gi_id = int(self._call(lib.nvmlDeviceGetGpuInstanceId, m))
            ci_id = int(self._call(lib.nvmlDeviceGetComputeInstanceId, m))
            uuid = _text(self._call(lib.nvmlDeviceGetUUID, m))
            uuids[(gi_id, ci_id)] = uuid
            if gi_id in by_gi:
                into[(index, gi_id, ci_id)] = (m, uuid, by_gi[gi_id])
        return uuids

    # --- telemetry ------------------------------------------------------------------------------------------

    def sample(self) -> Sample:
        """Memory, processes and utilisation per MIG device and GPU, ECC counters, and pending Xid events."""
        lib = self.lib
        inventory = self._inventory or self.inventory()
        out = Sample()
        for gpu in inventory.gpus:
            h = self._device(gpu.index)
            mig_on = gpu.mig_current == lib.NVML_DEVICE_MIG_ENABLE
            gpm = mig_on and self._gpm(gpu.index, h)
            migs = []
            for (index, gi_id, ci_id), (m, uuid, gi) in self._mig.items():
                if index != gpu.index:
                    continue
                try:
                    memory = self._call(lib.nvmlDeviceGetMemoryInfo, m)
                    processes = self._call(lib.nvmlDeviceGetComputeRunningProcesses, m)
                except NvmlError:
                    out.stale = True  # the handle died with its instance
                    continue
                migs.append(
                    MigSample(
                        uuid=uuid,
                        gi_id=gi_id,
                        ci_id=ci_id,
                        profile=gi.profile,
                        start=gi.start,
                        memory_used_mib=_mib(memory.used),
                        memory_total_mib=_mib(memory.total),
                        processes=len(processes),
                        utilisation=self._gpm_util(gpu.index, h, gi_id) if gpm else None,
                    )
                )
            whole = self._maybe(lib.nvmlDeviceGetMemoryInfo, h)
            util = None if mig_on else self._maybe(lib.nvmlDeviceGetUtilizationRates, h)
            corrected = self._maybe(
                lib.nvmlDeviceGetTotalEccErrors, h, lib.NVML_MEMORY_ERROR_TYPE_CORRECTED, lib.NVML_VOLATILE_ECC
            )
            uncorrected = self._maybe(
                lib.nvmlDeviceGetTotalEccErrors, h, lib.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, lib.NVML_VOLATILE_ECC
            )
            if uncorrected is not None:
                seen = self._ecc_seen.get(gpu.index)
                if seen is not None and uncorrected > seen:
                    out.events.append(HealthEvent(gpu.uuid, "ecc", int(uncorrected - seen)))
                self._ecc_seen[gpu.index] = int(uncorrected)
            if mig_on and len(migs) != sum(len(gi.compute_instances) for gi in gpu.instances):
                out.stale = True
            out.gpus.append(
                GpuSample(
                    uuid=gpu.uuid,
                    memory_used_mib=_mib(whole.used) if whole is not None else None,
                    utilisation=float(util.gpu) if util is not None else None,
                    utilisation_source="gpm" if gpm else "device" if util is not None else "none",
                    ecc_corrected=None if corrected is None else int(corrected),
                    ecc_uncorrected=None if uncorrected is None else int(uncorrected),
                    mig=tuple(sorted(migs, key=lambda s: (s.start, s.ci_id))),
                )
            )
        out.events.extend(self._xid_events(inventory))
        return out

    def _gpm(self, index: int, h: Any) -> bool:
        if index not in self._gpm_supported:
            support = self._maybe(self.lib.nvmlGpmQueryDeviceSupport, h)
            self._gpm_supported[index] = bool(support is not None and support.isSupportedDevice)
        return self._gpm_supported[index]

    def _gpm_util(self, index: int, h: Any, gi_id: int) -> float | None:
        """SM utilisation of one GPU instance between this sample and the previous one (None on the first)."""
        lib = self.lib
        key = (index, gi_id)
        current = self._gpm_spare.pop(key, None) or self._call(lib.nvmlGpmSampleAlloc)
        try:
            self._call(lib.nvmlGpmMigSampleGet, h, gi_id, current)
        except NvmlError:
            self._gpm_spare[key] = current
            return None
        previous = self._gpm_prev.get(key)
        self._gpm_prev[key] = current
        if previous is None:
            return None
        self._gpm_spare[key] = previous  # reused next time: no allocation per tick
        request = lib.c_nvmlGpmMetricsGet_t()
        request.version = lib.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = 1
        request.sample1 = previous
        request.sample2 = current
        request.metrics[0].metricId = lib.NVML_GPM_METRIC_SM_UTIL
        result = self._maybe(lib.nvmlGpmMetricsGet, request)
        if result is None or result.metrics[0].nvmlReturn != lib.NVML_SUCCESS:
            return None
        return round(float(result.metrics[0].value), 1)

    def _xid_events(self, inventory: Inventory) -> list[HealthEvent]:
        """Xid events queued since the last call; never waits (timeout 0)."""
        lib = self.lib
        if self._events is None:
            events = self._maybe(lib.nvmlEventSetCreate)
            if events is None:
                return []
            for gpu in inventory.gpus:
                handle = self._device(gpu.index)
                self._maybe(lib.nvmlDeviceRegisterEvents, handle, lib.nvmlEventTypeXidCriticalError, events)
            self._events = events
        by_address = {ctypes.cast(self._device(g.index), ctypes.c_void_p).value: g.uuid for g in inventory.gpus}
        out = []
        for _ in range(256):  # a storm of events is cut here; the rest wait for the next tick
            try:
                data = self._call(lib.nvmlEventSetWait, self._events, 0)
            except NvmlError:
                break  # NVML_ERROR_TIMEOUT: nothing queued
            if not data.eventType & lib.nvmlEventTypeXidCriticalError:
                continue
            uuid = by_address.get(ctypes.cast(data.device, ctypes.c_void_p).value, "")
            gi = int(data.gpuInstanceId)
            ci = int(data.computeInstanceId)
            none = 0xFFFFFFFF  # NVML's "not a MIG event" value for the instance ids
            out.append(
                HealthEvent(uuid, "xid", int(data.eventData), None if gi == none else gi, None if ci == none else ci)
            )
        return out

    # --- MIG operations: the agent's only writes ---------------------------------------------------------------

    def destroy_instance(self, *, gpu_index: int, gi_id: int) -> None:
        """Destroy one GPU instance and its compute instances, unless a process runs on it (InstanceBusy).

        Compute instances go first: NVML refuses to destroy a GPU instance that still has any."""
        lib = self.lib
        h = self._device(gpu_index)
        gi = self._call(lib.nvmlDeviceGetGpuInstanceById, h, gi_id)
        self.inventory()
        for (index, g, _ci), (m, uuid, _) in self._mig.items():
            if index == gpu_index and g == gi_id and self._call(lib.nvmlDeviceGetComputeRunningProcesses, m):
                raise InstanceBusy(
                    f"GPU {gpu_index} instance {gi_id} ({uuid}) has running processes",
                    lib.NVML_ERROR_IN_USE,
                    "NVML_ERROR_IN_USE",
                )
        for enum in range(lib.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            info = self._maybe(lib.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, enum, _SHARED)
            if info is None:
                continue
            buf = (lib.c_nvmlComputeInstance_t * max(int(info.instanceCount), 1))()
            count = ctypes.c_uint(0)
            self._call(lib.nvmlGpuInstanceGetComputeInstances, gi, info.id, buf, ctypes.byref(count))
            for ci in buf[: count.value]:
                self._call(lib.nvmlComputeInstanceDestroy, ci)
        self._call(lib.nvmlGpuInstanceDestroy, gi)
        self.inventory()

    def _refuse(self, message: str, name: str = AGENT_REFUSED) -> NvmlRefused:
        return NvmlRefused(message, getattr(self.lib, name, None) if name != AGENT_REFUSED else None, name)

    def _mig_profiles(self, gpu_index: int) -> tuple[Any, tuple[ProfileInfo, ...]]:
        """The GPU's handle and profiles; refused (NOT_SUPPORTED) with MIG off: the agent never turns it on."""
        lib = self.lib
        h = self._device(gpu_index)
        current, _ = self._call(lib.nvmlDeviceGetMigMode, h)
        if current != lib.NVML_DEVICE_MIG_ENABLE:
            raise self._refuse(f"GPU {gpu_index} has MIG mode off", "NVML_ERROR_NOT_SUPPORTED")
        return h, self._profiles(h)

    def create_instance(self, *, gpu_index: int, profile: str, start: int) -> CreatedInstance:
        """Create a GPU instance of ``profile`` at memory slice ``start`` and the one compute instance spanning it
        (as NVIDIA's DRA driver does: compute slices == GPU instance slices).

        Idempotent by effect: if that profile already sits at that start, its instance is returned (and its compute
        instance created if a crash left it without one). NVML judges the placement: a start the profile does not
        list is NVML_ERROR_INVALID_ARGUMENT, an occupied or overlapping one NVML_ERROR_INSUFFICIENT_RESOURCES. If
        the compute instance cannot be made, the new GPU instance is destroyed again, so the layout stays as it
        was."""
        lib = self.lib
        h, profiles = self._mig_profiles(gpu_index)
        info = next((p for p in profiles if p.name == profile), None)
        if info is None or not info.placements:
            raise self._refuse(f"GPU {gpu_index} offers no MIG profile {profile}", "NVML_ERROR_NOT_SUPPORTED")
        there = next((g for g in self._instances(h, profiles) if g.start == start and g.profile == profile), None)
        if there is not None:
            gi = self._call(lib.nvmlDeviceGetGpuInstanceById, h, there.gi_id)
            if there.compute_instances:
                full = self._full_ci_profile(gi, info.slice_count)
                ci = there.compute_instances[0]
                if len(there.compute_instances) != 1 or ci.profile_id != int(full.id):
                    raise self._refuse(
                        f"GPU {gpu_index} instance {there.gi_id} at {start} is split into other compute instances"
                    )
                return self._created(gpu_index, there.gi_id, ci.ci_id)
            return self._created(gpu_index, there.gi_id, self._create_full_ci(gi, info.slice_count))
        placement = lib.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = start, info.placements[0][1]  # every placement of a profile is one size
        gi = self._call(lib.nvmlDeviceCreateGpuInstanceWithPlacement, h, info.profile_id, ctypes.byref(placement))
        gi_id = int(self._call(lib.nvmlGpuInstanceGetInfo, gi).id)
        try:
            ci_id = self._create_full_ci(gi, info.slice_count)
        except NvmlError:
            self._maybe(lib.nvmlGpuInstanceDestroy, gi)  # back to the layout before this step
            raise
        return self._created(gpu_index, gi_id, ci_id)

    def _full_ci_profile(self, gi: Any, slices: int) -> Any:
        lib = self.lib
        for enum in range(lib.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            info = self._maybe(lib.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, enum, _SHARED)
            if info is not None and int(info.sliceCount) == slices:
                return info
        raise self._refuse(f"no compute instance profile spans all {slices} slices of the GPU instance")

    def _create_full_ci(self, gi: Any, slices: int) -> int:
        lib = self.lib
        ci = self._call(lib.nvmlGpuInstanceCreateComputeInstance, gi, self._full_ci_profile(gi, slices).id)
        return int(self._call(lib.nvmlComputeInstanceGetInfo, ci).id)

    def _created(self, gpu_index: int, gi_id: int, ci_id: int) -> CreatedInstance:
        """The MIG device UUID comes from a fresh inventory, which also gives the sampler the new device."""
        inventory = self.inventory()
        gpu = inventory.gpus[gpu_index]
        uuid = next(
            (c.uuid for g in gpu.instances if g.gi_id == gi_id for c in g.compute_instances if c.ci_id == ci_id), ""
        )
        return CreatedInstance(gi_id, ci_id, uuid)

    def destroy_at(self, *, gpu_index: int, profile: str, start: int) -> int | None:
        """Destroy the GPU instance of ``profile`` at memory slice ``start`` (compute instances first); returns its
        id, or None when there is no such instance: done, nothing to remove. Another profile in that slot is not
        it and is left alone (a re-run of a batch finds the later steps' instances there; if the portal's picture
        is wrong instead, its next create in that slot fails and stops the batch). As :meth:`destroy_instance`:
        InstanceBusy when processes run on it."""
        h, profiles = self._mig_profiles(gpu_index)
        there = next((g for g in self._instances(h, profiles) if g.start == start and g.profile == profile), None)
        if there is None:
            return None
        self.destroy_instance(gpu_index=gpu_index, gi_id=there.gi_id)
        return there.gi_id
