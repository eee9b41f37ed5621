"""Bookings on a real control plane (issue 15): a request whose lease would run into a booking's window is not
given the booked slots (it waits in the queue; DynamicMIG provisioning, cluster/sync.py), and at its start the
booking's request becomes a claim kube-scheduler allocates, its lease ending with the window (cluster/placements.py
keeps the booked end)."""

from __future__ import annotations

from allocations import services
from allocations.models import Allocation, Booking
from allocations.services import bookings
from tests.bookings.helpers import book, move_window
from tests.conftest import World
from tests.kube.conftest import KubeWorld, wait_for
from tests.kube.test_provisioning import request, settled


def test_a_booked_gpu_pair_is_kept_free_then_provisioned_at_the_start(kube_world: KubeWorld) -> None:
    # given: Team B has booked both GPUs of the pool's one node from 1 h to 3 h from now
    kw = kube_world
    world: World = kw.world
    booking = book(world, kw.pool, profile="7g.80gb", count=2, start=1, end=3, actor=world.charlie)
    # when: Team A asks for a slice with a 2 h lease, which would still hold a slot when the booking starts
    refused = request(kw, "1g.10gb")
    services.provision_allocation(allocation_id=refused.pk)
    # then: it waits in the pool's queue (issue 15) instead of taking the booked room, and nothing is made in the
    # cluster
    refused.refresh_from_db()
    assert refused.status == Allocation.Status.QUEUED
    assert not refused.claim_name
    # when: the booking is approved and its start comes
    bookings.approve_booking(booking_id=booking.pk, actor=world.root)
    booking = move_window(booking, start=-0.02, end=2)
    assert bookings.run_due_bookings()["started"] == 1
    booking.refresh_from_db()
    assert booking.status == Booking.Status.ACTIVE and booking.allocation_id is not None
    # then: its request becomes a claim the scheduler allocates, active until the booking's end
    services.provision_allocation(allocation_id=booking.allocation_id)
    wait_for("the booked claim to be allocated", lambda: settled(booking.allocation_id or 0))
    active = Allocation.objects.get(pk=booking.allocation_id)
    assert (active.status, active.count, active.lease_expires_at) == ("active", 2, booking.ends_at)
