"""The fake fleet publishes shareable whole GPUs exactly as NVIDIA's driver does with consumable shares on, and
the real API server takes them (issue 13)."""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

import pytest
from kubernetes import client

from allocations.cluster import fake_shared
from allocations.cluster.fake_fleet import gpu_uuid
from tests.kube.conftest import DATA, as_json

DRIVER_DEVICE = DATA / "nvidia-consumable-shares-l4.json"
FIXTURE_UUID = "GPU-0b6f3e52-9d1a-4c7e-8f20-3a5d6c1e7b94"
L4 = "NVIDIA L4"


def driver_devices() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DRIVER_DEVICE.read_text())
    return loaded


def test_an_l4_is_the_device_the_driver_publishes_with_memory_shares_but_for_its_uuid() -> None:
    # given: the driver's device for GPU 0 of an L4 node with --consumable-shares=memory (the fixture's source)
    expected = copy.deepcopy(driver_devices()["memory"])
    expected["attributes"]["uuid"]["string"] = gpu_uuid("gpu-node-1", 0)

    # when
    [body] = fake_shared.shared_resource_slices(fake_shared.SHAREABLE_GPUS[L4], "gpu-node-1", "uid-1", 1)

    # then: field for field; one slice, no counter sets (no DynamicMIG)
    assert body["spec"]["devices"] == [expected]
    assert "sharedCounters" not in body["spec"]
    assert body["spec"]["pool"] == {"name": "gpu-node-1", "generation": 1, "resourceSliceCount": 1}


@pytest.mark.parametrize("model", sorted(fake_shared.SHAREABLE_GPUS))
def test_every_shareable_model_has_the_drivers_fields_and_memory_request_policy(model: str) -> None:
    # given
    gpu = fake_shared.SHAREABLE_GPUS[model]
    reference = driver_devices()["memory"]

    # when
    [body] = fake_shared.shared_resource_slices(gpu, "n1", "uid-1", 2)

    # then: the same fields and attribute names; the policy of --consumable-shares=memory: a claim asking for no
    # memory takes the whole GPU (default = value), any whole number of MiB up to all of it
    whole = f"{gpu.memory_mib // 1024}Gi" if gpu.memory_mib % 1024 == 0 else f"{gpu.memory_mib}Mi"
    for device in body["spec"]["devices"]:
        assert sorted(device) == sorted(reference)
        assert sorted(device["attributes"]) == sorted(reference["attributes"])
        assert device["allowMultipleAllocations"] is True
        assert device["capacity"] == {
            "memory": {
                "value": whole,
                "requestPolicy": {"default": whole, "validRange": {"min": "1Mi", "max": whole, "step": "1Mi"}},
            }
        }
    assert [d["name"] for d in body["spec"]["devices"]] == ["gpu-0", "gpu-1"]


def test_the_memory_policy_is_not_the_unlimited_one_which_would_let_claims_without_a_size_share_for_free() -> None:
    # given: the two policies the driver can publish on `memory`
    devices = driver_devices()
    # when
    ours = fake_shared.memory_capacity(23034)
    # then: ours is `memory` (default: the whole GPU), not `unlimited` (default 0, any number of claims)
    assert ours == devices["memory"]["capacity"]["memory"]
    assert ours != devices["unlimited"]["capacity"]["memory"]
    assert devices["unlimited"]["capacity"]["memory"]["requestPolicy"]["default"] == "0"


def test_the_api_server_accepts_shareable_gpus_and_keeps_their_request_policy(
    admin: client.ApiClient, nvidia_device_classes: list[str]
) -> None:
    # given
    name = f"l4-{uuid.uuid4().hex[:8]}"

    # when
    node = fake_shared.publish_shared_node(admin, L4, name, 4)

    # then: stored field for field (allowMultipleAllocations and requestPolicy kept: the feature is on)
    api = client.ResourceV1Api(admin)
    [stored] = [as_json(admin, api.read_resource_slice(n))["spec"] for n in node.slice_names]
    [sent] = fake_shared.shared_resource_slices(fake_shared.SHAREABLE_GPUS[L4], name, node.uid, 4)
    assert stored == sent["spec"]
    assert [d["allowMultipleAllocations"] for d in stored["devices"]] == [True] * 4
    assert node.gpu_uuids == tuple(gpu_uuid(name, i) for i in range(4))
    assert FIXTURE_UUID not in json.dumps(stored)
