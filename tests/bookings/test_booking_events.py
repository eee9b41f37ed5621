"""Bookings on the live stream (issue 15): a booking made or decided changes the versions its tenant's viewers are
told, and only theirs (allocations/live.py cuts the stream down per viewer)."""

from __future__ import annotations

from allocations import selectors
from allocations.services import bookings
from tests.bookings.helpers import book
from tests.conftest import World


def test_a_booking_changes_its_tenants_stream_and_no_one_elses(world: World):
    before_a = selectors.dashboard_versions(world.alice)
    before_b = selectors.dashboard_versions(world.charlie)
    booking = book(world, world.pool, profile="3g.40gb")
    made_a = selectors.dashboard_versions(world.alice)
    assert made_a.requests != before_a.requests
    assert made_a.pools[world.pool.pk] != before_a.pools[world.pool.pk]
    assert selectors.dashboard_versions(world.charlie) == before_b
    bookings.approve_booking(booking_id=booking.pk, actor=world.mallory)
    assert selectors.dashboard_versions(world.alice).requests != made_a.requests
