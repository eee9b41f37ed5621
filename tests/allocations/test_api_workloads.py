"""The workloads and advisor endpoints (allocations/api/workloads.py): answers, tenancy, and 400s with field
messages for bad input, never a 500."""

from __future__ import annotations

import pytest
import yaml

from allocations import services
from tests.allocating import active_request, shared_l4_pool
from tests.conftest import World

POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: mine}\nspec:\n  containers: [{name: c, image: busybox}]\n"


def test_manifests_of_an_active_request_reference_its_claim_in_its_namespace(world: World):
    # given
    allocation = active_request(world)
    # when
    response = world.client(world.alice).get(
        f"/api/v1/allocations/{allocation.pk}/manifests/", {"kind": "vllm", "model": "org/model", "args": "--x 1"}
    )
    # then
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["namespace"] == "fatia-team-a" and body["claims"] == allocation.claim_names
    service, deployment = yaml.safe_load_all(body["yaml"])
    assert service["kind"] == "Service" and deployment["metadata"]["namespace"] == "fatia-team-a"
    spec = deployment["spec"]["template"]["spec"]
    assert spec["resourceClaims"] == [{"name": "fatia-gpu", "resourceClaimName": allocation.claim_name}]
    assert spec["tolerations"] == world.pool.tolerations
    assert spec["containers"][0]["args"][:2] == ["--model", "org/model"]
    assert spec["containers"][0]["args"][-2:] == ["--x", "1"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({}, "kind"),
        ({"kind": "helm"}, "kind"),
        ({"kind": "pod", "image": "a b"}, "image"),
        ({"kind": "pod", "name": "UPPER"}, "name"),
        ({"kind": "vllm", "args": "'open"}, "args"),
        ({"kind": "pod", "share": "1"}, "share"),
        # an empty share or name is no share or name, not "left out" (the schema's minimum length is 1)
        ({"kind": "pod", "share": ""}, "share"),
        ({"kind": "pod", "name": ""}, "name"),
    ],
)
def test_bad_manifest_parameters_are_400_with_the_field(world: World, params, field):
    allocation = active_request(world)
    response = world.client(world.alice).get(f"/api/v1/allocations/{allocation.pk}/manifests/", params)
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"]


def test_a_request_that_is_not_active_has_no_manifests_yet(world: World):
    pending, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="7g.80gb",
        count=1,
        lease_hours=8,
        purpose="big",
        actor=world.alice,
    )
    response = world.client(world.alice).get(f"/api/v1/allocations/{pending.pk}/manifests/", {"kind": "pod"})
    assert response.status_code == 409
    assert "once it is active" in response.json()["detail"]


def test_another_tenants_request_is_not_found(world: World):
    allocation = active_request(world)
    client = world.client(world.charlie)
    assert client.get(f"/api/v1/allocations/{allocation.pk}/manifests/", {"kind": "pod"}).status_code == 404
    assert (
        client.post(f"/api/v1/allocations/{allocation.pk}/attach/", {"manifest": POD}, format="json").status_code == 404
    )


