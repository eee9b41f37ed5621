"""The agent's MIG writes against the fake NVML: creates at the placement asked for, refusals as NVML words them,
busy instances left alone, a failed step that leaves the layout as it was, and idempotence by effect."""

from __future__ import annotations

import pynvml
import pytest

from agent.nvml import InstanceBusy, Nvml, NvmlError, NvmlRefused, NvmlUnavailable
from allocations.mig.catalog import load_catalog
from allocations.mig.layout import layout_violations
from tests.agent.scenarios import A100, H100, fake


def _layout(nvml: Nvml, gpu: int = 0) -> list[tuple[str, int, int, str]]:
    return [
        (gi.profile, gi.start, gi.gi_id, gi.compute_instances[0].uuid if gi.compute_instances else "")
        for gi in nvml.inventory().gpus[gpu].instances
    ]


def _slots(nvml: Nvml, gpu: int = 0) -> list[tuple[str, int]]:
    return [(profile, start) for profile, start, _, _ in _layout(nvml, gpu)]


def _h100(*instances: dict) -> tuple:
    lib = fake({"gpus": [{"product": H100, "instances": list(instances)}]})
    return lib, Nvml(lib)


def test_it_creates_instances_at_the_placements_asked_for_each_with_a_full_compute_instance():
    # given: an empty H100
    lib, nvml = _h100()

    # when: 1g.10gb at 6 (first fit would say 0), then 3g.40gb at 0 (first fit would say 4)
    small = nvml.create_instance(gpu_index=0, profile="1g.10gb", start=6)
    big = nvml.create_instance(gpu_index=0, profile="3g.40gb", start=0)

    # then: where asked, each with the one compute instance spanning it and its MIG device UUID
    layout = _layout(nvml)
    assert [(p, s) for p, s, _, _ in layout] == [("3g.40gb", 0), ("1g.10gb", 6)]
    assert (small.gi_id, small.ci_id) == (1, 0)
    assert (big.gi_id, big.ci_id) == (2, 0)
    assert [u for _, _, _, u in layout] == [big.mig_uuid, small.mig_uuid]
    assert all(u.startswith("MIG-") and len(u) == 40 for u in (small.mig_uuid, big.mig_uuid))
    cis = [gi.compute_instances for gi in nvml.inventory().gpus[0].instances]
    assert [[(c.ci_id, c.profile_id) for c in ci] for ci in cis] == [
        [(0, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE)],
        [(0, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE)],
    ]
    assert lib.calls == {"create_gpu_instance": 2, "create_compute_instance": 2}


@pytest.mark.parametrize(
    ("profile", "start", "code"),
    [
        ("2g.20gb", 4, "NVML_ERROR_INSUFFICIENT_RESOURCES"),  # overlaps the 3g.40gb at 4
        ("1g.10gb", 4, "NVML_ERROR_INSUFFICIENT_RESOURCES"),  # the very slot is taken
        ("3g.40gb", 1, "NVML_ERROR_INVALID_ARGUMENT"),  # not one of the profile's placements
        ("7g.80gb", 0, "NVML_ERROR_INSUFFICIENT_RESOURCES"),  # the whole GPU: overlaps by size
    ],
    ids=["overlap", "occupied", "bad-placement", "overlap-by-size"],
)
def test_a_create_nvml_refuses_fails_with_nvmls_code_and_changes_nothing(profile, start, code):
    # given: a 3g.40gb at 4
    lib, nvml = _h100({"profile": "3g.40gb", "start": 4})
    before = _layout(nvml)

    # when
    with pytest.raises(NvmlRefused) as refused:
        nvml.create_instance(gpu_index=0, profile=profile, start=start)

    # then
    assert refused.value.name == code
    assert refused.value.code == getattr(pynvml, code)
    assert _layout(nvml) == before


