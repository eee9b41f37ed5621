"""The booking pages without a browser (issue 15): the form's refusals are a friendly page with field messages,
never a 500; cancel, approve and reject buttons; the calendar for admins only, a bad week answered in words."""

from __future__ import annotations

from django.test import Client

from allocations.models import Booking
from tests.bookings.helpers import book, hours_from_now
from tests.conftest import World


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def form(world: World, **over: str) -> dict[str, str]:
    data = {
        "tenant": str(world.tenant_a.pk),
        "pool": str(world.pool.pk),
        "profile": "1g.10gb",
        "count": "1",
        "starts_at": f"{hours_from_now(24):%Y-%m-%dT%H:%M}",
        "ends_at": f"{hours_from_now(28):%Y-%m-%dT%H:%M}",
        "purpose": "workshop",
    }
    data.update(over)
    return data


def test_the_form_books_and_redirects_to_the_list(world: World):
    response = client_for(world.alice).post("/bookings/new/", form(world))
    booking = Booking.objects.get()
    assert (response.status_code, response["Location"]) == (302, "/bookings/")
    page = client_for(world.alice).get("/bookings/").content.decode()
    assert f'id="booking-{booking.pk}"' in page and "Approved" in page


def test_the_form_shows_service_refusals_next_to_the_fields(world: World):
    response = client_for(world.alice).post(
        "/bookings/new/", form(world, starts_at="2020-01-01T10:00", ends_at="2020-01-01T09:00")
    )
    html = response.content.decode()
    assert response.status_code == 400
    assert "A booking starts in the future; for slices now, make a request." in html
    assert "The booking must end after it starts." in html
    garbled = client_for(world.alice).post("/bookings/new/", form(world, starts_at="soon", count="-1"))
    assert garbled.status_code == 400
    assert not Booking.objects.exists()


def test_managers_decide_and_requesters_cancel_from_the_list(world: World):
    booking = book(world, world.pool, profile="3g.40gb")
    manager_page = client_for(world.mallory).get("/bookings/").content.decode()
    assert f'id="decide-{booking.pk}"' in manager_page
    refused = client_for(world.alice).post(f"/bookings/{booking.pk}/approve/")
    assert refused.status_code == 403
    assert client_for(world.charlie).post(f"/bookings/{booking.pk}/cancel/").status_code == 404
    client_for(world.mallory).post(f"/bookings/{booking.pk}/approve/")
    assert Booking.objects.get().status == Booking.Status.APPROVED
    client_for(world.alice).post(f"/bookings/{booking.pk}/cancel/")
    assert Booking.objects.get().status == Booking.Status.CANCELLED
    again = client_for(world.alice).post(f"/bookings/{booking.pk}/cancel/", follow=True)
    assert "Cannot move from cancelled to cancelled." in again.content.decode()


def test_a_manager_rejects_from_the_list_only_with_a_reason(world: World):
    booking = book(world, world.pool, profile="3g.40gb")
    manager = client_for(world.mallory)
    no_reason = manager.post(f"/bookings/{booking.pk}/reject/", follow=True).content.decode()
    assert f"Booking #{booking.pk}: Say why the booking is rejected." in no_reason
    assert Booking.objects.get().status == Booking.Status.PENDING
    rejected = manager.post(f"/bookings/{booking.pk}/reject/", {"reason": "the lab is closed"}, follow=True)
    assert f"Booking #{booking.pk} is rejected." in rejected.content.decode()
    assert Booking.objects.get().status == Booking.Status.REJECTED


def test_the_calendar_is_for_admins_and_a_bad_week_is_answered_in_words(world: World):
    assert client_for(world.alice).get("/manage/bookings/").status_code == 403
    response = client_for(world.root).get(f"/manage/bookings/?pool={world.pool.pk}&week=next-tuesday")
    assert response.status_code == 200
    assert "The week must be a date like 2026-12-07; showing this week." in response.content.decode()
