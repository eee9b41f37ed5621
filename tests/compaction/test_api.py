"""Compaction's admin API and the movable choice on requests and tenants (issue 14): 400s with field messages."""

from __future__ import annotations

from django.test import Client

from allocations.models import Allocation, MovePlan
from tests.compaction.world import small_pool
from tests.conftest import World


def test_an_admin_previews_then_starts_a_compaction(world: World) -> None:
    small = small_pool(world)
    lone = small.active("1g.10gb", gpu=0, start=0, movable=True)
    small.active("1g.10gb", gpu=1, start=0)
    client = world.client(world.root)
    # the preview
    response = client.get(f"/api/v1/move-plans/preview/?pool={small.pool.pk}")
    assert response.status_code == 200, response.content
    preview = response.json()
    assert preview["refusal"] == ""
    assert preview["gpus_freed"] == 1
    [move] = preview["moves"]
    assert move["allocation_id"] == lone.pk
    assert move["tenant"] == "Team A"
    assert move["from_slot"] == "small-node-0/gpu-0:0"
    assert move["to_slot"].startswith("small-node-0/gpu-1:")
    assert not MovePlan.objects.exists()
    # the start
    response = client.post("/api/v1/move-plans/", {"pool": small.pool.pk}, format="json")
    assert response.status_code == 201, response.content
    plan = response.json()
    assert plan["status"] == "applying" and plan["trigger"] == "admin"
    assert [m["from_slot"] for m in plan["moves"]] == ["small-node-0/gpu-0:0"]
    assert client.get(f"/api/v1/move-plans/{plan['id']}/").json()["id"] == plan["id"]
    # a second start while the first applies: 400 with the reason
    again = client.post("/api/v1/move-plans/", {"pool": small.pool.pk}, format="json")
    assert again.status_code == 400
    assert "being applied" in again.json()["errors"]["pool"][0]


def test_bad_compaction_input_is_a_400_with_field_messages(world: World) -> None:
    client = world.client(world.root)
    assert client.post("/api/v1/move-plans/", {}, format="json").json()["errors"] == {
        "pool": ["This field is required."]
    }
    response = client.post("/api/v1/move-plans/", {"pool": 99999}, format="json")
    assert response.status_code == 400 and "pool" in response.json()["errors"]
    response = client.post("/api/v1/move-plans/", {"pool": "x"}, format="json")
    assert response.status_code == 400 and "pool" in response.json()["errors"]
    response = client.get("/api/v1/move-plans/preview/")
    assert response.status_code == 400 and "pool" in response.json()["errors"]
    # a pool with nothing to gain: 400, nothing written
    response = client.post("/api/v1/move-plans/", {"pool": world.pool.pk}, format="json")
    assert response.status_code == 400
    assert "frees no whole GPU" in response.json()["errors"]["pool"][0]
    assert not MovePlan.objects.exists()


def test_a_request_is_movable_as_its_tenant_decides_unless_it_says(world: World) -> None:
    body = {"pool": world.pool.pk, "profile": "1g.10gb", "count": 1, "lease_hours": 1, "purpose": "p"}
    alice = world.client(world.alice)
    assert alice.post("/api/v1/allocations/", body, format="json").json()["movable"] is False
    # the platform admin sets the tenant's policy
    response = world.client(world.root).patch(
        f"/api/v1/tenants/{world.tenant_a.pk}/", {"movable_by_default": True}, format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["movable_by_default"] is True
    made = alice.post("/api/v1/allocations/", body, format="json").json()
    assert made["movable"] is True
    assert Allocation.objects.get(pk=made["id"]).movable
    # the requester says no
    assert alice.post("/api/v1/allocations/", {**body, "movable": False}, format="json").json()["movable"] is False
    # and the list shows it as the detail does
    listed = {a["id"]: a["movable"] for a in alice.get("/api/v1/allocations/").json()["results"]}
    assert listed[made["id"]] is True


def test_a_movable_that_is_not_a_boolean_is_a_400(world: World) -> None:
    body = {"pool": world.pool.pk, "profile": "1g.10gb", "count": 1, "lease_hours": 1, "purpose": "p", "movable": "x"}
    response = world.client(world.alice).post("/api/v1/allocations/", body, format="json")
    assert response.status_code == 400
    assert "movable" in response.json()["errors"]
    response = world.client(world.root).patch(
        f"/api/v1/tenants/{world.tenant_a.pk}/", {"movable_by_default": "sometimes"}, format="json"
    )
    assert response.status_code == 400
    assert "movable_by_default" in response.json()["errors"]


def test_the_request_form_offers_the_choice_and_the_tenant_page_the_policy(world: World) -> None:
    root = Client()
    root.force_login(world.root)
    page = root.get(f"/manage/tenants/{world.tenant_a.pk}/").content.decode()
    assert "New requests are movable" in page
    alice = Client()
    alice.force_login(world.alice)
    form = alice.get("/requests/new/").content.decode()
    assert "May Fatia move these slices to make room?" in form
    body = {
        "tenant": world.tenant_a.pk,
        "pool": world.pool.pk,
        "profile": "1g.10gb",
        "count": 1,
        "lease_hours": 1,
        "purpose": "p",
    }
    alice.post("/requests/new/", {**body, "movable": "yes"})
    alice.post("/requests/new/", {**body, "movable": "no"})
    alice.post("/requests/new/", body)
    assert list(Allocation.objects.order_by("pk").values_list("movable", flat=True)) == [True, False, False]