def test_with_mig_off_a_create_is_refused_and_mig_mode_is_never_touched():
    # given: an A100 with MIG off (the fake fails the test if anybody calls nvmlDeviceSetMigMode)
    lib = fake({"gpus": [{"product": A100, "mig": False}]})
    nvml = Nvml(lib)

    # when / then
    with pytest.raises(NvmlRefused) as refused:
        nvml.create_instance(gpu_index=0, profile="1g.5gb", start=0)
    with pytest.raises(NvmlRefused) as refused_destroy:
        nvml.destroy_at(gpu_index=0, profile="1g.5gb", start=0)
    assert refused.value.name == refused_destroy.value.name == "NVML_ERROR_NOT_SUPPORTED"
    assert lib.nvmlDeviceGetMigMode(lib.nvmlDeviceGetHandleByIndex(0)) == [0, 0]
    assert lib.calls == {}


def test_at_the_nvml_boundary_a_create_on_a_mig_off_gpu_is_not_supported():
    lib = fake({"gpus": [{"product": A100, "mig": False}]})
    lib.nvmlInit()
    placement = pynvml.c_nvmlGpuInstancePlacement_t()
    placement.start, placement.size = 0, 1
    with pytest.raises(pynvml.NVMLError_NotSupported):
        lib.nvmlDeviceCreateGpuInstanceWithPlacement(lib.nvmlDeviceGetHandleByIndex(0), 19, placement)


def test_an_unknown_profile_is_refused_before_nvml_is_asked_to_write():
    lib, nvml = _h100()
    with pytest.raises(NvmlRefused) as refused:
        nvml.create_instance(gpu_index=0, profile="5g.50gb", start=0)
    assert refused.value.name == "NVML_ERROR_NOT_SUPPORTED"
    assert lib.calls == {}


def test_a_create_is_idempotent_by_effect():
    # given: 2g.20gb created at 2
    lib, nvml = _h100()
    first = nvml.create_instance(gpu_index=0, profile="2g.20gb", start=2)

    # when: the same create again (a re-run after a lost result or a restart)
    again = nvml.create_instance(gpu_index=0, profile="2g.20gb", start=2)

    # then: the same instance, nothing new made
    assert again == first
    assert _slots(nvml) == [("2g.20gb", 2)]
    assert lib.calls == {"create_gpu_instance": 1, "create_compute_instance": 1}


def test_a_gpu_instance_left_without_its_compute_instance_gets_it_on_the_rerun():
    # given: a crash between the two NVML calls left a bare GPU instance at 4
    lib, nvml = _h100({"profile": "3g.40gb", "start": 4, "compute_instance": False})

    # when
    made = nvml.create_instance(gpu_index=0, profile="3g.40gb", start=4)

    # then
    assert (made.gi_id, made.ci_id) == (1, 0)
    assert _layout(nvml) == [("3g.40gb", 4, 1, made.mig_uuid)]
    assert lib.calls == {"create_compute_instance": 1}


def test_when_the_compute_instance_cannot_be_made_the_new_gpu_instance_is_destroyed_again():
    # given: NVML will fail the next compute-instance create
    lib, nvml = _h100({"profile": "1g.10gb", "start": 0})
    lib.inject_failure(call="create_compute_instance", code=pynvml.NVML_ERROR_UNKNOWN)

    # when
    with pytest.raises(NvmlError) as failed:
        nvml.create_instance(gpu_index=0, profile="3g.40gb", start=4)

    # then: the layout is what it was
    assert failed.value.name == "NVML_ERROR_UNKNOWN"
    assert _slots(nvml) == [("1g.10gb", 0)]
    assert lib.calls == {"create_gpu_instance": 1, "create_compute_instance": 1, "destroy_gpu_instance": 1}


