"""Booking decisions go out by e-mail like request decisions (issue 15): queued through the outbox after commit,
sent to whoever booked, with the reason; nothing for a booking approved automatically or decided by its owner."""

from __future__ import annotations

from django.core import mail

from allocations import notifications
from allocations.services import bookings
from tests.bookings.helpers import book
from tests.conftest import World


def task_names(callbacks) -> list[str]:
    return [c.func.__self__.name for c in callbacks]


def test_a_managers_decision_is_queued_once_and_mailed_with_its_reason(
    world: World, django_capture_on_commit_callbacks
):
    # given: a booking past the auto-approve policy (3 compute slices > 2) waits for a manager
    booking = book(world, world.pool, profile="3g.40gb")
    assert booking.status == "pending"
    # when
    with django_capture_on_commit_callbacks() as callbacks:
        bookings.reject_booking(booking_id=booking.pk, actor=world.mallory, reason="the workshop moved online")
    sent = notifications.notify_requester_of_booking_decision(booking_id=booking.pk)
    # then
    assert task_names(callbacks) == ["allocations.tasks.notify_requester_of_booking_task"]
    assert sent == 1
    assert mail.outbox[0].to == ["alice@example.test"]
    assert mail.outbox[0].subject == f"[Fatia] Your booking #{booking.pk} (1 x 3g.40gb) was rejected"
    assert "was rejected by mallory.\nReason: the workshop moved online" in mail.outbox[0].body
    assert f"/bookings/#booking-{booking.pk}" in mail.outbox[0].body


def test_nothing_is_mailed_for_an_automatic_approval_or_a_managers_own_booking(world: World):
    automatic = book(world, world.pool, profile="1g.10gb")
    own = book(world, world.pool, profile="3g.40gb", actor=world.mallory, start=30, end=32)
    bookings.approve_booking(booking_id=own.pk, actor=world.mallory)
    assert automatic.status == "approved"
    assert notifications.notify_requester_of_booking_decision(booking_id=automatic.pk) == 0
    assert notifications.notify_requester_of_booking_decision(booking_id=own.pk) == 0
    assert mail.outbox == []
