"""The fake NVML behaves like pynvml where the agent (and later the static-MIG work) relies on it."""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from tests.agent.scenarios import A100, H100, fake


def _gpu(lib, index=0):
    lib.nvmlInit()
    return lib.nvmlDeviceGetHandleByIndex(index)


def _create(lib, h, profile_id, start, size):
    placement = pynvml.c_nvmlGpuInstancePlacement_t()
    placement.start, placement.size = start, size
    return lib.nvmlDeviceCreateGpuInstanceWithPlacement(h, profile_id, ctypes.byref(placement))


def _layout(lib, h):
    out = []
    for enum in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = lib.nvmlDeviceGetGpuInstanceProfileInfo(h, enum)
        except pynvml.NVMLError_NotSupported:
            continue
        buf = (pynvml.c_nvmlGpuInstance_t * info.instanceCount)()
        count = ctypes.c_uint(0)
        lib.nvmlDeviceGetGpuInstances(h, info.id, buf, ctypes.byref(count))
        for gi in buf[: count.value]:
            gi_info = lib.nvmlGpuInstanceGetInfo(gi)
            out.append((info.name, gi_info.placement.start, gi_info.placement.size))
    return sorted(out, key=lambda x: x[1])


def test_it_uses_pynvml_structures_constants_and_error_classes():
    # given
    lib = fake({"gpus": [{"product": H100}]})
    h = _gpu(lib)

    # when
    info = lib.nvmlDeviceGetGpuInstanceProfileInfo(h, pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE)

    # then
    assert isinstance(info, pynvml.c_nvmlGpuInstanceProfileInfo_v2_t)
    assert (info.id, info.sliceCount, info.instanceCount, info.memorySizeMB) == (9, 3, 2, 40448)
    assert lib.NVMLError is pynvml.NVMLError
    assert lib.NVML_ERROR_INSUFFICIENT_RESOURCES == 23
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        lib.nvmlDeviceGetGpuInstanceProfileInfo(h, pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT)


def test_possible_placements_follow_the_count_then_fill_pattern():
    # given
    lib = fake({"gpus": [{"product": H100}]})
    h = _gpu(lib)
    count = ctypes.c_uint(0)

    # when
    lib.nvmlDeviceGetGpuInstancePossiblePlacements(h, 15, None, ctypes.byref(count))
    placements = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
    lib.nvmlDeviceGetGpuInstancePossiblePlacements(h, 15, placements, ctypes.byref(count))

    # then: 1g.20gb on the 8-slot H100 grid
    assert [(p.start, p.size) for p in placements] == [(0, 2), (2, 2), (4, 2), (6, 2)]


def test_an_overlapping_placement_fails_with_insufficient_resources_and_changes_nothing():
    # given: 3g.40gb at 4:4
    lib = fake({"gpus": [{"product": H100, "instances": [{"profile": "3g.40gb", "start": 4}]}]})
    h = _gpu(lib)

    # when / then: 2g.20gb at 4:2 overlaps it
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        _create(lib, h, 14, 4, 2)
    assert _layout(lib, h) == [("MIG 3g.40gb", 4, 4)]


def test_a_placement_the_profile_does_not_list_is_an_invalid_argument():
    lib = fake({"gpus": [{"product": H100}]})
    h = _gpu(lib)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        _create(lib, h, 14, 1, 2)  # 2g.20gb only starts at 0, 2, 4
    assert _layout(lib, h) == []


def test_the_per_profile_cap_holds():
    # given: one 1g.10gb+me (cap 1)
    lib = fake({"gpus": [{"product": H100, "instances": [{"profile": "1g.10gb+me", "start": 0}]}]})
    h = _gpu(lib)

    # when / then
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        _create(lib, h, 20, 1, 1)
    assert lib.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 20) == 0
    assert lib.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 19) == 6


def test_a_free_placement_is_created_and_listed():
    lib = fake({"gpus": [{"product": H100, "instances": [{"profile": "3g.40gb", "start": 4}]}]})
    h = _gpu(lib)

    gi = _create(lib, h, 14, 2, 2)
    lib.nvmlGpuInstanceCreateComputeInstance(gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE)

    assert _layout(lib, h) == [("MIG 2g.20gb", 2, 2), ("MIG 3g.40gb", 4, 4)]
    assert lib.nvmlDeviceGetMaxMigDeviceCount(h) == 7
    mig = lib.nvmlDeviceGetMigDeviceHandleByIndex(h, 1)
    assert (lib.nvmlDeviceGetGpuInstanceId(mig), lib.nvmlDeviceGetComputeInstanceId(mig)) == (2, 0)
    assert lib.nvmlDeviceIsMigDeviceHandle(mig).value == 1
    with pytest.raises(pynvml.NVMLError_NotFound):
        lib.nvmlDeviceGetMigDeviceHandleByIndex(h, 2)


def test_busy_instances_are_not_destroyed():
    # given: a 3g.40gb whose compute instance runs a process
    lib = fake(
        {"gpus": [{"product": H100, "instances": [{"profile": "3g.40gb", "start": 4, "processes": [{"pid": 7}]}]}]}
    )
    h = _gpu(lib)
    gi = lib.nvmlDeviceGetGpuInstanceById(h, 1)
    buf = (pynvml.c_nvmlComputeInstance_t * 1)()
    count = ctypes.c_uint(0)
    lib.nvmlGpuInstanceGetComputeInstances(gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, buf, ctypes.byref(count))
    ci = buf[0]

    # when / then: the GPU instance still has a compute instance; the compute instance has a process
    with pytest.raises(pynvml.NVMLError_InUse):
        lib.nvmlGpuInstanceDestroy(gi)
    with pytest.raises(pynvml.NVMLError_InUse):
        lib.nvmlComputeInstanceDestroy(ci)
    assert _layout(lib, h) == [("MIG 3g.40gb", 4, 4)]

    # and once the process ends, compute instance first, then the GPU instance
    lib.end_process(pid=7)
    lib.nvmlComputeInstanceDestroy(ci)
    lib.nvmlGpuInstanceDestroy(gi)
    assert _layout(lib, h) == []


def test_mig_off_and_no_privilege_answer_like_nvml():
    lib = fake({"privileged": False, "gpus": [{"product": A100, "mig": False, "utilisation": 30}]})
    h = _gpu(lib)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        lib.nvmlDeviceGetGpuInstanceProfileInfo(h, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        lib.nvmlDeviceGetGpuInstancePossiblePlacements(h, 19, None, ctypes.byref(ctypes.c_uint(0)))
    assert lib.nvmlDeviceGetUtilizationRates(h).gpu == 30
    assert lib.nvmlDeviceGetMigMode(h) == [0, 0]


def test_utilisation_rates_are_not_supported_with_mig_on():
    lib = fake({"gpus": [{"product": H100}]})
    with pytest.raises(pynvml.NVMLError_NotSupported):
        lib.nvmlDeviceGetUtilizationRates(_gpu(lib))
