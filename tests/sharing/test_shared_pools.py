"""Pools of kind shared (time-sliced) and mps on the API and in the service: a GPU model of the non-MIG catalog,
no profiles, 400 with field messages on bad input, kind changes refused while requests hold quota."""

from __future__ import annotations

from typing import Any

import pytest

from allocations import services
from allocations.models import NodePool
from tenants.models import AuditEvent
from tests.conftest import World
from tests.sharing.conftest import Shared


def test_an_admin_creates_a_time_sliced_pool_and_the_api_says_what_it_isolates(world: World) -> None:
    # when
    response = world.client(world.root).post(
        "/api/v1/pools/",
        {"name": "L4", "slug": "l4", "gpu_model": "NVIDIA L4", "kind": "shared", "sharing_interval": "Short"},
        format="json",
    )
    # then
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["kind"], body["sharing_interval"], body["profiles"]) == ("shared", "Short", [])
    assert body["gpu_memory_mib"] == 23034
    assert "No isolation" in body["isolation"]
    assert "a crash or a memory hog hurts every tenant on the GPU" in body["isolation_warning"]
    assert NodePool.objects.get(slug="l4").is_shared
    event = AuditEvent.objects.filter(verb="create", object_type="nodepool").order_by("pk").last()
    assert event is not None and event.after["kind"] == "shared"


def test_a_mig_pool_reads_as_hardware_isolated_with_no_warning(world: World) -> None:
    body = world.client(world.alice).get(f"/api/v1/pools/{world.pool.pk}/").json()
    assert (body["kind"], body["isolation_warning"], body["gpu_memory_mib"]) == ("mig", "", None)
    assert "memory, cache and SMs" in body["isolation"]


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"gpu_model": "NVIDIA L4", "kind": "shared", "profiles": ["1g.10gb"]}, "profiles"),
        ({"gpu_model": "NVIDIA H100 80GB HBM3", "kind": "shared"}, "gpu_model"),
        ({"gpu_model": "NVIDIA L4", "kind": "mps", "sharing_interval": "Long"}, "sharing_interval"),
        ({"gpu_model": "NVIDIA L4", "kind": "mig"}, "gpu_model"),
        ({"gpu_model": "NVIDIA L4", "kind": "vgpu"}, "kind"),
        ({"gpu_model": "NVIDIA L4", "kind": "shared", "sharing_interval": "Forever"}, "sharing_interval"),
    ],
)
def test_bad_shared_pools_are_a_400_with_a_field_message(world: World, payload: dict[str, Any], field: str) -> None:
    response = world.client(world.root).post("/api/v1/pools/", {"name": "X", "slug": "x", **payload}, format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()["errors"]
    assert not NodePool.objects.filter(slug="x").exists()


def test_an_idle_pool_changes_kind_and_model_and_profiles_are_emptied(world: World) -> None:
    pool = services.create_node_pool(name="Spare", slug="spare", gpu_model="NVIDIA H100 80GB HBM3", actor=world.root)
    response = world.client(world.root).patch(
        f"/api/v1/pools/{pool.pk}/", {"kind": "mps", "gpu_model": "NVIDIA T4"}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert (response.json()["kind"], response.json()["gpu_model"], response.json()["profiles"]) == (
        "mps",
        "NVIDIA T4",
        [],
    )


def test_a_kind_change_is_refused_while_requests_hold_quota(shared: Shared) -> None:
    world = shared.world
    services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=shared.l4.pk,
        profile="",
        memory_mib=2048,
        count=1,
        lease_hours=2,
        purpose="inference",
        actor=world.alice,
    )
    response = world.client(world.root).patch(f"/api/v1/pools/{shared.l4.pk}/", {"kind": "mps"}, format="json")
    assert response.status_code == 400
    assert "stranded" in response.json()["errors"]["kind"][0]
    shared.l4.refresh_from_db()
    assert shared.l4.kind == "shared"
