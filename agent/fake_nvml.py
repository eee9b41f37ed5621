"""A stand-in for the ``pynvml`` module: the same function names, ctypes structures, constants and ``NVMLError_*``
classes (taken from the installed nvidia-ml-py itself, so they cannot drift), over GPUs described by a scenario.

Used by the agent's tests, ``deploy/gpu-check --fake`` and, later, the demo's simulated fleet; the agent loads it
when ``FATIA_AGENT_FAKE_NVML`` names a scenario file. It never loads libnvidia-ml.

GPU tables (profiles, GI profile ids, enum indices, placements, memory, SM counts) come from the portal's MIG
catalog, ``allocations/mig/data/mig_profiles.json`` (a copy of the project's reference table, sources inside).
Layouts are checked with the catalog's own rules (``allocations.mig.layout``): only a profile's listed placements,
no overlapping memory slices, per-profile caps, ``+me.all`` beside ``-me`` profiles only. Like NVML:

* an occupied or overlapping placement -> ``NVML_ERROR_INSUFFICIENT_RESOURCES`` (not ALREADY_EXISTS);
* destroying a GPU instance that still has compute instances, or a compute instance with processes ->
  ``NVML_ERROR_IN_USE``;
* a placement start the profile does not list, or a size that is not the profile's ->
  ``NVML_ERROR_INVALID_ARGUMENT``;
* MIG off: profile info and instance calls (creates included) -> ``NVML_ERROR_NOT_SUPPORTED``;
  ``nvmlDeviceGetUtilizationRates`` with MIG on -> ``NOT_SUPPORTED``; writes without ``"privileged": true`` ->
  ``NVML_ERROR_NO_PERMISSION``.

Simplifications (said here so nobody mistakes them for NVML facts): each GPU instance offers only the compute
instance profile that spans it; ``nvmlEventSetWait`` never waits; GPM reports the scenario's SM utilisation per GPU
instance; profile names carry NVML's "MIG " prefix as nvidia-smi prints them (unconfirmed for the v2 struct).

Scenario (JSON)::

    {"driver_version": "580.95.05", "privileged": true,
     "gpus": [{"product": "NVIDIA H100 80GB HBM3", "mig": true, "gpm": true, "utilisation": 0,
               "ecc": {"corrected": 0, "uncorrected": 0},
               "instances": [{"profile": "3g.40gb", "start": 4, "sm_util": 40.0,
                              "processes": [{"pid": 4242, "used_mib": 8192}]}]}]}

``uuid`` and ``minor`` default from the GPU's position. MIG device UUIDs look like the driver's (``MIG-<uuid>``) and
are reproducible: derived from the GPU, the instance ids and slot, and, for an instance created through NVML, a
creation counter, so a destroyed and re-created instance gets a new UUID as on real GPUs. Tests drive the fake with
:meth:`FakeNvml.run_process`, :meth:`FakeNvml.end_process`, :meth:`FakeNvml.set_sm_util`,
:meth:`FakeNvml.inject_xid` and :meth:`FakeNvml.inject_failure` (the Nth create or destroy fails with a given NVML
error and changes nothing; also ``"failures": [{"call": "create_gpu_instance", "nth": 2, "code":
"NVML_ERROR_UNKNOWN"}]`` in a scenario).
"""

from __future__ import annotations

import ctypes
import json
import threading
import types
import uuid as uuidlib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

import pynvml

from allocations.mig.catalog import GpuModel, catalog_from_json
from allocations.mig.layout import layout_violations

_MIB = 1024 * 1024
_NO_INSTANCE = 0xFFFFFFFF
# nvml.h: NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE by compute slices.
_CI_ENUM_BY_SLICES = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4, 8: 0x5, 6: 0x6}
# Handle address ranges: a fake handle is a real ctypes pointer whose address is our key, so it fits the caller-
# allocated arrays pynvml users pass (and must never be dereferenced: NVML handles are opaque).
_DEVICE, _GI, _CI, _MIG, _GPM, _EVENTS = (n << 32 for n in range(1, 7))


def _handle(kind: Any, key: int) -> Any:
    return ctypes.cast(ctypes.c_void_p(key), kind)


def _key(handle: Any) -> int:
    value = ctypes.cast(handle, ctypes.c_void_p).value
    return int(value or 0)


