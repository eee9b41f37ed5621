"""The starvation bound (issue 15): room held for a request that has waited too long.

Admission skips a queued request that does not fit and admits smaller ones behind it; without a bound a stream
of small requests could take every slot a large one needs as it frees. Once the first request in admission
order that has waited FATIA_QUEUE_RESERVE_AFTER_S does not fit, the pool reserves for it the node where the
future free layout fits it soonest (queue_eta): no other request is placed there until it is admitted. Other
nodes stay open, so the reservation costs only the slots that would block it.

A reservation for a request that borrows from its cohort (issue 15) does not block a request within its tenant's
guarantee: the node would be held, out of capacity its lenders are guaranteed, for slices the cohort could take
back at once, and the lender would wait past grace + provisioning for a borrower (the fairness bench, greedy
demand, found it once borrowers queue as the portal queues them). It still holds the node against other borrowers
and against requests of tenants outside a cohort.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from allocations.models import Allocation, NodePool
from allocations.placement import POLICY, PlannedSlice, read_pool
from allocations.queue_eta import estimate_starts
from allocations.queue_order import starving_head
from allocations.queue_state import ask_of, pool_leases, queued_in_order, waiting_of
from allocations.services.booking_window import bookings_during, room_left_for_bookings

Status = Allocation.Status


@dataclass(frozen=True, slots=True)
class Reservation:
    allocation_id: int
    node: str
    #: The request it is held for borrows from its cohort: requests within their guarantee are not blocked.
    for_borrower: bool = False


def pool_reservation(pool: NodePool) -> Reservation | None:
    """The node the pool holds for its starving head-of-line request, if any. Cheap when nothing starves (one
    indexed query); shared pools (no slot layout) reserve nothing."""
    now = timezone.now()
    bound = now - timedelta(seconds=settings.FATIA_QUEUE_RESERVE_AFTER_S)
    starved = Allocation.objects.filter(pool=pool, status=Status.QUEUED, held=False, queued_at__lte=bound)
    if pool.is_shared or not starved.exists():
        return None
    # A held request (issue 14) is not starving: it fits now and its own bound (`held_until`) places it, so no node
    # is reserved for it; the bound passes to the next request that waits for room.
    ordered = {a.pk: a for a in queued_in_order(pool, now=now) if a.queued_at is not None and not a.held}
    starving = starving_head(
        [waiting_of(a) for a in ordered.values()], now=now, reserve_after_s=settings.FATIA_QUEUE_RESERVE_AFTER_S
    )
    if starving is None:
        return None
    head = ordered[starving.allocation_id]
    estimate = estimate_starts(
        read_pool(pool).fleet,
        leases=pool_leases(pool, now=now),
        queue=[ask_of(head)],
        now=now,
        pool=pool.slug,
        policy=POLICY,
    ).get(head.pk)
    if estimate is None:
        return None
    return Reservation(allocation_id=head.pk, node=estimate.node, for_borrower=borrows(head))


def borrows(allocation: Allocation) -> bool:
    """Whether the request takes (or, queued, will take again) slices its cohort lends (services/cohorts.py)."""
    return bool(allocation.borrowed_compute_slices or allocation.borrowed_memory_slices)


def blocks_reservation(*, pool: NodePool, allocation: Allocation, slices: list[PlannedSlice]) -> bool:
    """True when placing `slices` for `allocation` would take room the pool holds for another request: the node
    reserved for a starving head of line, or a booking's room during this request's lease (issue 15's bookings,
    services/booking_window.py). Fresh and queued requests both pass here, so neither takes a booking's room."""
    return reservation_blocker(pool=pool, allocation=allocation, slices=slices) is not None


def reservation_blocker(*, pool: NodePool, allocation: Allocation, slices: list[PlannedSlice]) -> str | None:
    """What `blocks_reservation` finds in the way, as words for the queued request's message (they name the request
    the node is held for, or the bookings whose room the lease would run into), or None."""
    reservation = pool_reservation(pool)
    if (
        reservation is not None
        and reservation.allocation_id != allocation.pk
        and (borrows(allocation) or not reservation.for_borrower)
        and any(s.node_name == reservation.node for s in slices)
    ):
        return (
            f"a free layout fits it, but on {reservation.node}, which is held for request #{reservation.allocation_id} "
            "(it has waited longest and fits nowhere else)"
        )
    until = allocation.lease_expires_at or timezone.now() + timedelta(hours=allocation.lease_hours)
    squeezed = room_left_for_bookings(
        pool=pool, profile=allocation.profile, slices=slices, until=until, allocation_id=allocation.pk
    )
    if squeezed is None:
        return None
    rooms = bookings_during(pool=pool, until=until, allocation_id=allocation.pk)
    return f"a free layout fits it, but its lease would run into the room of {rooms}; a shorter lease may fit now"
