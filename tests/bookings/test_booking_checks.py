"""Booking checks over the window (issue 15): quota and slot-aware room, counted against the leases that still run
and the other bookings that overlap; refused with a message that names what is in the way."""

from __future__ import annotations

import pytest

from allocations.models import Booking, Notification, SlicePlacement
from allocations.services import bookings
from allocations.services.booking_window import room_reserved_by_bookings
from tenants.errors import InvalidInput, InvalidTransition, NotAllowed
from tenants.models import AuditEvent
from tests.bookings.helpers import active_lease, book, hours_from_now, small_pool
from tests.conftest import World

Status = Booking.Status


def test_a_small_booking_inside_quota_and_policy_is_approved_at_once(world: World):
    booking = book(world, world.pool, profile="1g.10gb", count=2)
    assert (booking.status, booking.auto_approved, booking.compute_slices) == (Status.APPROVED, True, 2)
    event = AuditEvent.objects.get(verb="book", object_id=str(booking.pk))
    assert event.after["status"] == "approved"


def test_a_booking_past_the_policy_waits_and_the_managers_hear_of_it(world: World):
    booking = book(world, world.pool, profile="3g.40gb")
    assert booking.status == Status.PENDING
    note = Notification.objects.get(recipient=world.mallory)
    assert f"booking #{booking.pk}" in note.text


def test_a_manager_approves_and_the_requester_is_told(world: World):
    booking = book(world, world.pool, profile="3g.40gb")
    approved = bookings.approve_booking(booking_id=booking.pk, actor=world.mallory, reason="ok")
    assert (approved.status, approved.decided_by) == (Status.APPROVED, world.mallory)
    assert Notification.objects.filter(recipient=world.alice, text__contains="approved").exists()


def test_a_member_cannot_approve_and_a_rejection_needs_a_reason(world: World):
    booking = book(world, world.pool, profile="3g.40gb")
    with pytest.raises(NotAllowed):
        bookings.approve_booking(booking_id=booking.pk, actor=world.alice)
    with pytest.raises(InvalidInput) as exc:
        bookings.reject_booking(booking_id=booking.pk, actor=world.mallory, reason=" ")
    assert "reason" in exc.value.errors
    rejected = bookings.reject_booking(booking_id=booking.pk, actor=world.mallory, reason="not this week")
    assert rejected.status == Status.REJECTED
    with pytest.raises(InvalidTransition):
        bookings.cancel_booking(booking_id=booking.pk, actor=world.alice)


def test_quota_over_the_window_counts_the_overlapping_bookings_and_only_those(world: World):
    # given: two 7g.80gb bookings fill Team A's 14 compute slices from 24 h to 28 h from now
    first = book(world, world.pool, profile="7g.80gb", start=24, end=28)
    book(world, world.pool, profile="7g.80gb", start=25, end=27)
    # when: one more slice inside that window
    with pytest.raises(InvalidInput) as exc:
        book(world, world.pool, profile="1g.10gb", start=26, end=30)
    # then: refused on the count, naming a booking in the way; after the window it fits
    message = exc.value.errors["count"][0]
    assert "Over the tenant's quota" in message and f"booking #{first.pk}" in message
    assert book(world, world.pool, profile="1g.10gb", start=28, end=30).status == Status.APPROVED
    # and another tenant's quota is its own
    assert book(world, world.pool, profile="1g.10gb", start=26, end=27, actor=world.charlie).status == Status.APPROVED


def test_a_running_lease_counts_against_the_quota_until_its_end(world: World):
    lease = active_lease(world, world.pool, profile="7g.80gb", count=2, hours=8)
    with pytest.raises(InvalidInput) as exc:
        book(world, world.pool, profile="1g.10gb", start=2, end=4)
    assert f"request #{lease.pk}" in exc.value.errors["count"][0]
    assert book(world, world.pool, profile="1g.10gb", start=9, end=10).status == Status.APPROVED


def test_room_is_slot_aware_not_counted(world: World):
    # given: one node of two GPUs, each holding a 4g.40gb lease for 8 h: 6 compute slices and 8 memory slots free
    small = small_pool(world, gpus=2)
    leases = [active_lease(world, small.pool, profile="4g.40gb", hours=8) for _ in range(2)]
    assert len({p.gpu_id for p in SlicePlacement.objects.filter(allocation__in=leases)}) == 2
    # when: a 4g.40gb (4 compute, 4 memory) in 2 h, which the counts would allow but no GPU has the slots for
    with pytest.raises(InvalidInput) as exc:
        book(world, small.pool, profile="4g.40gb", start=2, end=4)
    # then
    message = exc.value.errors["starts_at"][0]
    assert message.startswith("No room in tiny pool for 1 x 4g.40gb at ")
    assert f"request #{leases[0].pk}" in message
    # while two 3g.40gb fit beside the leases, and a 4g.40gb fits once the leases have ended
    assert book(world, small.pool, profile="3g.40gb", count=2, start=2, end=4).status == Status.PENDING
    assert book(world, small.pool, profile="4g.40gb", start=9, end=11).status == Status.PENDING


