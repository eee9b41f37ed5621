"""The allocations API with the three users: alice (A member), mallory (A manager), charlie (B member)."""

from __future__ import annotations

import json

import pytest

from allocations import services
from allocations.models import Allocation, Quota
from tenants.models import AuditEvent
from tests.conftest import World

Status = Allocation.Status
URL = "/api/v1/allocations/"


def body(world: World, **overrides):
    data = {
        "tenant": world.tenant_a.pk,
        "pool": world.pool.pk,
        "profile": "1g.10gb",
        "count": 1,
        "lease_hours": 8,
        "purpose": "notebook",
    }
    data.update(overrides)
    return data


def pending_allocation(world: World) -> Allocation:
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="3g.40gb",
        count=1,
        lease_hours=8,
        purpose="training",
        actor=world.alice,
    )
    assert allocation.status == Status.PENDING
    return allocation


def test_a_member_creates_a_request_and_gets_it_back_with_its_cost(world: World):
    # when
    response = world.client(world.alice).post(URL, body(world, profile="1g.20gb", count=2), format="json")
    # then
    assert response.status_code == 201
    data = response.json()
    assert data["status"] == "approved"
    assert (data["compute_slices"], data["memory_slices"], data["gpu_equivalents"]) == (2, 4, 0.5)
    assert data["tenant_name"] == "Team A"
    assert data["requested_by"] == "alice"
    assert [event["verb"] for event in data["timeline"]] == ["request", "auto_approve"]


def test_the_tenant_can_be_left_out_when_the_user_has_one(world: World):
    data = body(world)
    del data["tenant"]
    response = world.client(world.alice).post(URL, data, format="json")
    assert response.status_code == 201
    assert response.json()["tenant"] == world.tenant_a.pk


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"profile": "1g.18gb"}, "profile", "'1g.18gb' is not offered in H100 pool"),
        ({"profile": "9g.1tb"}, "profile", "'9g.1tb' is not offered in H100 pool"),
        ({"count": 0}, "count", "Ask for between 1 and 56 slices."),
        ({"count": 10**9}, "count", "Ask for between 1 and 56 slices."),
        ({"lease_hours": 169}, "lease_hours", "The lease must be between 1 and 168 hours for Team A."),
        ({"purpose": ""}, "purpose", "This field may not be blank."),
        ({"pool": 999999}, "pool", "Unknown pool 999999."),
        ({"count": "many"}, "count", "A valid integer is required."),
    ],
)
def test_bad_input_gets_a_400_with_field_messages_and_nothing_is_written(world: World, overrides, field, message):
    # given
    events = AuditEvent.objects.count()
    # when
    response = world.client(world.alice).post(URL, body(world, **overrides), format="json")
    # then
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert field in errors
    assert errors[field][0].startswith(message)
    assert Allocation.objects.count() == 0
    assert AuditEvent.objects.count() == events


