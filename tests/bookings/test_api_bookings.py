"""/api/v1/bookings/ (issue 15): create, list, show and the transitions, with 400s that say which field and
which booking or lease is in the way, and the usual tenancy rules (another tenant's booking is a 404)."""

from __future__ import annotations

from allocations import services
from allocations.models import Booking
from tests.bookings.helpers import hours_from_now, small_pool
from tests.conftest import World

URL = "/api/v1/bookings/"


def body(world: World, pool_id: int | None = None, **over: object) -> dict[str, object]:
    data: dict[str, object] = {
        "pool": pool_id or world.pool.pk,
        "profile": "1g.10gb",
        "count": 1,
        "starts_at": hours_from_now(24).isoformat(),
        "ends_at": hours_from_now(28).isoformat(),
        "purpose": "workshop",
    }
    data.update(over)
    return data


def test_a_booking_is_created_and_listed_for_its_tenant_only(world: World):
    response = world.client(world.alice).post(URL, body(world), format="json")
    assert response.status_code == 201, response.json()
    data = response.json()
    assert (data["status"], data["tenant_name"], data["pool_slug"], data["count"]) == ("approved", "Team A", "h100", 1)
    listed = world.client(world.alice).get(URL).json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert [row["id"] for row in rows] == [data["id"]]
    assert world.client(world.charlie).get(f"{URL}{data['id']}/").status_code == 404


def test_the_filters_take_a_pool_id_and_a_status_and_refuse_anything_else_with_a_400(world: World):
    made = world.client(world.alice).post(URL, body(world), format="json").json()
    alice = world.client(world.alice)

    def listed(**query: str) -> list[int]:
        response = alice.get(URL, query)
        assert response.status_code == 200, response.content
        data = response.json()
        return [row["id"] for row in (data["results"] if isinstance(data, dict) else data)]

    assert listed(pool=str(world.pool.pk)) == [made["id"]]
    assert listed(pool="99999999999999999999") == []
    assert listed(status="approved") == [made["id"]]
    assert listed(status="pending") == []
    # a filter it cannot apply was ignored (every booking for "h100") or matched nothing (a misspelt status)
    for query, field in (({"pool": "h100"}, "pool"), ({"pool": "\u00b2"}, "pool"), ({"status": "aproved"}, "status")):
        response = alice.get(URL, query)
        assert (response.status_code, list(response.json()["errors"])) == (400, [field]), query
    assert alice.get(URL, {"status": "aproved"}).json()["errors"]["status"] == [
        "Unknown status 'aproved': choose one of pending, approved, rejected, cancelled, active, ended, failed."
    ]


def test_missing_and_malformed_fields_answer_400_with_field_messages(world: World):
    response = world.client(world.alice).post(URL, {"pool": world.pool.pk, "starts_at": "soon"}, format="json")
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert {"profile", "count", "starts_at", "ends_at", "purpose"} <= set(errors)


def test_a_window_that_ends_before_it_starts_answers_400(world: World):
    response = world.client(world.alice).post(
        URL, body(world, starts_at=hours_from_now(5).isoformat(), ends_at=hours_from_now(4).isoformat()), format="json"
    )
    assert response.status_code == 400
    assert response.json()["errors"] == {"ends_at": ["The booking must end after it starts."]}


def test_a_shared_pool_answers_400_on_the_pool(world: World):
    shared = services.create_node_pool(
        name="L4 shared", slug="l4-shared", gpu_model="NVIDIA L4", kind="shared", actor=world.root
    )
    response = world.client(world.alice).post(URL, body(world, shared.pk), format="json")
    assert response.status_code == 400
    assert "bookings are for MIG pools only" in response.json()["errors"]["pool"][0]


def test_no_room_over_the_window_answers_400_naming_the_booking_in_the_way(world: World):
    small = small_pool(world, gpus=1)
    first = world.client(world.alice).post(URL, body(world, small.pool.pk, profile="7g.80gb"), format="json").json()
    response = world.client(world.charlie).post(URL, body(world, small.pool.pk), format="json")
    assert response.status_code == 400
    assert f"booking #{first['id']}" in response.json()["errors"]["starts_at"][0]


def test_managers_approve_and_reject_members_cancel(world: World):
    pending = world.client(world.alice).post(URL, body(world, profile="3g.40gb"), format="json").json()
    assert pending["status"] == "pending"
    assert world.client(world.alice).post(f"{URL}{pending['id']}/approve/", {}, format="json").status_code == 403
    no_reason = world.client(world.mallory).post(f"{URL}{pending['id']}/reject/", {}, format="json")
    assert (no_reason.status_code, list(no_reason.json()["errors"])) == (400, ["reason"])
    approved = world.client(world.mallory).post(f"{URL}{pending['id']}/approve/", {"reason": "ok"}, format="json")
    assert (approved.status_code, approved.json()["status"], approved.json()["decided_by"]) == (
        200,
        "approved",
        "mallory",
    )
    cancelled = world.client(world.alice).post(f"{URL}{pending['id']}/cancel/", {}, format="json")
    assert (cancelled.status_code, cancelled.json()["status"]) == (200, "cancelled")
    again = world.client(world.alice).post(f"{URL}{pending['id']}/cancel/", {}, format="json")
    assert again.status_code == 409
    assert Booking.objects.get().status == Booking.Status.CANCELLED
