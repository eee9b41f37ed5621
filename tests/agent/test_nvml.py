"""The agent's NVML reads against the fake: inventory, telemetry, health events and the one write it may do."""

from __future__ import annotations

import pytest

from agent.nvml import InstanceBusy, Nvml
from agent.payloads import inventory_payload
from allocations.mig.catalog import Catalog, NvmlGpuReport, NvmlProfileReport, load_catalog
from tests.agent.scenarios import A100, H100, fake, two_gpus


def test_inventory_lists_gpus_profiles_placements_and_instances():
    # given
    nvml = Nvml(fake(two_gpus()))

    # when
    inventory = nvml.inventory()

    # then
    h100, a100 = inventory.gpus
    assert inventory.driver_version == "580.95.05"
    assert (h100.index, h100.minor, h100.product, h100.memory_mib) == (0, 0, H100, 81559)
    assert (h100.mig_current, h100.mig_pending) == (1, 1)
    assert h100.uuid.startswith("GPU-")
    assert [(p.name, p.profile_id) for p in h100.profiles] == [
        ("1g.10gb", 19),
        ("2g.20gb", 14),
        ("3g.40gb", 9),
        ("4g.40gb", 5),
        ("7g.80gb", 0),
        ("1g.10gb+me", 20),
        ("1g.20gb", 15),
    ]
    assert h100.profiles[2].placements == ((0, 4), (4, 4))
    assert [(gi.profile, gi.start, gi.size, len(gi.compute_instances)) for gi in h100.instances] == [
        ("1g.10gb", 0, 1, 1),
        ("3g.40gb", 4, 4, 1),
    ]
    assert all(ci.uuid.startswith("MIG-") for gi in h100.instances for ci in gi.compute_instances)
    assert [(gi.profile, gi.start) for gi in a100.instances] == [("2g.10gb", 2)]


def test_the_inventory_feeds_the_catalogs_nvml_import_and_matches_the_catalog():
    # given
    payload = inventory_payload("node-1", Nvml(fake(two_gpus())).inventory())
    gpu = payload["gpus"][0]
    report = NvmlGpuReport(
        name=gpu["product"],
        memory_mib=gpu["memory_mib"],
        profiles=[
            NvmlProfileReport(
                name=p["name"],
                profile_id=p["id"],
                slice_count=p["slices"],
                instance_count=p["instances"],
                memory_mib=p["memory_mib"],
                placements=[tuple(pl) for pl in p["placements"]],
                sm_count=p["sm"],
            )
            for p in gpu["profiles"]
        ],
    )

    # when
    model = Catalog.from_nvml([report], base=load_catalog()).model(H100)

    # then
    built_in = load_catalog().model(H100)
    assert model.source == "nvml"
    assert {p.name: (p.profile_id, p.placements, p.max_count) for p in model.profiles} == {
        p.name: (p.profile_id, p.placements, p.max_count) for p in built_in.profiles
    }


def test_telemetry_reports_memory_processes_and_gpm_utilisation_per_mig_device():
    # given
    lib = fake(two_gpus())
    nvml = Nvml(lib)
    nvml.inventory()

    # when: GPM needs two samples, so the first has no utilisation
    first = nvml.sample()
    lib.set_sm_util(gpu_index=0, gi_id=1, value=75.5)
    second = nvml.sample()

    # then
    h100, a100 = second.gpus
    assert [m.utilisation for m in first.gpus[0].mig] == [None, None]
    rows = [(m.profile, m.start, m.memory_used_mib, m.memory_total_mib, m.processes, m.utilisation) for m in h100.mig]
    assert rows == [
        ("1g.10gb", 0, 0, 9984, 0, 0.0),
        ("3g.40gb", 4, 8192, 40448, 1, 75.5),
    ]
    assert (h100.utilisation_source, h100.memory_used_mib, h100.ecc_uncorrected) == ("gpm", 8192, 0)
    # Ampere with MIG on: NVML attributes no utilisation to MIG devices
    assert (a100.utilisation_source, [m.utilisation for m in a100.mig], a100.ecc_uncorrected) == ("none", [None], None)
    assert second.stale is False


def test_without_mig_the_whole_gpu_utilisation_is_reported():
    nvml = Nvml(fake({"gpus": [{"product": A100, "mig": False, "utilisation": 63}]}))
    gpu = nvml.sample().gpus[0]
    assert (gpu.utilisation, gpu.utilisation_source, gpu.mig) == (63.0, "device", ())


def test_xid_and_new_uncorrected_ecc_errors_become_health_events_once():
    # given
    lib = fake(two_gpus())
    nvml = Nvml(lib)
    nvml.sample()  # registers for events, reads the ECC baseline

    # when
    lib.inject_xid(gpu_index=0, code=79)
    lib.inject_xid(gpu_index=0, code=31, gi_id=1, ci_id=0)
    lib.set_ecc(gpu_index=0, uncorrected=2)
    events = nvml.sample().events

    # then
    uuid = nvml.inventory().gpus[0].uuid
    assert [(e.gpu_uuid, e.kind, e.code, e.gi_id, e.ci_id) for e in events] == [
        (uuid, "ecc", 2, None, None),
        (uuid, "xid", 79, None, None),
        (uuid, "xid", 31, 1, 0),
    ]
    assert nvml.sample().events == []


def test_a_vanished_instance_makes_the_sample_ask_for_a_new_inventory():
    lib = fake(two_gpus())
    nvml = Nvml(lib)
    nvml.inventory()
    nvml.destroy_instance(gpu_index=0, gi_id=2)  # the idle 1g.10gb; this re-reads the inventory
    assert [gi.profile for gi in nvml.inventory().gpus[0].instances] == ["3g.40gb"]
    assert nvml.sample().stale is False


def test_destroy_refuses_an_instance_with_running_processes_and_leaves_it():
    # given: the 3g.40gb (gi 1) runs pid 4242
    lib = fake(two_gpus())
    nvml = Nvml(lib)

    # when / then
    with pytest.raises(InstanceBusy):
        nvml.destroy_instance(gpu_index=0, gi_id=1)
    assert [gi.profile for gi in nvml.inventory().gpus[0].instances] == ["1g.10gb", "3g.40gb"]

    # and once it ends, the instance goes
    lib.end_process(pid=4242)
    nvml.destroy_instance(gpu_index=0, gi_id=1)
    assert [gi.profile for gi in nvml.inventory().gpus[0].instances] == ["1g.10gb"]
