"""Lease extensions over the API: POST /allocations/{id}/extend/ answers 200 (applied) or 202 (waits for a
manager), and /lease-extensions/ lists, approves and rejects them, under the usual tenancy rules."""

from __future__ import annotations

import pytest

from allocations import services
from allocations.models import Allocation, LeaseExtension, Notification
from tenants.models import AuditEvent
from tests.allocating import active_request
from tests.conftest import World

URL = "/api/v1/allocations/"
EXT = "/api/v1/lease-extensions/"


def active(world: World, lease_hours: int = 8) -> Allocation:
    return active_request(world, lease_hours=lease_hours, purpose="training")


def waiting(world: World) -> tuple[Allocation, LeaseExtension]:
    allocation = active(world)
    return allocation, services.request_lease_extension(allocation_id=allocation.pk, hours=40, actor=world.alice)


def test_an_extension_within_the_policy_answers_200_with_the_longer_allocation(world: World):
    # given
    allocation = active(world)
    # when
    response = world.client(world.alice).post(f"{URL}{allocation.pk}/extend/", {"hours": 16}, format="json")
    # then
    assert response.status_code == 200
    data = response.json()
    assert (data["id"], data["lease_hours"], data["status"]) == (allocation.pk, 24, "active")
    assert data["timeline"][-1]["verb"] == "extend"


def test_an_extension_past_the_policy_answers_202_with_the_pending_extension(world: World):
    # given
    allocation = active(world)
    # when
    response = world.client(world.alice).post(f"{URL}{allocation.pk}/extend/", {"hours": 24}, format="json")
    # then
    assert response.status_code == 202
    extension = LeaseExtension.objects.get()
    assert response.json() == {
        "id": extension.pk,
        "allocation": allocation.pk,
        "hours": 24,
        "status": "pending",
        "auto_approved": False,
        "lease_hours_after": 32,
        "waiting_for_bookings": [],
        "requested_by": "alice",
        "decided_by": None,
        "decided_at": None,
        "decision_reason": "",
        "created_at": response.json()["created_at"],
    }
    allocation.refresh_from_db()
    assert allocation.lease_hours == 8


def test_a_manager_extending_past_the_policy_gets_200(world: World):
    allocation = active(world)
    response = world.client(world.mallory).post(f"{URL}{allocation.pk}/extend/", {"hours": 24}, format="json")
    assert (response.status_code, response.json()["lease_hours"]) == (200, 32)


def test_the_schema_documents_both_answers_of_extend(world: World):
    # when
    schema = world.client(world.alice).get("/api/v1/schema/", {"format": "json"}).json()
    # then
    responses = schema["paths"]["/api/v1/allocations/{id}/extend/"]["post"]["responses"]
    assert responses["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/AllocationDetail"
    }
    assert responses["202"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/LeaseExtension"}
    assert "/api/v1/lease-extensions/{id}/approve/" in schema["paths"]


def test_members_list_their_tenants_extensions_and_filter_them(world: World):
    # given
    allocation, extension = waiting(world)
    services.request_lease_extension(allocation_id=allocation.pk, hours=2, actor=world.alice)
    # when
    everything = world.client(world.alice).get(EXT).json()
    pending = world.client(world.alice).get(EXT, {"status": "pending", "allocation": allocation.pk}).json()
    theirs = world.client(world.charlie).get(EXT, {"allocation": allocation.pk}).json()
    # then
    assert [e["hours"] for e in everything["results"]] == [2, 40]
    assert [e["id"] for e in pending["results"]] == [extension.pk]
    assert theirs["results"] == []


def test_a_manager_approves_and_the_lease_grows(world: World):
    # given
    allocation, extension = waiting(world)
    # when
    response = world.client(world.mallory).post(f"{EXT}{extension.pk}/approve/", {"reason": "ok"}, format="json")
    # then
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["decided_by"]) == ("approved", "mallory")
    allocation.refresh_from_db()
    assert allocation.lease_hours == 48
    again = world.client(world.mallory).post(f"{EXT}{extension.pk}/approve/", {}, format="json")
    assert (again.status_code, again.json()["code"]) == (409, "invalid_transition")


def test_a_manager_rejects_with_a_reason(world: World):
    allocation, extension = waiting(world)
    client = world.client(world.mallory)
    no_reason = client.post(f"{EXT}{extension.pk}/reject/", {}, format="json")
    response = client.post(f"{EXT}{extension.pk}/reject/", {"reason": "not now"}, format="json")
    assert no_reason.status_code == 400
    assert (response.status_code, response.json()["status"], response.json()["decision_reason"]) == (
        200,
        "rejected",
        "not now",
    )


@pytest.mark.parametrize("action", ["approve", "reject"])
def test_a_member_gets_403_and_nothing_changes(world: World, action: str):
    # given
    allocation, extension = waiting(world)
    before = (AuditEvent.objects.count(), Notification.objects.count())
    # when
    response = world.client(world.alice).post(f"{EXT}{extension.pk}/{action}/", {"reason": "x"}, format="json")
    # then
    assert response.status_code == 403
    assert response.json()["detail"] == f"Only the tenant's managers can {action} lease extensions."
    extension.refresh_from_db()
    allocation.refresh_from_db()
    assert (extension.status, allocation.lease_hours) == ("pending", 8)
    assert (AuditEvent.objects.count(), Notification.objects.count()) == before


@pytest.mark.parametrize("action", ["", "approve/", "reject/"])
def test_charlie_gets_404_and_nothing_changes(world: World, action: str):
    # given
    allocation, extension = waiting(world)
    events = AuditEvent.objects.count()
    client = world.client(world.charlie)
    # when
    url = f"{EXT}{extension.pk}/{action}"
    response = client.get(url) if not action else client.post(url, {"reason": "x"}, format="json")
    # then
    assert response.status_code == 404
    extension.refresh_from_db()
    assert extension.status == "pending"
    assert AuditEvent.objects.count() == events


def test_the_detail_names_the_claims_namespace(world: World):
    allocation = active(world)
    data = world.client(world.alice).get(f"{URL}{allocation.pk}/").json()
    assert (data["claim_name"], data["namespace"]) == (f"mig-alloc-{allocation.uuid}", "fatia-team-a")
