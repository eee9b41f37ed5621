"""A pool's MIG mode (issue 12, static MIG): dynamic by default, set by platform admins through the API and the
pools page, shown on the fleet page, refused while the pool holds live requests (their slices would be stranded)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from allocations import services
from allocations.models import Allocation, NodePool
from tenants.errors import InvalidInput
from tenants.models import AuditEvent
from tests.conftest import World


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_new_pool_is_dynamic_unless_told_otherwise(world: World) -> None:
    # when
    dynamic = world.client(world.root).post(
        "/api/v1/pools/", {"name": "H200", "slug": "h200", "gpu_model": "NVIDIA H200"}, format="json"
    )
    static = world.client(world.root).post(
        "/api/v1/pools/",
        {"name": "H200 static", "slug": "h200-static", "gpu_model": "NVIDIA H200", "mig_mode": "static-agent"},
        format="json",
    )
    # then
    assert (dynamic.status_code, dynamic.json()["mig_mode"]) == (201, "dynamic")
    assert (static.status_code, static.json()["mig_mode"]) == (201, "static-agent")
    assert NodePool.objects.get(slug="h200-static").is_static
    assert world.pool.mig_mode == NodePool.MigMode.DYNAMIC


def test_an_admin_changes_an_idle_pools_mode_and_the_change_is_audited(world: World) -> None:
    # when
    response = world.client(world.root).patch(f"/api/v1/pools/{world.pool.pk}/", {"mig_mode": "static-agent"}, "json")
    # then
    assert (response.status_code, response.json()["mig_mode"]) == (200, "static-agent")
    world.pool.refresh_from_db()
    assert world.pool.mig_mode == "static-agent"
    event = AuditEvent.objects.filter(verb="update", object_type="nodepool").get()
    assert (event.before["mig_mode"], event.after["mig_mode"]) == ("dynamic", "static-agent")


@pytest.mark.parametrize("mode", ["static", "", "DYNAMIC", 7])
def test_an_unknown_mode_is_a_400_with_a_field_message(world: World, mode: Any) -> None:
    # when
    response = world.client(world.root).patch(f"/api/v1/pools/{world.pool.pk}/", {"mig_mode": mode}, "json")
    # then
    assert response.status_code == 400
    assert "mig_mode" in response.json()["errors"]
    world.pool.refresh_from_db()
    assert world.pool.mig_mode == "dynamic"


def test_the_service_refuses_an_unknown_mode(world: World) -> None:
    with pytest.raises(InvalidInput) as caught:
        services.update_node_pool(pool_id=world.pool.pk, mig_mode="manual", actor=world.root)
    assert "Unknown MIG mode 'manual'" in str(caught.value.errors["mig_mode"])


def _live_request(world: World) -> Allocation:
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="1g.10gb",
        count=1,
        lease_hours=4,
        purpose="a notebook",
        actor=world.alice,
    )
    return allocation


def test_a_pool_with_live_requests_keeps_its_mode(world: World) -> None:
    # given: an active slice (the simulated backend provisions at once)
    allocation = _live_request(world)
    allocation.refresh_from_db()
    assert allocation.status in Allocation.QUOTA_HOLDING
    # when
    response = world.client(world.root).patch(f"/api/v1/pools/{world.pool.pk}/", {"mig_mode": "static-agent"}, "json")
    # then
    assert response.status_code == 400
    assert "would be stranded" in response.json()["errors"]["mig_mode"][0]
    world.pool.refresh_from_db()
    assert world.pool.mig_mode == "dynamic"
    # and the same mode again, or other fields, are still fine
    same = world.client(world.root).patch(
        f"/api/v1/pools/{world.pool.pk}/", {"mig_mode": "dynamic", "description": "busy"}, "json"
    )
    assert same.status_code == 200


def test_once_the_requests_have_ended_the_mode_can_change(world: World) -> None:
    # given
    allocation = _live_request(world)
    services.release_allocation(allocation_id=allocation.pk, actor=world.alice)
    allocation.refresh_from_db()
    assert allocation.status not in Allocation.QUOTA_HOLDING
    # when
    updated = services.update_node_pool(pool_id=world.pool.pk, mig_mode="static-manager", actor=world.root)
    # then
    assert updated.mig_mode == "static-manager"


def test_only_platform_admins_change_the_mode(world: World) -> None:
    response = world.client(world.mallory).patch(
        f"/api/v1/pools/{world.pool.pk}/", {"mig_mode": "static-agent"}, "json"
    )
    assert response.status_code in (403, 404)
    world.pool.refresh_from_db()
    assert world.pool.mig_mode == "dynamic"


def test_the_pools_page_creates_and_edits_a_pools_mode(world: World) -> None:
    admin = client_for(world.root)
    # when: created on the page in static agent mode
    created = admin.post(
        "/manage/pools/",
        {"name": "A100", "slug": "a100", "gpu_model": "NVIDIA A100-SXM4-80GB", "mig_mode": "static-agent"},
    )
    # then
    assert created.status_code == 302
    assert NodePool.objects.get(slug="a100").mig_mode == "static-agent"
    # when: the H100 pool is switched on its row's form
    edited = admin.post(
        f"/manage/pools/{world.pool.pk}/selector/",
        {f"pool-{world.pool.pk}-node_selector": "", f"pool-{world.pool.pk}-mig_mode": "static-manager"},
    )
    assert edited.status_code == 302
    world.pool.refresh_from_db()
    assert world.pool.mig_mode == "static-manager"
    html = admin.get("/manage/pools/").content.decode()
    assert 'value="static-manager" selected' in html


def test_a_refused_mode_change_on_the_page_is_a_field_error(world: World) -> None:
    _live_request(world)
    page = client_for(world.root).post(
        f"/manage/pools/{world.pool.pk}/selector/",
        {f"pool-{world.pool.pk}-node_selector": "", f"pool-{world.pool.pk}-mig_mode": "static-agent"},
    )
    assert page.status_code == 400
    assert "would be stranded" in page.content.decode()
    world.pool.refresh_from_db()
    assert world.pool.mig_mode == "dynamic"


def test_the_fleet_page_shows_each_pools_mode(world: World) -> None:
    services.update_node_pool(pool_id=world.pool.pk, mig_mode="static-agent", actor=world.root)
    html = client_for(world.root).get("/manage/fleet/").content.decode()
    assert 'data-mig-mode="static-agent"' in html
