"""Lease extensions against bookings (issue 15): a lease is not extended into a booking's room unless the
booking's owner agrees.

By default such an extension is refused with a message that names the booking and says how far the lease can go:
an extension must be decided while the lease runs, and a booking's owner may not answer in time. The requester may
instead ask the owners of the bookings in the way (services/extension_consents.py); each consent given is then left
out of this check.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from datetime import datetime

from allocations.models import Allocation
from allocations.services.booking_window import booked_rooms, capacity_conflict, moments, pool_leases
from allocations.services.locks import lock_pool

# How the refusal names the way to ask: the API's field. The page and the CLI put their own words in its place
# (allocations/views.py request_extend, allocations/cli.py cmd_extend), as a CLI user has no field to set.
ASK_HINT = "(ask_booking_owner)"


@dataclass(frozen=True, slots=True)
class BookingsInTheWay:
    """Why a longer lease would take booked room, and the bookings whose owners would have to agree."""

    message: str
    booking_ids: tuple[int, ...]


def bookings_in_the_way(
    *, allocation: Allocation, new_end: datetime, agreed: Collection[int] = ()
) -> BookingsInTheWay | None:
    """What stops the locked ACTIVE allocation's lease from ending at `new_end` (bookings would lose their room),
    or None. Bookings in `agreed` gave their consent and are left out. Locks the pool after the allocation (the
    usual order) so no booking is made meanwhile."""
    old_end = allocation.lease_expires_at
    if old_end is None or new_end <= old_end:
        return None
    pool = lock_pool(pool_id=allocation.pool_id)
    rooms = [
        r for r in booked_rooms(pool) if r.starts_at < new_end and old_end < r.ends_at and r.booking_id not in agreed
    ]
    if not rooms:
        return None
    leases = pool_leases(pool)
    longer = [replace(x, ends_at=new_end) if x.allocation_id == allocation.pk else x for x in leases]
    at = moments(old_end, new_end, rooms)
    conflict = capacity_conflict(pool=pool, candidate=None, rooms=rooms, at=at, leases=longer)
    if conflict is None or capacity_conflict(pool=pool, candidate=None, rooms=rooms, at=at, leases=leases) is not None:
        # Fits, or the bookings lack room even without this extension (a node went away): not this lease's doing.
        return None
    # The bookings in the way: leave them out one at a time, earliest first, until the longer lease fits the rest.
    in_the_way: list[int] = []
    rest = list(rooms)
    for room in sorted(rooms, key=lambda r: (r.starts_at, r.booking_id)):
        rest.remove(room)
        in_the_way.append(room.booking_id)
        if capacity_conflict(pool=pool, candidate=None, rooms=rest, at=at, leases=longer) is None:
            break
    first = min(r.starts_at for r in rooms)
    names = ", ".join(f"#{pk}" for pk in in_the_way)
    return BookingsInTheWay(
        message=(
            f"A booking needs these slots: {conflict} The lease can run until {max(first, old_end):%Y-%m-%d %H:%M} "
            f"UTC at most; for more, ask the booking's owner to agree {ASK_HINT}, or to cancel or move "
            f"booking {names}."
        ),
        booking_ids=tuple(in_the_way),
    )
