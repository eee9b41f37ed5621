"""The fake fleet publishes what NVIDIA's DRA driver publishes, for any GPU model of the MIG catalog."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from kubernetes import client

from allocations import services
from allocations.cluster import fake_fleet
from allocations.cluster import sync as kube_sync
from allocations.mig.catalog import load_catalog
from allocations.models import Allocation
from tests.conftest import H100
from tests.kube.conftest import EXAMPLE_GPU_UUIDS, EXAMPLE_NODE, EXAMPLE_SLICES, ControlPlane, KubeWorld, as_json
from tests.kube.test_provisioning import placements, provision_and_wait, request

Status = Allocation.Status


def test_the_generated_h100_slices_are_nvidias_example_but_for_names_and_uuids() -> None:
    # given: NVIDIA's example for two H100 80GB HBM3, its GPU UUIDs replaced by the fleet's
    text = EXAMPLE_SLICES.read_text()
    for index, example_uuid in enumerate(EXAMPLE_GPU_UUIDS):
        text = text.replace(example_uuid, fake_fleet.gpu_uuid(EXAMPLE_NODE, index))
    example = json.loads(text)
    for body in example:
        body["metadata"].pop("name")  # a placeholder; the server picks names from generateName

    # when
    generated = fake_fleet.resource_slices(
        load_catalog().model(H100), EXAMPLE_NODE, "00000000-0000-0000-0000-000000000000", 2
    )

    # then: equal, except the memory of the two 20 GB profiles: the example's figure is inferred (its README),
    # the catalog's is NVML's (mig_profiles.json)
    assert text.count('"20096Mi"') == 28  # 2 GPUs x (4 x 1g.20gb + 3 x 2g.20gb) x (capacity + counters)
    assert generated == json.loads(json.dumps(example).replace('"20096Mi"', '"20091Mi"'))


@pytest.mark.parametrize("model_name", load_catalog().model_names())
def test_the_api_server_accepts_an_eight_gpu_node_of_every_catalog_model(
    model_name: str, admin: client.ApiClient, nvidia_device_classes: list[str]
) -> None:
    # given
    model = load_catalog().model(model_name)
    name = f"fleet-{uuid.uuid4().hex[:8]}"

    # when
    node = fake_fleet.publish_node(admin, model, name, 8)

    # then: stored field for field (sharedCounters and consumesCounters kept), one slice per GPU plus counters
    api = client.ResourceV1Api(admin)
    stored = [as_json(admin, api.read_resource_slice(n))["spec"] for n in node.slice_names]
    assert stored == [body["spec"] for body in fake_fleet.resource_slices(model, name, node.uid, 8)]
    assert len(stored) == 9
    mig = sum(len(p.placements) for p in model.profiles)
    full_gpu = 0 if model_name in AMPERE else 1  # the driver publishes no full Ampere GPU while MIG is on
    assert [len(s.get("devices", [])) for s in stored] == [0] + [full_gpu + mig] * 8


AMPERE = ("NVIDIA A30", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe")


@pytest.mark.parametrize("model_name", load_catalog().model_names())
def test_each_gpus_devices_come_sorted_by_name_in_byte_order_as_the_driver_sorts_them(model_name: str) -> None:
    # when
    slices = fake_fleet.resource_slices(load_catalog().model(model_name), "n1", "uid-1", 2)
    # then: Go's slices.Sorted on the names (byte order), which is what kube-scheduler walks
    for body in slices[1:]:
        names = [d["name"] for d in body["spec"]["devices"]]
        assert names == sorted(names, key=str.encode)
    # and: on the A100, whose profiles do not sort by size, that is not the catalog's order
    if model_name == "NVIDIA A100-SXM4-40GB":
        assert [n for n in names if n.endswith("-0")][:3] == [
            "gpu-1-mig-1g10gb-15-0",
            "gpu-1-mig-1g5gb-19-0",
            "gpu-1-mig-1g5gb-me-20-0",
        ]


def test_slices_are_named_by_their_index_in_hex_and_sixteen_gpus_have_sixteen_pci_bus_ids() -> None:
    # given: the largest node the portal registers (16 GPUs: 2 slices of 8 counter sets, then 16 of devices)
    model = load_catalog().model(H100)

    # when
    slices = fake_fleet.resource_slices(model, "n1", "uid-1", 16)

    # then: the resourceslice controller's prefix, 5 hex digits: 0000a for the eleventh slice, 00011 for the 18th
    prefixes = [body["metadata"]["generateName"].removesuffix("-gpu.nvidia.com-n1-") for body in slices]
    assert prefixes == [f"{i:05x}" for i in range(18)]
    assert (prefixes[10], prefixes[17]) == ("0000a", "00011")
    assert [len(body["spec"].get("sharedCounters", [])) for body in slices[:3]] == [8, 8, 0]
    assert {body["spec"]["pool"]["resourceSliceCount"] for body in slices} == {18}
    # and: every GPU has a PCI bus id of its own, in index order (the driver orders GPUs' slices by it)
    bus_ids = [
        body["spec"]["devices"][0]["attributes"]["resource.kubernetes.io/pciBusID"]["string"] for body in slices[2:]
    ]
    assert len(set(bus_ids)) == 16
    assert bus_ids == sorted(bus_ids)
    assert (bus_ids[0], bus_ids[7], bus_ids[8], bus_ids[15]) == (
        "0000:18:00.0",
        "0000:db:00.0",
        "0001:18:00.0",
        "0001:db:00.0",
    )


@pytest.mark.parametrize(
    ("model_name", "full_gpu"), [("NVIDIA A100-SXM4-40GB", False), ("NVIDIA A30", False), (H100, True)]
)
def test_only_gpus_that_can_leave_mig_mode_publish_the_full_gpu(model_name: str, full_gpu: bool) -> None:
    # when
    slices = fake_fleet.resource_slices(load_catalog().model(model_name), "n1", "uid-1", 1)
    # then: Ampere cannot switch MIG off without a GPU reset, so the driver publishes no gpu-0 there
    devices = slices[1]["spec"]["devices"]
    assert ("gpu-0" in [d["name"] for d in devices]) is full_gpu
    assert [d["attributes"]["type"]["string"] for d in devices].count("gpu") == int(full_gpu)
    # and: the counter set the MIG devices consume is published all the same
    assert [c["name"] for c in slices[0]["spec"]["sharedCounters"]] == ["gpu-0-counter-set"]


def test_the_api_server_accepts_a_sixteen_gpu_node(admin: client.ApiClient, nvidia_device_classes: list[str]) -> None:
    # given
    model = load_catalog().model(H100)
    name = f"fleet-{uuid.uuid4().hex[:8]}"
    # when
    node = fake_fleet.publish_node(admin, model, name, 16)
    # then: 18 slices, named from their hex prefixes by the server
    assert [n[:6] for n in node.slice_names] == [f"{i:05x}-" for i in range(18)]
    api = client.ResourceV1Api(admin)
    stored = [as_json(admin, api.read_resource_slice(n))["spec"] for n in node.slice_names]
    assert stored == [body["spec"] for body in fake_fleet.resource_slices(model, name, node.uid, 16)]


def test_the_portal_provisions_on_a_generated_eight_gpu_node(
    kube_world: KubeWorld, admin: client.ApiClient, control_plane: ControlPlane, settings: Any
) -> None:
    # given: a second pool with one generated 8-GPU H100 node, registered with its GPU UUIDs
    kw = kube_world
    model = load_catalog().model(H100)
    node = fake_fleet.publish_node(admin, model, f"fleet-{uuid.uuid4().hex[:8]}", 8)
    pool = services.create_node_pool(name="H100 x8", slug="h100-x8", gpu_model=H100, actor=kw.world.root)
    kube_sync.register_cluster_node(pool_id=pool.pk, name=node.name, gpu_uuids=list(node.gpu_uuids))
    services.set_tenant_quota(
        tenant_id=kw.world.tenant_a.pk,
        pool_id=pool.pk,
        compute_slices_limit=56,
        memory_slices_limit=64,
        actor=kw.world.root,
    )
    kube_sync.onboard_tenant(tenant_id=kw.world.tenant_a.pk)
    kw.pool = pool

    # when
    active = provision_and_wait(request(kw, "3g.40gb").pk)

    # then
    assert active.status == Status.ACTIVE
    [(node_name, gpu_index, start, device)] = placements(active)
    assert node_name == node.name
    assert device == f"gpu-{gpu_index}-mig-3g40gb-9-{start}"
