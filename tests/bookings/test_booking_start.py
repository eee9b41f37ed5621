"""A booking at its start (issue 15): made into an approved request whose lease ends with the window, exactly
once; failed clearly, its owner told, when the room is gone; leases and new requests keep out of its room."""

from __future__ import annotations

import pytest

from allocations import services
from allocations.models import Allocation, Booking, Node, Notification, OutboxMessage
from allocations.services import bookings
from tenants.errors import InvalidInput
from tests.bookings.helpers import active_lease, book, move_window, small_pool
from tests.conftest import World

Status = Booking.Status


def test_the_beat_starts_a_due_booking_exactly_once_and_its_lease_ends_with_the_window(world: World):
    # given: an approved booking whose start has just come
    booking = move_window(book(world, world.pool, profile="1g.10gb", count=2), start=-0.05, end=3)
    # when: the beat runs twice (a redelivered task, two beat processes)
    first = bookings.run_due_bookings()
    second = bookings.run_due_bookings()
    # then: one request, provisioned through the outbox once
    booking.refresh_from_db()
    allocation = Allocation.objects.get()
    assert (first["started"], second["started"]) == (1, 0)
    assert (booking.status, booking.allocation_id) == (Status.ACTIVE, allocation.pk)
    assert (allocation.status, allocation.count, allocation.requested_by) == ("approved", 2, world.alice)
    sent = OutboxMessage.objects.filter(task_name="allocations.tasks.provision_allocation_task")
    assert list(sent.values_list("args", flat=True)) == [[allocation.pk]]
    # when the provisioning task runs: active until the window's end, not a rounded-up hour later
    active = services.provision_allocation(allocation_id=allocation.pk)
    assert active.status == "active"
    assert active.lease_expires_at == booking.ends_at
    # and once its request is over, the booking ends
    services.release_allocation(allocation_id=allocation.pk, actor=world.alice)
    services.finish_release(allocation_id=allocation.pk)
    assert bookings.run_due_bookings()["settled"] == 1
    booking.refresh_from_db()
    assert booking.status == Status.ENDED


def test_a_booking_whose_room_is_gone_at_its_start_fails_and_its_owner_is_told(world: World):
    # given: an approved booking, and every node of the pool cordoned (a node died)
    booking = move_window(book(world, world.pool, profile="1g.10gb"), start=-0.05, end=3)
    Node.objects.filter(pool=world.pool).update(state=Node.State.CORDONED)
    # when
    result = bookings.run_due_bookings()
    # then
    booking.refresh_from_db()
    assert (result["failed"], booking.status, booking.allocation) == (1, Status.FAILED, None)
    assert booking.status_message.startswith("No room in H100 pool for 1 x 1g.10gb at its start")
    note = Notification.objects.get(recipient=world.alice)
    assert f"booking #{booking.pk}" in note.text and "could not start" in note.text
    assert not Allocation.objects.exists()


def test_a_pending_booking_does_not_start_and_lapses_once_its_window_is_over(world: World):
    booking = move_window(book(world, world.pool, profile="3g.40gb"), start=-0.05, end=3)
    assert bookings.run_due_bookings()["started"] == 0
    booking.refresh_from_db()
    assert booking.status == Status.PENDING
    move_window(booking, start=-3, end=-1)
    assert bookings.run_due_bookings()["lapsed"] == 1
    booking.refresh_from_db()
    assert booking.status == Status.CANCELLED
    assert Notification.objects.filter(recipient=world.alice, text__contains="lapsed").exists()


def test_a_lease_is_not_extended_into_a_bookings_room(world: World):
    # given: a 4g.40gb lease of 2 h on a one-GPU pool, and Team B's 4g.40gb booked from 3.1 h to 5 h from now
    small = small_pool(world, gpus=1)
    lease = active_lease(world, small.pool, profile="4g.40gb", hours=2)
    booking = book(world, small.pool, profile="4g.40gb", start=3.1, end=5, actor=world.charlie)
    # when: the lease asks for 2 h more, past the booking's start
    with pytest.raises(InvalidInput) as exc:
        services.request_lease_extension(allocation_id=lease.pk, hours=2, actor=world.alice)
    # then: refused, naming the booking and how far the lease can go
    message = exc.value.errors["hours"][0]
    assert f"booking #{booking.pk}" in message and "ask the booking's owner" in message
    lease.refresh_from_db()
    assert lease.lease_hours == 2
    # while 1 h more (ending before the booking starts) is fine, and so is any extension once it is cancelled
    services.request_lease_extension(allocation_id=lease.pk, hours=1, actor=world.alice)
    bookings.cancel_booking(booking_id=booking.pk, actor=world.charlie)
    services.request_lease_extension(allocation_id=lease.pk, hours=4, actor=world.alice)
    lease.refresh_from_db()
    assert lease.lease_hours == 7


def test_an_extension_beside_a_booking_that_still_fits_is_applied(world: World):
    small = small_pool(world, gpus=1)
    lease = active_lease(world, small.pool, profile="3g.40gb", hours=2)
    book(world, small.pool, profile="4g.40gb", start=3, end=5, actor=world.charlie)
    services.request_lease_extension(allocation_id=lease.pk, hours=4, actor=world.alice)
    lease.refresh_from_db()
    assert lease.lease_hours == 6


def test_a_new_request_does_not_take_a_booked_room(world: World):
    # given: Team B's whole GPU booked from 2 h to 4 h from now on a one-GPU pool
    small = small_pool(world, gpus=1)
    booking = book(world, small.pool, profile="7g.80gb", start=2, end=4, actor=world.charlie)
    # when: a request whose 8 h lease would run into the booking
    long = active_lease(world, small.pool, profile="1g.10gb", hours=8)
    # then: it is not placed in the booking's room: it waits in the pool's queue (issue 15) instead
    assert long.status == "queued"
    assert not long.placements.exists()
    # and its message names the booking in the way
    window = f"{booking.starts_at:%Y-%m-%d %H:%M}-{booking.ends_at:%H:%M}"
    assert long.status_message == (
        f"Waiting in {small.pool.name}'s queue: a free layout fits it, but its lease would run into the room of "
        f"booking #{booking.pk} (1 x 7g.80gb, {window} UTC); a shorter lease may fit now. It starts as soon as a "
        "release, an expiry or a new node makes room; the quota stays held meanwhile."
    )
    assert Booking.objects.get(pk=booking.pk).status == Booking.Status.PENDING  # a pending booking holds its room too
    # while a 1 h lease, over before the booking starts, is placed
    assert active_lease(world, small.pool, profile="1g.10gb", hours=1).status == "active"