def test_malformed_json_is_a_400_and_nothing_is_written(world: World):
    response = world.client(world.alice).post(URL, data="{not json", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["detail"].startswith("JSON parse error")
    assert Allocation.objects.count() == 0


def test_an_oversized_body_is_a_400_and_nothing_is_written(world: World):
    huge = json.dumps(body(world, purpose="x" * 200_000))
    response = world.client(world.alice).post(URL, data=huge, content_type="application/json")
    assert response.status_code == 400
    assert response.json() == {"code": "too_large", "detail": "The request body is too large."}
    assert Allocation.objects.count() == 0


def test_charlie_cannot_create_in_another_tenant(world: World):
    response = world.client(world.charlie).post(URL, body(world), format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == {"tenant": [f"Unknown tenant {world.tenant_a.pk}."]}
    assert Allocation.objects.count() == 0


def test_anonymous_gets_401_for_lists_and_creates(world: World):
    client = world.client(None)
    assert client.get(URL).status_code == 401
    assert client.post(URL, body(world), format="json").status_code == 401
    assert Allocation.objects.count() == 0


def test_lists_show_only_the_users_tenants(world: World):
    # given
    mine = pending_allocation(world)
    theirs, _ = services.request_allocation(
        tenant_id=world.tenant_b.pk,
        pool_id=world.pool.pk,
        profile="1g.10gb",
        count=1,
        lease_hours=1,
        purpose="b",
        actor=world.charlie,
    )
    # when / then
    assert [a["id"] for a in world.client(world.alice).get(URL).json()["results"]] == [mine.pk]
    assert [a["id"] for a in world.client(world.charlie).get(URL).json()["results"]] == [theirs.pk]
    assert sorted(a["id"] for a in world.client(world.root).get(URL).json()["results"]) == [mine.pk, theirs.pk]


def test_lists_filter_by_status_and_paginate(world: World):
    pending = pending_allocation(world)
    services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="1g.10gb",
        count=1,
        lease_hours=1,
        purpose="x",
        actor=world.alice,
    )
    client = world.client(world.alice)
    data = client.get(URL, {"status": "pending"}).json()
    assert (data["count"], [a["id"] for a in data["results"]]) == (1, [pending.pk])
    page = client.get(URL, {"page_size": 1}).json()
    assert (page["count"], len(page["results"]), page["previous"]) == (2, 1, None)
    assert page["next"] == "http://testserver/api/v1/allocations/?page=2&page_size=1"
    second = client.get(URL, {"page_size": 1, "page": 2}).json()
    assert (second["count"], second["next"]) == (2, None)
    assert second["previous"] == "http://testserver/api/v1/allocations/?page_size=1"
    assert [second["results"][0]["id"], page["results"][0]["id"]] == sorted(
        [second["results"][0]["id"], page["results"][0]["id"]]
    )
    assert client.get(URL, {"page_size": 1, "page": 3}).status_code == 404
    assert client.get(URL, {"page": "x"}).status_code == 400  # malformed, not past the end (issue 9)
    assert client.get(URL, {"status": "expired"}).json() == {"count": 0, "next": None, "previous": None, "results": []}


@pytest.mark.parametrize("action", ["", "approve/", "reject/", "release/", "extend/"])
def test_charlie_gets_404_for_another_tenants_request_and_nothing_changes(world: World, action):
    # given
    allocation = pending_allocation(world)
    events = AuditEvent.objects.count()
    client = world.client(world.charlie)
    # when
    url = f"{URL}{allocation.pk}/{action}"
    response = client.get(url) if not action else client.post(url, {"reason": "x", "hours": 1}, format="json")
    # then
    assert response.status_code == 404
    allocation.refresh_from_db()
    assert allocation.status == Status.PENDING
    assert AuditEvent.objects.count() == events


@pytest.mark.parametrize("action", ["approve/", "reject/"])
def test_a_member_gets_403_for_manager_actions_and_nothing_changes(world: World, action):
    allocation = pending_allocation(world)
    events = AuditEvent.objects.count()
    response = world.client(world.alice).post(f"{URL}{allocation.pk}/{action}", {"reason": "x"}, format="json")
    assert response.status_code == 403
    assert response.json()["detail"] == f"Only the tenant's managers can {action[:-1]} requests."
    allocation.refresh_from_db()
    assert allocation.status == Status.PENDING
    assert AuditEvent.objects.count() == events


def test_a_manager_approves_then_the_second_approval_is_a_409(world: World):
    allocation = pending_allocation(world)
    client = world.client(world.mallory)
    first = client.post(f"{URL}{allocation.pk}/approve/", {"reason": "fine"}, format="json")
    assert first.status_code == 200
    assert first.json()["status"] == "approved"
    second = client.post(f"{URL}{allocation.pk}/approve/", {}, format="json")
    assert second.status_code == 409
    assert second.json()["detail"] == "Cannot move from approved to approved."
    assert Quota.objects.get(tenant=world.tenant_a, pool=world.pool).compute_slices_used == 3


def test_rejection_needs_a_reason(world: World):
    allocation = pending_allocation(world)
    response = world.client(world.mallory).post(f"{URL}{allocation.pk}/reject/", {}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == {"reason": ["This field is required."]}
    allocation.refresh_from_db()
    assert allocation.status == Status.PENDING


def test_the_requester_releases_an_active_request_and_sees_placements_and_timeline(world: World):
    # given
    created = world.client(world.alice).post(URL, body(world, count=2), format="json").json()
    services.provision_allocation(allocation_id=created["id"])
    # when
    shown = world.client(world.alice).get(f"{URL}{created['id']}/").json()
    released = world.client(world.alice).post(f"{URL}{created['id']}/release/").json()
    # then
    assert shown["status"] == "active"
    assert shown["claim_name"] == f"mig-alloc-{shown['uuid']}"
    assert len(shown["placements"]) == 2
    assert {p["profile"] for p in shown["placements"]} == {"1g.10gb"}
    assert [e["verb"] for e in shown["timeline"]] == ["request", "auto_approve", "activate"]
    assert released["status"] == "releasing"


def test_idempotency_key_replays_the_first_response(world: World):
    client = world.client(world.alice)
    first = client.post(URL, body(world), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    again = client.post(URL, body(world), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    different = client.post(URL, body(world, count=2), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert (first.status_code, again.status_code, different.status_code) == (201, 200, 409)
    assert again["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert different.json()["code"] == "idempotency_key_reused"
    assert Allocation.objects.count() == 1


def test_extend_adds_hours_within_the_tenant_maximum(world: World):
    created = world.client(world.alice).post(URL, body(world, lease_hours=8), format="json").json()
    services.provision_allocation(allocation_id=created["id"])
    client = world.client(world.alice)
    ok = client.post(f"{URL}{created['id']}/extend/", {"hours": 10}, format="json")
    too_long = client.post(f"{URL}{created['id']}/extend/", {"hours": 151}, format="json")
    assert ok.status_code == 200
    assert ok.json()["lease_hours"] == 18
    assert too_long.status_code == 400
    assert too_long.json()["errors"] == {"hours": ["The whole lease may be at most 168 hours (18 used so far)."]}


def test_the_list_runs_a_constant_number_of_queries_whatever_the_page_size(world: World, django_assert_num_queries):
    for _ in range(12):
        services.request_allocation(
            tenant_id=world.tenant_a.pk,
            pool_id=world.pool.pk,
            profile="1g.10gb",
            count=1,
            lease_hours=1,
            purpose="x",
            actor=world.mallory,
        )
    client = world.client(world.alice)
    # force_authenticate needs no query; the page and its total come in one query.
    for size in (1, 5, 12):
        with django_assert_num_queries(1):
            response = client.get(URL, {"page_size": size})
        assert len(response.json()["results"]) == size


def test_pool_capacity_says_how_many_more_of_each_profile_fit(world: World):
    # given: 16 empty H100s; then one 7g.80gb takes a whole GPU
    client = world.client(world.alice)
    empty = client.get(f"/api/v1/pools/{world.pool.pk}/capacity/").json()["fits_now"]
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="7g.80gb",
        count=1,
        lease_hours=1,
        purpose="full",
        actor=world.mallory,
    )
    services.approve_allocation(allocation_id=allocation.pk, actor=world.mallory)
    services.provision_allocation(allocation_id=allocation.pk)
    # when
    after = client.get(f"/api/v1/pools/{world.pool.pk}/capacity/").json()["fits_now"]
    # then: 7 x 1g.10gb per GPU, 1 x 7g per GPU, 1 x 1g.10gb+me per GPU
    assert (empty["1g.10gb"], empty["7g.80gb"], empty["3g.40gb"], empty["1g.10gb+me"]) == (112, 16, 32, 16)
    assert (after["1g.10gb"], after["7g.80gb"], after["3g.40gb"], after["1g.10gb+me"]) == (105, 15, 30, 15)


def test_the_fast_list_representation_equals_drfs_own_field_by_field_output(world: World):
    # given: an active request (dates set, placements made)
    from rest_framework import serializers as drf

    from allocations.api.serializers import AllocationSerializer

    created = world.client(world.alice).post(URL, body(world, profile="1g.20gb", count=2), format="json").json()
    services.provision_allocation(allocation_id=created["id"])
    allocation = Allocation.objects.select_related("tenant", "pool", "requested_by").get(pk=created["id"])
    serializer = AllocationSerializer()
    # when
    fast = serializer.to_representation(allocation)
    generic = drf.ModelSerializer.to_representation(serializer, allocation)
    listed = world.client(world.alice).get(URL).json()["results"]
    # then: the same keys, in the same order, with the same values, also on the list endpoint's values() path
    assert list(fast.items()) == list(generic.items())
    assert listed == [fast]
    assert fast["gpu_equivalents"] == 0.5
