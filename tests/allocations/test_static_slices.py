"""Static MIG slices as NVIDIA's driver publishes them without DynamicMIG (fake_static.py), and what discovery
reads from them (published.py): the instances that exist, with their uuid, no figures from them."""

from __future__ import annotations

from agent.fake_nvml import FakeNvml
from agent.nvml import Nvml
from allocations.cluster import fake_fleet
from allocations.cluster.fake_static import static_slices
from allocations.cluster.kube import slice_info
from allocations.cluster.published import DriverPools, summarize
from allocations.mig.catalog import load_catalog
from tests.conftest import H100


def _inventory(lib: FakeNvml) -> object:
    nvml = Nvml(lib)
    try:
        return nvml.inventory()
    finally:
        nvml.close()


def _lib() -> FakeNvml:
    return FakeNvml(
        {
            "gpus": [
                {
                    "product": H100,
                    "uuid": fake_fleet.gpu_uuid("n1", 0),
                    "instances": [{"profile": "1g.10gb", "start": 6}, {"profile": "3g.40gb", "start": 0}],
                },
                {"product": H100, "uuid": fake_fleet.gpu_uuid("n1", 1), "instances": []},
                {"product": H100, "mig": False},
            ]
        }
    )


def test_each_mig_gpu_publishes_one_slice_of_the_devices_that_exist() -> None:
    # given
    model = load_catalog().model(H100)
    lib = _lib()
    # when
    bodies = static_slices(model, "n1", "uid-1", _inventory(lib), generation=3)  # type: ignore[arg-type]
    # then: MIG GPUs only, one slice each, the pool's generation and count on every slice, no counters
    assert len(bodies) == 2
    assert all(b["spec"]["pool"] == {"name": "n1", "generation": 3, "resourceSliceCount": 2} for b in bodies)
    assert all("sharedCounters" not in b["spec"] for b in bodies)
    first, empty = bodies[0]["spec"]["devices"], bodies[1]["spec"]["devices"]
    assert empty == []
    assert [d["name"] for d in first] == ["gpu-0-mig-1g10gb-19-6", "gpu-0-mig-3g40gb-9-0"]  # sorted by name
    small = first[0]
    assert "consumesCounters" not in small
    assert small["attributes"]["type"] == {"string": "mig"}
    assert small["attributes"]["profile"] == {"string": "1g.10gb"}
    assert small["attributes"]["parentUUID"] == {"string": fake_fleet.gpu_uuid("n1", 0)}
    assert small["attributes"]["uuid"]["string"].startswith("MIG-")
    assert small["capacity"]["memorySlice6"] == {"value": "1"}
    assert [k for k in small["capacity"] if k.startswith("memorySlice")] == ["memorySlice6"]
    assert sorted(k for k in first[1]["capacity"] if k.startswith("memorySlice")) == [
        f"memorySlice{i}" for i in range(4)
    ]
    assert {"multiprocessors", "copyEngines", "memory"} <= set(small["capacity"])


def test_discovery_reads_the_instances_with_their_uuids_and_no_figures() -> None:
    # given
    model = load_catalog().model(H100)
    lib = _lib()
    inventory = _inventory(lib)
    pools = DriverPools()
    # when
    for n, body in enumerate(static_slices(model, "n1", "uid-1", inventory)):  # type: ignore[arg-type]
        body["metadata"]["name"] = f"slice-{n}"
        pools.put(summarize(slice_info(body)))
    published = pools.published("n1")
    # then
    assert published is not None and published.dynamic_mig is False
    gpu0 = published.gpus[0]
    assert gpu0.static_mig and gpu0.figures is None  # the catalog's figures stand
    assert [(i.profile, i.start, i.size) for i in gpu0.instances] == [("3g.40gb", 0, 4), ("1g.10gb", 6, 1)]
    uuids = {gi.start: gi.compute_instances[0].uuid for gi in inventory.gpus[0].instances}  # type: ignore[attr-defined]
    assert {i.start: i.uuid for i in gpu0.instances} == uuids
    assert gpu0.instances[1].device == "gpu-0-mig-1g10gb-19-6"
