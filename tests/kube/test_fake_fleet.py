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
    assert [len(s.get("devices", [])) for s in stored] == [0] + [1 + mig] * 8


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
