"""Requests in time-sliced and MPS pools: memory per share, MPS thread share, validated with field messages;
cost in GiB and percent of a GPU; the tenant's isolation policy; placement by memory on the simulated backend."""

from __future__ import annotations

from typing import Any

import pytest

from allocations import services
from allocations.models import Allocation, Quota, SlicePlacement
from tenants import services as tenant_services
from tests.sharing.conftest import Shared


def post_request(shared: Shared, pool_id: int, user: Any = None, **fields: Any) -> Any:
    world = shared.world
    body = {"tenant": world.tenant_a.pk, "pool": pool_id, "count": 1, "lease_hours": 2, "purpose": "inference"}
    return world.client(user or world.alice).post("/api/v1/allocations/", {**body, **fields}, format="json")


def test_a_share_request_costs_gib_and_percent_and_lands_on_one_gpu(shared: Shared) -> None:
    # when
    response = post_request(shared, shared.l4.pk, memory_mib=4096, count=2)
    # then
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["profile"], body["memory_mib"], body["thread_percentage"]) == ("share", 4096, None)
    assert (body["memory_slices"], body["compute_slices"]) == (8, 36)
    assert body["gpu_equivalents"] == pytest.approx(round(2 * 4096 / 23034, 3))
    assert body["pool_kind"] == "shared"
    assert "No isolation" in body["isolation_warning"]
    assert body["status"] == "approved"
    # and the simulated backend packs both shares onto the first GPU
    allocation = services.provision_allocation(allocation_id=body["id"])
    assert allocation.status == Allocation.Status.ACTIVE
    placements = list(SlicePlacement.objects.filter(allocation=allocation).values_list("gpu__index", "memory_mib"))
    assert placements == [(0, 4096), (0, 4096)]
    detail = shared.world.client(shared.world.alice).get(f"/api/v1/allocations/{body['id']}/").json()
    assert [p["memory_mib"] for p in detail["placements"]] == [4096, 4096]
    quota = Quota.objects.get(tenant=shared.world.tenant_a, pool=shared.l4)
    assert (quota.memory_slices_used, quota.compute_slices_used) == (8, 36)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({}, "memory_mib"),
        ({"memory_mib": 0}, "memory_mib"),
        ({"memory_mib": 23035}, "memory_mib"),
        ({"memory_mib": "lots"}, "memory_mib"),
        ({"memory_mib": 1024, "thread_percentage": 50}, "thread_percentage"),
    ],
)
def test_bad_time_sliced_requests_are_a_400_with_field_messages(
    shared: Shared, fields: dict[str, Any], field: str
) -> None:
    response = post_request(shared, shared.l4.pk, **fields)
    assert response.status_code == 400, response.json()
    assert field in response.json()["errors"]
    assert not Allocation.objects.filter(pool=shared.l4).exists()


@pytest.mark.parametrize("threads", [None, 0, 101])
def test_an_mps_request_needs_a_thread_share_from_1_to_100(shared: Shared, threads: int | None) -> None:
    fields = {"memory_mib": 8192} if threads is None else {"memory_mib": 8192, "thread_percentage": threads}
    response = post_request(shared, shared.mps.pk, **fields)
    assert response.status_code == 400
    assert "thread_percentage" in response.json()["errors"]


def test_an_mps_share_costs_its_thread_share_and_mps_shares_never_pass_100_percent(shared: Shared) -> None:
    ids = []
    for _ in range(3):
        response = post_request(shared, shared.mps.pk, memory_mib=1024, thread_percentage=40)
        assert response.status_code == 201, response.json()
        assert response.json()["compute_slices"] == 40
        ids.append(response.json()["id"])
    for allocation_id in ids:
        services.provision_allocation(allocation_id=allocation_id)
    placed = list(
        SlicePlacement.objects.filter(allocation_id__in=ids)
        .order_by("allocation_id")
        .values_list("gpu__index", flat=True)
    )
    # two 40 % shares fit one GPU, the third goes to the second GPU
    assert placed == [0, 0, 1]


def test_a_memory_size_in_a_mig_pool_is_refused(shared: Shared) -> None:
    response = post_request(shared, shared.world.pool.pk, profile="1g.10gb", memory_mib=1024)
    assert response.status_code == 400
    assert "memory_mib" in response.json()["errors"]


def test_the_quota_shortfall_speaks_gib(shared: Shared) -> None:
    response = post_request(shared, shared.mps.pk, memory_mib=20 * 1024, thread_percentage=10, count=4)
    assert response.status_code == 201
    assert response.json()["status"] == "pending"
    assert "Needs 80 GiB; 64 of 64 are free." in response.json()["status_message"]


def test_time_sliced_shares_beyond_the_percent_quota_wait_for_a_manager(shared: Shared) -> None:
    response = post_request(shared, shared.l4.pk, memory_mib=20 * 1024, count=3)
    assert response.json()["status"] == "pending"
    assert "Needs 267 % of a GPU; 200 of 200 are free." in response.json()["status_message"]


