"""Lease extensions against bookings (issue 15): a lease is not extended into a booking's room.

We refuse such an extension with a message that names the booking (and so its owner) and says how far the
lease can go, rather than sending it to the booking's owner to agree: an extension must be decided while the
lease runs, and a booking's owner may not answer in time. The owner can cancel the booking, after which the
same extension goes through.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from allocations.models import Allocation
from allocations.services.booking_window import booked_rooms, capacity_conflict, moments, pool_leases
from allocations.services.locks import lock_pool


def booking_in_the_way(*, allocation: Allocation, new_end: datetime) -> str | None:
    """Why the locked ACTIVE allocation's lease may not end at `new_end` (a booking would lose its room), or
    None. Locks the pool after the allocation (the usual order) so no booking is made meanwhile."""
    old_end = allocation.lease_expires_at
    if old_end is None or new_end <= old_end:
        return None
    pool = lock_pool(pool_id=allocation.pool_id)
    rooms = [r for r in booked_rooms(pool) if r.starts_at < new_end and old_end < r.ends_at]
    if not rooms:
        return None
    leases = pool_leases(pool)
    longer = [replace(x, ends_at=new_end) if x.allocation_id == allocation.pk else x for x in leases]
    at = moments(old_end, new_end, rooms)
    conflict = capacity_conflict(pool=pool, candidate=None, rooms=rooms, at=at, leases=longer)
    if conflict is None or capacity_conflict(pool=pool, candidate=None, rooms=rooms, at=at, leases=leases) is not None:
        # Fits, or the bookings lack room even without this extension (a node went away): not this lease's doing.
        return None
    first = min(r.starts_at for r in rooms)
    return (
        f"A booking needs these slots: {conflict} The lease can run until {max(first, old_end):%Y-%m-%d %H:%M} UTC "
        "at most; ask the booking's owner to cancel or move it for more."
    )