def _raise(code: int) -> NoReturn:
    raise pynvml.NVMLError(code)


def _catalog_data() -> dict[str, Any]:
    text = resources.files("allocations.mig").joinpath("data/mig_profiles.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


@dataclass
class _Process:
    pid: int
    used_mib: int


@dataclass
class _ComputeInstance:
    key: int
    ci_id: int
    processes: list[_Process] = field(default_factory=list)


@dataclass
class _GpuInstance:
    key: int
    gi_id: int
    profile: dict[str, Any]
    start: int
    sm_util: float = 0.0
    cis: list[_ComputeInstance] = field(default_factory=list)
    serial: int = 0  # 0: from the scenario; n: the nth instance created through NVML (its UUIDs differ)


@dataclass
class _Gpu:
    index: int
    uuid: str
    minor: int
    product: str
    model: GpuModel
    raw: dict[str, Any]
    mig_current: int
    mig_pending: int
    gpm: bool
    utilisation: int
    ecc: dict[str, int] | None
    instances: list[_GpuInstance] = field(default_factory=list)


class FakeNvml(types.SimpleNamespace):
    """The fake ``pynvml`` module. Thread-safe: the agent samples while a test drives processes."""

    def __init__(self, scenario: dict[str, Any]) -> None:
        super().__init__()
        for name in dir(pynvml):
            value = getattr(pynvml, name)
            if not isinstance(value, types.FunctionType) and not name.startswith("_"):
                setattr(self, name, value)  # constants, structures, NVMLError and its subclasses
        data = _catalog_data()
        catalog = catalog_from_json(data)
        self._lock = threading.RLock()
        self._initialised = 0
        self._next_key = 1
        self._events: list[Any] = []
        self._registered: set[int] = set()
        self._gpm_samples: dict[int, tuple[int, int, float] | None] = {}
        self._created = 0
        self.calls: dict[str, int] = {}  # write calls made so far, by kind (see inject_failure)
        self._failures: dict[tuple[str, int], int] = {}  # (kind, call number) -> NVML error code
        for failure in scenario.get("failures", []):
            self.inject_failure(
                call=failure["call"], nth=int(failure.get("nth", 1)), code=getattr(pynvml, failure["code"])
            )
        self.driver_version = str(scenario.get("driver_version", "580.95.05"))
        self.privileged = bool(scenario.get("privileged", True))
        self.gpus: list[_Gpu] = []
        for index, spec in enumerate(scenario.get("gpus", [])):
            model = catalog.model(spec["product"])
            raw = data["models"][model.name]
            minor = int(spec.get("minor", index))
            default_uuid = f"GPU-{uuidlib.uuid5(uuidlib.NAMESPACE_OID, f'fatia-fake/{model.name}/{minor}')}"
            gpu = _Gpu(
                index=index,
                uuid=str(spec.get("uuid", default_uuid)),
                minor=minor,
                product=model.name,
                model=model,
                raw=raw,
                mig_current=int(bool(spec.get("mig", True))),
                mig_pending=int(bool(spec.get("mig_pending", spec.get("mig", True)))),
                gpm=bool(spec.get("gpm", model.name.startswith(("NVIDIA H", "NVIDIA GH", "NVIDIA B")))),
                utilisation=int(spec.get("utilisation", 0)),
                ecc=spec.get("ecc", {"corrected": 0, "uncorrected": 0}),
            )
            self.gpus.append(gpu)
            for inst in spec.get("instances", []):
                gi = self._create_gi(gpu, self._profile_by_name(gpu, inst["profile"]), int(inst["start"]))
                gi.sm_util = float(inst.get("sm_util", 0.0))
                if inst.get("compute_instance", True):
                    ci = self._create_ci(gi)
                    for p in inst.get("processes", []):
                        ci.processes.append(_Process(int(p["pid"]), int(p.get("used_mib", 0))))

    # --- scenario helpers (not NVML) ---------------------------------------------------------------------------

    def _key(self, base: int) -> int:
        self._next_key += 1
        return base + self._next_key

    def _profile_by_name(self, gpu: _Gpu, name: str) -> dict[str, Any]:
        for p in gpu.raw["profiles"]:
            if p["name"] == name:
                return dict(p)
        raise ValueError(f"{gpu.product} has no MIG profile {name!r}")

    def _profile_by_enum(self, gpu: _Gpu, enum: int) -> dict[str, Any] | None:
        for p in gpu.raw["profiles"]:
            if getattr(pynvml, p["nvml_profile_enum"]) == enum:
                return dict(p)
        return None

    def _profile_by_id(self, gpu: _Gpu, profile_id: int) -> dict[str, Any] | None:
        for p in gpu.raw["profiles"]:
            if int(p["nvml_profile_id"]) == profile_id:
                return dict(p)
        return None

    def _create_gi(self, gpu: _Gpu, profile: dict[str, Any], start: int) -> _GpuInstance:
        if not gpu.mig_current:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if {"start": start, "size": profile["memory_slices"]} not in profile["placements"]:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        layout = [(g.profile["name"], g.start) for g in gpu.instances] + [(profile["name"], start)]
        if layout_violations(gpu.model, layout):
            _raise(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        used = {g.gi_id for g in gpu.instances}
        gi_id = next(i for i in range(1, 64) if i not in used)
        gi = _GpuInstance(self._key(_GI), gi_id, profile, start)
        gpu.instances.append(gi)
        return gi

    def _create_ci(self, gi: _GpuInstance) -> _ComputeInstance:
        if gi.cis:
            _raise(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)  # the only CI profile spans the whole GI
        ci = _ComputeInstance(self._key(_CI), 0)
        gi.cis.append(ci)
        return ci

    def _find_gpu(self, handle: Any) -> _Gpu:
        key = _key(handle)
        for gpu in self.gpus:
            if key == _DEVICE + gpu.index:
                return gpu
        _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def _find_gi(self, handle: Any) -> tuple[_Gpu, _GpuInstance]:
        key = _key(handle)
        for gpu in self.gpus:
            for gi in gpu.instances:
                if gi.key == key:
                    return gpu, gi
        _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def _find_ci(self, handle: Any) -> tuple[_Gpu, _GpuInstance, _ComputeInstance]:
        key = _key(handle)
        for gpu in self.gpus:
            for gi in gpu.instances:
                for ci in gi.cis:
                    if ci.key == key or ci.key + (_MIG - _CI) == key:
                        return gpu, gi, ci
        _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def _is_mig_handle(self, handle: Any) -> bool:
        return _MIG <= _key(handle) < _GPM

    def _check_init(self) -> None:
        if not self._initialised:
            _raise(pynvml.NVML_ERROR_UNINITIALIZED)

    def _check_privileged(self) -> None:
        if not self.privileged:
            _raise(pynvml.NVML_ERROR_NO_PERMISSION)

    def _mig_devices(self, gpu: _Gpu) -> list[tuple[_GpuInstance, _ComputeInstance]]:
        return sorted(((gi, ci) for gi in gpu.instances for ci in gi.cis), key=lambda p: (p[0].gi_id, p[1].ci_id))

    FAILABLE = ("create_gpu_instance", "create_compute_instance", "destroy_gpu_instance", "destroy_compute_instance")

    def inject_failure(self, *, call: str, nth: int = 1, code: int = pynvml.NVML_ERROR_UNKNOWN) -> None:
        """The ``nth`` call of kind ``call`` from now on (1: the next) fails with ``code`` and changes nothing."""
        if call not in self.FAILABLE:
            raise ValueError(f"{call!r} is not one of {', '.join(self.FAILABLE)}")
        with self._lock:
            self._failures[(call, self.calls.get(call, 0) + nth)] = code

    def _count(self, call: str) -> None:
        self.calls[call] = n = self.calls.get(call, 0) + 1
        code = self._failures.pop((call, n), None)
        if code is not None:
            _raise(code)

    def run_process(self, *, gpu_index: int, gi_id: int, pid: int, used_mib: int) -> None:
        with self._lock:
            gi = next(g for g in self.gpus[gpu_index].instances if g.gi_id == gi_id)
            gi.cis[0].processes.append(_Process(pid, used_mib))

    def end_process(self, *, pid: int) -> None:
        with self._lock:
            for gpu in self.gpus:
                for gi in gpu.instances:
                    for ci in gi.cis:
                        ci.processes = [p for p in ci.processes if p.pid != pid]

    def set_sm_util(self, *, gpu_index: int, gi_id: int, value: float) -> None:
        with self._lock:
            next(g for g in self.gpus[gpu_index].instances if g.gi_id == gi_id).sm_util = value

    def inject_xid(self, *, gpu_index: int, code: int, gi_id: int | None = None, ci_id: int | None = None) -> None:
        with self._lock:
            if gpu_index not in self._registered:
                return  # nobody listens: NVML drops it too
            data = pynvml.c_nvmlEventData_t()
            data.device = _handle(pynvml.c_nvmlDevice_t, _DEVICE + gpu_index)
            data.eventType = pynvml.nvmlEventTypeXidCriticalError
            data.eventData = code
            data.gpuInstanceId = _NO_INSTANCE if gi_id is None else gi_id
            data.computeInstanceId = _NO_INSTANCE if ci_id is None else ci_id
            self._events.append(data)

    def set_ecc(self, *, gpu_index: int, uncorrected: int) -> None:
        with self._lock:
            ecc = self.gpus[gpu_index].ecc
            if ecc is not None:
                ecc["uncorrected"] = uncorrected

    # --- NVML: library and devices -------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        with self._lock:
            self._initialised += 1

    def nvmlShutdown(self) -> None:
        with self._lock:
            self._check_init()
            self._initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check_init()
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._check_init()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        self._check_init()
        if not 0 <= index < len(self.gpus):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return _handle(pynvml.c_nvmlDevice_t, _DEVICE + index)

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        with self._lock:
            if self._is_mig_handle(handle):
                gpu, gi, ci = self._find_ci(handle)
                serial = f"/{gi.serial}" if gi.serial else ""
                name = f"{gpu.uuid}/{gi.gi_id}/{ci.ci_id}/{gi.start}{serial}"
                return f"MIG-{uuidlib.uuid5(uuidlib.NAMESPACE_OID, name)}"
            return self._find_gpu(handle).uuid

    def nvmlDeviceGetMinorNumber(self, handle: Any) -> int:
        return self._find_gpu(handle).minor

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._find_gpu(handle).product

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: Any = None) -> Any:
        with self._lock:
            memory = pynvml.c_nvmlMemory_t()
            if self._is_mig_handle(handle):
                _, gi, ci = self._find_ci(handle)
                total = int(gi.profile["memory_mib"]) * _MIB
                used = sum(p.used_mib for p in ci.processes) * _MIB
            else:
                gpu = self._find_gpu(handle)
                if gpu.mig_current and not self.privileged:
                    _raise(pynvml.NVML_ERROR_NO_PERMISSION)
                total = gpu.model.memory_mib * _MIB
                used = sum(p.used_mib for gi in gpu.instances for ci in gi.cis for p in ci.processes) * _MIB
            memory.total, memory.used, memory.free = total, used, total - used
            return memory

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        with self._lock:
            if self._is_mig_handle(handle):
                _, gi, ci = self._find_ci(handle)
                pairs = [(gi, ci)]
            else:
                gpu = self._find_gpu(handle)
                pairs = [(gi, ci) for gi in gpu.instances for ci in gi.cis]
            out = []
            for gi, ci in pairs:
                for p in ci.processes:
                    info = pynvml.c_nvmlProcessInfo_t(
                        pid=p.pid, usedGpuMemory=p.used_mib * _MIB, gpuInstanceId=gi.gi_id, computeInstanceId=ci.ci_id
                    )
                    out.append(pynvml.nvmlStructToFriendlyObject(info))
            return out

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        gpu = self._find_gpu(handle)
        if gpu.mig_current:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)  # nvml.h: not supported on MIG-enabled GPUs
        util = pynvml.c_nvmlUtilization_t()
        util.gpu, util.memory = gpu.utilisation, 0
        return util

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int, counterType: int) -> int:
        gpu = self._find_gpu(handle)
        if gpu.ecc is None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        key = "uncorrected" if errorType == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED else "corrected"
        return int((gpu.ecc or {}).get(key, 0))

    # --- NVML: MIG ---------------------------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        gpu = self._find_gpu(device)
        return [gpu.mig_current, gpu.mig_pending]

    def nvmlDeviceSetMigMode(self, device: Any, mode: int) -> int:
        # Present because pynvml has it; the agent must never call it, and a test checks that it does not.
        raise AssertionError("the agent changed MIG mode")

    def nvmlDeviceGetGpuInstanceProfileInfo(self, device: Any, profile: int, version: int = 2) -> Any:
        with self._lock:
            gpu = self._find_gpu(device)
            if not 0 <= profile < pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT:
                _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            p = self._profile_by_enum(gpu, profile)
            if p is None or not gpu.mig_current:
                _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
            info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
            info.id = int(p["nvml_profile_id"])
            info.isP2pSupported = 0
            info.sliceCount = int(p["compute_slices"])
            info.instanceCount = int(p["max_count"])
            info.multiprocessorCount = int(p.get("sm_count") or 0)
            engines = p.get("engines") or {}
            info.copyEngineCount = int(engines.get("ce", 0))
            info.decoderCount = int(engines.get("dec", 0))
            info.encoderCount = int(engines.get("enc", 0))
            info.jpegCount = int(engines.get("jpeg", 0))
            info.ofaCount = int(engines.get("ofa", 0))
            info.memorySizeMB = int(p["memory_mib"] or 0)
            info.name = f"MIG {p['name']}".encode()
            return info

    nvmlDeviceGetGpuInstanceProfileInfoV = nvmlDeviceGetGpuInstanceProfileInfo

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, device: Any, profileId: int, placementsRef: Any, countRef: Any
    ) -> int:
        with self._lock:
            gpu = self._find_gpu(device)
            self._check_privileged()
            p = self._profile_by_id(gpu, profileId)
            if p is None:
                _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
            count = countRef._obj
            if placementsRef is None:
                count.value = len(p["placements"])
                return int(pynvml.NVML_SUCCESS)
            if count.value < len(p["placements"]) and len(placementsRef) < len(p["placements"]):
                _raise(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
            for i, pl in enumerate(p["placements"]):
                placementsRef[i].start, placementsRef[i].size = pl["start"], pl["size"]
            count.value = len(p["placements"])
            return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetGpuInstanceRemainingCapacity(self, device: Any, profileId: int) -> int:
        with self._lock:
            gpu = self._find_gpu(device)
            self._check_privileged()
            p = self._profile_by_id(gpu, profileId)
            if p is None or not gpu.mig_current:
                _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
            layout = [(g.profile["name"], g.start) for g in gpu.instances]
            free = 0
            for pl in p["placements"]:
                if not layout_violations(gpu.model, [*layout, (p["name"], pl["start"])]):
                    free += 1
                    layout.append((p["name"], pl["start"]))
            return free

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, device: Any, profileId: int, placement: Any) -> Any:
        with self._lock:
            gpu = self._find_gpu(device)
            self._check_privileged()
            if not gpu.mig_current:
                _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
            p = self._profile_by_id(gpu, profileId)
            if p is None:
                _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            placement = getattr(placement, "_obj", placement)  # byref(...) or the structure itself
            if int(placement.size) != int(p["memory_slices"]):
                _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            self._count("create_gpu_instance")
            gi = self._create_gi(gpu, p, int(placement.start))
            self._created += 1
            gi.serial = self._created
            return _handle(pynvml.c_nvmlGpuInstance_t, gi.key)

    def nvmlDeviceCreateGpuInstance(self, device: Any, profileId: int) -> Any:
        with self._lock:
            gpu = self._find_gpu(device)
            self._check_privileged()
            p = self._profile_by_id(gpu, profileId)
            if p is None:
                _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            for pl in p["placements"]:  # first fit, as the driver does
                layout = [(g.profile["name"], g.start) for g in gpu.instances] + [(p["name"], pl["start"])]
                if not layout_violations(gpu.model, layout):
                    return _handle(pynvml.c_nvmlGpuInstance_t, self._create_gi(gpu, p, pl["start"]).key)
            _raise(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)

    def nvmlGpuInstanceDestroy(self, gpuInstance: Any) -> int:
        with self._lock:
            self._check_privileged()
            gpu, gi = self._find_gi(gpuInstance)
            if gi.cis:
                _raise(pynvml.NVML_ERROR_IN_USE)
            self._count("destroy_gpu_instance")
            gpu.instances.remove(gi)
            return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetGpuInstances(self, device: Any, profileId: int, gpuInstancesRef: Any, countRef: Any) -> int:
        with self._lock:
            gpu = self._find_gpu(device)
            self._check_privileged()
            if not gpu.mig_current:
                _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
            found = [gi for gi in gpu.instances if int(gi.profile["nvml_profile_id"]) == profileId]
            if len(found) > len(gpuInstancesRef):
                _raise(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
            for i, gi in enumerate(sorted(found, key=lambda g: g.gi_id)):
                gpuInstancesRef[i] = _handle(pynvml.c_nvmlGpuInstance_t, gi.key)
            countRef._obj.value = len(found)
            return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetGpuInstanceById(self, device: Any, gpuInstanceId: int) -> Any:
        with self._lock:
            gpu = self._find_gpu(device)
            self._check_privileged()
            for gi in gpu.instances:
                if gi.gi_id == gpuInstanceId:
                    return _handle(pynvml.c_nvmlGpuInstance_t, gi.key)
            _raise(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlGpuInstanceGetInfo(self, gpuInstance: Any) -> Any:
        with self._lock:
            gpu, gi = self._find_gi(gpuInstance)
            info = pynvml.c_nvmlGpuInstanceInfo_t()
            info.device = _handle(pynvml.c_nvmlDevice_t, _DEVICE + gpu.index)
            info.id = gi.gi_id
            info.profileId = int(gi.profile["nvml_profile_id"])
            info.placement.start = gi.start
            info.placement.size = int(gi.profile["memory_slices"])
            return info

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, device: Any, profile: int, engProfile: int, version: int = 2
    ) -> Any:
        with self._lock:
            _, gi = self._find_gi(device)
            if not 0 <= profile < pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT:
                _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            slices = int(gi.profile["compute_slices"])
            if _CI_ENUM_BY_SLICES.get(slices) != profile:
                _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
            info = pynvml.c_nvmlComputeInstanceProfileInfo_v2_t()
            info.id = profile
            info.sliceCount = slices
            info.instanceCount = 1
            info.multiprocessorCount = int(gi.profile.get("sm_count") or 0)
            info.name = f"MIG {slices}c.{gi.profile['name']}".encode()
            return info

    nvmlGpuInstanceGetComputeInstanceProfileInfoV = nvmlGpuInstanceGetComputeInstanceProfileInfo

    def nvmlGpuInstanceCreateComputeInstance(self, gpuInstance: Any, profileId: int) -> Any:
        with self._lock:
            self._check_privileged()
            _, gi = self._find_gi(gpuInstance)
            if _CI_ENUM_BY_SLICES.get(int(gi.profile["compute_slices"])) != profileId:
                _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            if gi.cis:
                _raise(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)  # the only CI profile spans the whole GI
            self._count("create_compute_instance")
            return _handle(pynvml.c_nvmlComputeInstance_t, self._create_ci(gi).key)

    def nvmlGpuInstanceGetComputeInstances(
        self, gpuInstance: Any, profileId: int, computeInstancesRef: Any, countRef: Any
    ) -> int:
        with self._lock:
            self._check_privileged()
            _, gi = self._find_gi(gpuInstance)
            found = gi.cis if _CI_ENUM_BY_SLICES.get(int(gi.profile["compute_slices"])) == profileId else []
            if len(found) > len(computeInstancesRef):
                _raise(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
            for i, ci in enumerate(found):
                computeInstancesRef[i] = _handle(pynvml.c_nvmlComputeInstance_t, ci.key)
            countRef._obj.value = len(found)
            return int(pynvml.NVML_SUCCESS)

    def nvmlComputeInstanceGetInfo(self, computeInstance: Any) -> Any:
        with self._lock:
            gpu, gi, ci = self._find_ci(computeInstance)
            info = pynvml.c_nvmlComputeInstanceInfo_t()
            info.device = _handle(pynvml.c_nvmlDevice_t, _DEVICE + gpu.index)
            info.gpuInstance = _handle(pynvml.c_nvmlGpuInstance_t, gi.key)
            info.id = ci.ci_id
            info.profileId = _CI_ENUM_BY_SLICES[int(gi.profile["compute_slices"])]
            info.placement.start, info.placement.size = 0, int(gi.profile["compute_slices"])
            return info

    nvmlComputeInstanceGetInfo_v2 = nvmlComputeInstanceGetInfo

    def nvmlComputeInstanceDestroy(self, computeInstance: Any) -> int:
        with self._lock:
            self._check_privileged()
            _, gi, ci = self._find_ci(computeInstance)
            if ci.processes:
                _raise(pynvml.NVML_ERROR_IN_USE)
            self._count("destroy_compute_instance")
            gi.cis.remove(ci)
            return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any) -> int:
        gpu = self._find_gpu(device)
        return int(gpu.raw.get("max_instances", 7)) if gpu.mig_current else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: int) -> Any:
        with self._lock:
            gpu = self._find_gpu(device)
            devices = self._mig_devices(gpu)
            if not 0 <= index < len(devices):
                _raise(pynvml.NVML_ERROR_NOT_FOUND)
            return _handle(pynvml.c_nvmlDevice_t, devices[index][1].key + (_MIG - _CI))

    def nvmlDeviceIsMigDeviceHandle(self, device: Any) -> Any:
        return ctypes.c_uint(1 if self._is_mig_handle(device) else 0)

    def nvmlDeviceGetGpuInstanceId(self, device: Any) -> int:
        with self._lock:
            if not self._is_mig_handle(device):
                _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            return self._find_ci(device)[1].gi_id

    def nvmlDeviceGetComputeInstanceId(self, device: Any) -> int:
        with self._lock:
            if not self._is_mig_handle(device):
                _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            return self._find_ci(device)[2].ci_id

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice: Any) -> Any:
        with self._lock:
            gpu, _, _ = self._find_ci(migDevice)
            return _handle(pynvml.c_nvmlDevice_t, _DEVICE + gpu.index)

    # --- NVML: GPM and events ----------------------------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, device: Any) -> Any:
        support = pynvml.c_nvmlGpmSupport_t()
        support.version = pynvml.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = int(self._find_gpu(device).gpm)
        return support

    def nvmlGpmSampleAlloc(self) -> Any:
        with self._lock:
            key = self._key(_GPM)
            self._gpm_samples[key] = None
            return _handle(pynvml.c_nvmlGpmSample_t, key)

    def nvmlGpmSampleFree(self, gpmSample: Any) -> None:
        with self._lock:
            if self._gpm_samples.pop(_key(gpmSample), "missing") == "missing":
                _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlGpmMigSampleGet(self, device: Any, gpuInstanceId: int, gpmSample: Any) -> Any:
        with self._lock:
            gpu = self._find_gpu(device)
            if not gpu.gpm:
                _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
            gi = next((g for g in gpu.instances if g.gi_id == gpuInstanceId), None)
            if gi is None or _key(gpmSample) not in self._gpm_samples:
                _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            self._gpm_samples[_key(gpmSample)] = (gpu.index, gi.gi_id, gi.sm_util)
            return gpmSample

    def nvmlGpmMetricsGet(self, metricsGet: Any) -> Any:
        with self._lock:
            first = self._gpm_samples.get(_key(metricsGet.sample1))
            second = self._gpm_samples.get(_key(metricsGet.sample2))
            if first is None or second is None or first[:2] != second[:2]:
                _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            for i in range(metricsGet.numMetrics):
                metric = metricsGet.metrics[i]
                metric.nvmlReturn = pynvml.NVML_SUCCESS
                metric.value = second[2] if metric.metricId == pynvml.NVML_GPM_METRIC_SM_UTIL else 0.0
            return metricsGet

    def nvmlEventSetCreate(self) -> Any:
        return _handle(pynvml.c_nvmlEventSet_t, _EVENTS + 1)

    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None:
        with self._lock:
            self._registered.add(self._find_gpu(handle).index)

    def nvmlEventSetWait(self, eventSet: Any, timeoutms: int) -> Any:
        with self._lock:
            if not self._events:
                _raise(pynvml.NVML_ERROR_TIMEOUT)
            return self._events.pop(0)

    nvmlEventSetWait_v2 = nvmlEventSetWait

    def nvmlEventSetFree(self, eventSet: Any) -> None:
        with self._lock:
            self._registered.clear()


def load(path: str | Path) -> FakeNvml:
    """The fake for the scenario in a JSON file."""
    return FakeNvml(json.loads(Path(path).read_text(encoding="utf-8")))