def test_attach_returns_the_users_manifest_with_the_claim(world: World):
    allocation = active_request(world)
    response = world.client(world.alice).post(
        f"/api/v1/allocations/{allocation.pk}/attach/", {"manifest": POD, "containers": ["c"]}, format="json"
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["attached"] == [{"kind": "Pod", "name": "mine", "containers": ["c"]}]
    (pod,) = yaml.safe_load_all(body["yaml"])
    assert pod["metadata"]["namespace"] == "fatia-team-a"
    assert pod["spec"]["resourceClaims"][0]["resourceClaimName"] == allocation.claim_name


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "manifest"),
        ({"manifest": "kind: [unclosed"}, "manifest"),
        ({"manifest": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"}, "manifest"),
        ({"manifest": POD.replace("{name: mine}", "{name: mine, namespace: prod}")}, "namespace"),
        ({"manifest": POD, "containers": ["missing"]}, "containers"),
        ({"manifest": POD, "share": -1}, "share"),
        ({"manifest": POD, "share": 0}, "share"),
        ({"manifest": 42}, "manifest"),
    ],
)
def test_bad_attach_input_is_400_with_the_field(world: World, body, field):
    allocation = active_request(world)
    response = world.client(world.alice).post(f"/api/v1/allocations/{allocation.pk}/attach/", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"]


def test_a_request_over_32_slices_is_in_several_claims_and_the_pod_takes_them_all(world: World):
    # given: quota for 40 x 1g.10gb
    services.set_tenant_quota(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        compute_slices_limit=40,
        memory_slices_limit=40,
        actor=world.root,
    )
    allocation = active_request(world, count=40)
    # when
    body = world.client(world.alice).get(f"/api/v1/allocations/{allocation.pk}/manifests/", {"kind": "job"}).json()
    # then
    (job,) = body["objects"]
    spec = job["spec"]["template"]["spec"]
    assert [c["resourceClaimName"] for c in spec["resourceClaims"]] == allocation.claim_names
    assert len(allocation.claim_names) == 2


def test_a_shared_pool_request_gets_one_workload_per_share(world: World):
    # given
    allocation = active_request(world, pool=shared_l4_pool(world), profile="", memory_mib=4096, count=2, lease_hours=3)
    client = world.client(world.alice)
    # when
    every = client.get(f"/api/v1/allocations/{allocation.pk}/manifests/", {"kind": "pod"}).json()
    vllm = client.get(f"/api/v1/allocations/{allocation.pk}/manifests/", {"kind": "vllm", "share": "1"}).json()
    attach_without_share = client.post(f"/api/v1/allocations/{allocation.pk}/attach/", {"manifest": POD}, format="json")
    # then
    assert [o["spec"]["resourceClaims"][0]["resourceClaimName"] for o in every["objects"]] == allocation.claim_names
    args = vllm["objects"][1]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--gpu-memory-utilization" in args
    assert attach_without_share.status_code == 400 and "share" in attach_without_share.json()["errors"]


def test_advice_names_the_smallest_fitting_profile_with_its_cost_and_what_fits_now(world: World):
    # when
    response = world.client(world.alice).get(
        "/api/v1/advice/",
        {"model": "llama-3.1-8b", "precision": "bf16", "context_length": "8192", "sequences": "4", "mode": "serve"},
    )
    # then
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["known_model"] is True and body["estimate_gib"]["weights"] == pytest.approx(14.96, abs=0.01)
    (pool,) = body["pools"]
    assert pool["profile"] == "3g.40gb" and pool["fits"] is True
    assert pool["cost"] == {"compute_slices": 3, "memory_slices": 4, "gpu_equivalents": 0.5}
    assert pool["units"] == {"compute": "compute slices", "memory": "memory slots"}
    assert pool["fits_now"] == 32  # two nodes of eight H100s, two 3g.40gb each
    assert [r["choice"] for r in pool["refused"]][:1] == ["1g.10gb"]


def test_advice_for_a_model_too_big_for_any_slice_says_so(world: World):
    body = world.client(world.alice).get("/api/v1/advice/", {"params_b": "180"}).json()
    (pool,) = body["pools"]
    assert pool["fits"] is False and pool["profile"] is None and pool["cost"] is None
    assert "assumed" in body["notes"][0]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({}, "model"),
        ({"model": "nobody-knows-7b"}, "model"),
        ({"model": "llama-3.1-8b", "params_b": "8"}, "params_b"),
        ({"params_b": "-1"}, "params_b"),
        ({"params_b": "nan"}, "params_b"),
        ({"params_b": "eight"}, "params_b"),
        ({"params_b": "8", "precision": "fp4"}, "precision"),
        ({"params_b": "8", "mode": "train"}, "mode"),
        ({"params_b": "8", "mode": "full", "precision": "int4"}, "precision"),
        ({"params_b": "8", "context_length": "0"}, "context_length"),
        ({"params_b": "8", "sequences": "1.5"}, "sequences"),
        ({"params_b": "8", "pool": "999999"}, "pool"),
        ({"params_b": "8", "pool": "x"}, "pool"),
        ({"params_b": "8", "pool": ""}, "pool"),
        ({"model": "", "params_b": "8"}, "model"),
        ({"params_b": "8", "precision": ""}, "precision"),
        ({"params_b": "8", "context_length": ""}, "context_length"),
    ],
)
def test_bad_advice_questions_are_400_with_the_field(world: World, params, field):
    response = world.client(world.alice).get("/api/v1/advice/", params)
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"]