def test_overlapping_bookings_are_placed_together(world: World):
    small = small_pool(world, gpus=1)
    first = book(world, small.pool, profile="4g.40gb", start=10, end=14)
    with pytest.raises(InvalidInput) as exc:
        book(world, small.pool, profile="4g.40gb", start=12, end=16, actor=world.charlie)
    assert f"booking #{first.pk}" in exc.value.errors["starts_at"][0]
    # a 3g.40gb fits beside it (slots 4-7), and then nothing more from 12 h to 14 h
    book(world, small.pool, profile="3g.40gb", start=12, end=16, actor=world.charlie)
    with pytest.raises(InvalidInput):
        book(world, small.pool, profile="1g.10gb", start=13, end=15)
    # the check looks at every booking start in the window: free at 14 h, full again from 15 h
    assert book(world, small.pool, profile="4g.40gb", start=14, end=15).status == Status.PENDING
    with pytest.raises(InvalidInput):
        book(world, small.pool, profile="1g.10gb", start=11, end=13)


def test_a_cancelled_booking_frees_its_window(world: World):
    small = small_pool(world, gpus=1)
    first = book(world, small.pool, profile="7g.80gb", start=10, end=14)
    with pytest.raises(InvalidInput):
        book(world, small.pool, profile="1g.10gb", start=11, end=12, actor=world.charlie)
    with pytest.raises(NotAllowed):
        bookings.cancel_booking(booking_id=first.pk, actor=world.charlie)
    bookings.cancel_booking(booking_id=first.pk, actor=world.alice, reason="moved online")
    assert book(world, small.pool, profile="1g.10gb", start=11, end=12, actor=world.charlie).status == Status.APPROVED


def test_approval_checks_the_window_again(world: World):
    # given: a pending booking, then the pool loses its only node's room to a booking approved meanwhile in a
    # window the first did not overlap when it was made, but does now that it moved (an admin fixed a typo)
    small = small_pool(world, gpus=1)
    pending = book(world, small.pool, profile="4g.40gb", start=10, end=12)
    book(world, small.pool, profile="4g.40gb", start=20, end=22, actor=world.charlie)
    Booking.objects.filter(pk=pending.pk).update(starts_at=hours_from_now(20), ends_at=hours_from_now(21))
    # when / then
    with pytest.raises(InvalidInput) as exc:
        bookings.approve_booking(booking_id=pending.pk, actor=world.mallory)
    assert "No room" in exc.value.errors["starts_at"][0]
    assert Booking.objects.get(pk=pending.pk).status == Status.PENDING


def test_bad_windows_and_shared_pools_are_refused_with_field_messages(world: World):
    from allocations import services

    with pytest.raises(InvalidInput) as exc:
        book(world, world.pool, start=-1, end=2)
    assert exc.value.errors["starts_at"] == ["A booking starts in the future; for slices now, make a request."]
    with pytest.raises(InvalidInput) as exc:
        book(world, world.pool, start=5, end=4)
    assert exc.value.errors["ends_at"] == ["The booking must end after it starts."]
    with pytest.raises(InvalidInput) as exc:
        book(world, world.pool, start=5, end=5 + 200)
    assert "at most 168 hours" in exc.value.errors["ends_at"][0]
    with pytest.raises(InvalidInput) as exc:
        book(world, world.pool, profile="9g.99gb")
    assert "profile" in exc.value.errors
    shared = services.create_node_pool(
        name="L4 shared", slug="l4-shared", gpu_model="NVIDIA L4", kind="shared", actor=world.root
    )
    with pytest.raises(InvalidInput) as exc:
        book(world, shared)
    assert "bookings are for MIG pools only" in exc.value.errors["pool"][0]
    assert not Booking.objects.exists()


def test_room_reserved_by_bookings_is_what_the_bookings_hold_at_a_moment(world: World):
    small = small_pool(world, gpus=1)
    first = book(world, small.pool, profile="4g.40gb", start=10, end=14)
    second = book(world, small.pool, profile="1g.10gb", start=12, end=16, actor=world.charlie)
    assert room_reserved_by_bookings(small.pool, hours_from_now(9)) == []
    assert [r.booking_id for r in room_reserved_by_bookings(small.pool, hours_from_now(11))] == [first.pk]
    at_13 = room_reserved_by_bookings(small.pool, hours_from_now(13))
    assert [(r.booking_id, r.profile, r.count) for r in at_13] == [(first.pk, "4g.40gb", 1), (second.pk, "1g.10gb", 1)]