def test_destroy_removes_compute_instances_first_and_refuses_a_busy_instance():
    # given: the 3g.40gb at 4 runs a process, the 1g.10gb at 0 is free
    lib, nvml = _h100(
        {"profile": "3g.40gb", "start": 4, "processes": [{"pid": 4242, "used_mib": 100}]},
        {"profile": "1g.10gb", "start": 0},
    )

    # when
    gone = nvml.destroy_at(gpu_index=0, profile="1g.10gb", start=0)
    with pytest.raises(InstanceBusy) as busy:
        nvml.destroy_at(gpu_index=0, profile="3g.40gb", start=4)

    # then
    assert gone == 2
    assert busy.value.name == "NVML_ERROR_IN_USE"
    assert _slots(nvml) == [("3g.40gb", 4)]
    assert lib.calls == {"destroy_compute_instance": 1, "destroy_gpu_instance": 1}


def test_destroying_what_is_not_there_is_done_and_another_profile_in_the_slot_is_left_alone():
    lib, nvml = _h100({"profile": "2g.20gb", "start": 0})

    assert nvml.destroy_at(gpu_index=0, profile="1g.10gb", start=6) is None
    assert nvml.destroy_at(gpu_index=0, profile="1g.10gb", start=0) is None
    assert _slots(nvml) == [("2g.20gb", 0)]
    assert lib.calls == {}


def test_a_recreated_instance_gets_a_new_mig_device_uuid_as_on_a_real_gpu():
    lib, nvml = _h100()
    first = nvml.create_instance(gpu_index=0, profile="1g.10gb", start=3)
    nvml.destroy_at(gpu_index=0, profile="1g.10gb", start=3)
    second = nvml.create_instance(gpu_index=0, profile="1g.10gb", start=3)
    assert (second.gi_id, second.ci_id) == (first.gi_id, first.ci_id)
    assert second.mig_uuid != first.mig_uuid


def test_an_injected_failure_hits_the_nth_call_and_changes_nothing():
    # given: the second GPU-instance create from now on fails
    lib, nvml = _h100()
    lib.inject_failure(call="create_gpu_instance", nth=2, code=pynvml.NVML_ERROR_TIMEOUT)
    nvml.create_instance(gpu_index=0, profile="1g.10gb", start=0)

    # when / then: a timeout ("not now" for the agent), and the layout holds only the first
    with pytest.raises(NvmlUnavailable) as failed:
        nvml.create_instance(gpu_index=0, profile="1g.10gb", start=1)
    assert failed.value.name == "NVML_ERROR_TIMEOUT"
    assert _slots(nvml) == [("1g.10gb", 0)]
    nvml.create_instance(gpu_index=0, profile="1g.10gb", start=1)  # the third goes through
    assert _slots(nvml) == [("1g.10gb", 0), ("1g.10gb", 1)]


def test_every_layout_the_writes_leave_is_one_the_catalog_accepts():
    # given: a sequence of creates and destroys, some refused
    catalog = load_catalog()
    lib, nvml = _h100()
    steps = [
        ("create", "4g.40gb", 0),
        ("create", "3g.40gb", 4),
        ("create", "1g.10gb", 4),
        ("destroy", "4g.40gb", 0),
        ("create", "2g.20gb", 0),
        ("create", "2g.20gb", 2),
        ("create", "1g.10gb+me", 6),  # inside the 3g.40gb
        ("destroy", "3g.40gb", 4),
        ("create", "1g.20gb", 4),
        ("create", "1g.20gb", 5),  # not a placement of 1g.20gb
        ("create", "1g.10gb+me", 6),
    ]
    # when / then
    for action, profile, start in steps:
        try:
            if action == "create":
                nvml.create_instance(gpu_index=0, profile=profile, start=start)
            else:
                nvml.destroy_at(gpu_index=0, profile=profile, start=start)
        except NvmlRefused:
            pass
        assert layout_violations(catalog.model(H100), _slots(nvml)) == []
    assert _slots(nvml) == [("2g.20gb", 0), ("2g.20gb", 2), ("1g.20gb", 4), ("1g.10gb+me", 6)]