def test_auto_approve_bounds_shares_in_gpu_equivalents(shared: Shared) -> None:
    # Team B auto-approves up to 2 compute slices of 7: 2/7 of a GPU (6581 MiB of an L4)
    world = shared.world
    small = post_request(shared, shared.l4.pk, user=world.charlie, tenant=world.tenant_b.pk, memory_mib=6500)
    large = post_request(shared, shared.l4.pk, user=world.charlie, tenant=world.tenant_b.pk, memory_mib=6700)
    assert (small.json()["status"], large.json()["status"]) == ("approved", "pending")
    assert "beyond the auto-approve policy" in large.json()["status_message"]


def test_a_mig_only_tenant_cannot_submit_to_a_shared_pool(shared: Shared) -> None:
    world = shared.world
    # given
    response = world.client(world.root).patch(
        f"/api/v1/tenants/{world.tenant_a.pk}/", {"weakest_isolation": "mig"}, format="json"
    )
    assert response.status_code == 200 and response.json()["weakest_isolation"] == "mig"
    # when
    refused = post_request(shared, shared.l4.pk, memory_mib=1024)
    refused_mps = post_request(shared, shared.mps.pk, memory_mib=1024, thread_percentage=10)
    # then
    assert refused.status_code == 400 and refused_mps.status_code == 400
    message = refused.json()["errors"]["pool"][0]
    assert "Team A accepts no GPU sharing weaker than MIG" in message
    assert "a crash or a memory hog hurts every tenant" in message
    assert not Allocation.objects.filter(tenant=world.tenant_a).exists()


def test_an_mps_tenant_may_use_mps_but_not_time_slicing(shared: Shared) -> None:
    tenant_services.update_tenant_policy(
        tenant_id=shared.world.tenant_a.pk, actor=shared.world.root, weakest_isolation="mps"
    )
    assert post_request(shared, shared.mps.pk, memory_mib=1024, thread_percentage=10).status_code == 201
    assert post_request(shared, shared.l4.pk, memory_mib=1024).status_code == 400


def test_only_admins_set_the_isolation_policy_and_bad_values_are_a_400(shared: Shared) -> None:
    world = shared.world
    url = f"/api/v1/tenants/{world.tenant_a.pk}/"
    assert world.client(world.mallory).patch(url, {"avoid_co_tenants": True}, format="json").status_code == 403
    bad = world.client(world.root).patch(url, {"weakest_isolation": "none"}, format="json")
    assert bad.status_code == 400 and "weakest_isolation" in bad.json()["errors"]


def test_a_tenant_that_avoids_co_tenants_gets_its_own_gpu(shared: Shared) -> None:
    world = shared.world
    tenant_services.update_tenant_policy(tenant_id=world.tenant_b.pk, actor=world.root, avoid_co_tenants=True)
    first = post_request(shared, shared.l4.pk, memory_mib=2048).json()["id"]
    services.provision_allocation(allocation_id=first)
    response = post_request(
        shared, shared.l4.pk, user=world.charlie, tenant=world.tenant_b.pk, memory_mib=2048, purpose="alone"
    )
    assert response.status_code == 201, response.json()
    services.provision_allocation(allocation_id=response.json()["id"])
    a_gpu = SlicePlacement.objects.get(allocation_id=first).gpu_id
    b_gpu = SlicePlacement.objects.get(allocation_id=response.json()["id"]).gpu_id
    assert a_gpu != b_gpu
    # and tenant A's next share does not land on B's GPU either (it packs onto its own)
    again = post_request(shared, shared.l4.pk, memory_mib=2048).json()["id"]
    services.provision_allocation(allocation_id=again)
    assert SlicePlacement.objects.get(allocation_id=again).gpu_id == a_gpu


def test_capacity_of_a_shared_pool_is_told_in_gib(shared: Shared) -> None:
    first = post_request(shared, shared.l4.pk, memory_mib=20 * 1024).json()["id"]
    services.provision_allocation(allocation_id=first)
    body = shared.world.client(shared.world.alice).get(f"/api/v1/pools/{shared.l4.pk}/capacity/").json()
    assert body["whole_gpus_free"] == 3
    assert body["fits_now"]["16 GiB"] == 3
    assert body["fits_now"]["whole GPU"] == 3
    assert body["free_memory_gib"] == pytest.approx(round((4 * 23034 - 20480) / 1024, 1))


def test_a_full_pool_fails_the_request_and_gives_the_quota_back(shared: Shared) -> None:
    world = shared.world
    services.set_tenant_quota(
        tenant_id=world.tenant_a.pk,
        pool_id=shared.mps.pk,
        compute_slices_limit=200,
        memory_slices_limit=128,
        actor=world.root,
    )
    ids = [post_request(shared, shared.mps.pk, memory_mib=30000, thread_percentage=10).json()["id"] for _ in range(3)]
    outcomes = [services.provision_allocation(allocation_id=i).status for i in ids]
    assert outcomes == ["active", "active", "failed"]
    quota = Quota.objects.get(tenant=shared.world.tenant_a, pool=shared.mps)
    assert quota.memory_slices_used == 2 * 30
