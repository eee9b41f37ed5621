from __future__ import annotations

from datetime import timedelta

import time_machine
from django.core import mail
from django.utils import timezone

from allocations import services
from allocations.models import Allocation, Quota
from allocations.services.leases import warning_window
from tests.allocating import active_request
from tests.conftest import World

Status = Allocation.Status


def active_allocation(world: World, lease_hours: int = 8) -> Allocation:
    return active_request(world, lease_hours=lease_hours, purpose="lease test")


def test_the_warning_window_is_a_quarter_of_short_leases_and_a_day_at_most():
    assert warning_window(8) == timedelta(hours=2)
    assert warning_window(168) == timedelta(hours=24)


def test_the_owner_is_warned_once_before_expiry(world: World):
    # given
    with time_machine.travel("2026-11-30 10:00:00Z", tick=False):
        allocation = active_allocation(world, lease_hours=8)
    # when: 5 h 59 min in, not yet in the 2 h window; then 6 h 30 min in, inside it, twice
    early = services.warn_expiring_leases(now=allocation.activated_at + timedelta(hours=5, minutes=59))
    warned = services.warn_expiring_leases(now=allocation.activated_at + timedelta(hours=6, minutes=30))
    again = services.warn_expiring_leases(now=allocation.activated_at + timedelta(hours=7))
    # then
    assert (early, warned, again) == ([], [allocation.pk], [])
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["alice@example.test"]
    assert mail.outbox[0].subject == "[Fatia] Your 1 x 1g.10gb lease ends in 1 h 30 min"
    assert "ends at 2026-11-30 18:00 UTC" in mail.outbox[0].body


def test_an_expired_lease_is_released_and_ends_as_expired(world: World, django_capture_on_commit_callbacks):
    # given
    allocation = active_allocation(world, lease_hours=8)
    assert allocation.lease_expires_at is not None
    # when
    with django_capture_on_commit_callbacks() as callbacks:
        before = services.expire_due_leases(now=allocation.lease_expires_at - timedelta(seconds=1))
        due = services.expire_due_leases(now=allocation.lease_expires_at)
    # then
    assert (before, due) == ([], [allocation.pk])
    assert len(callbacks) == 1
    allocation.refresh_from_db()
    assert allocation.status == Status.RELEASING
    services.finish_release(allocation_id=allocation.pk)
    allocation.refresh_from_db()
    assert allocation.status == Status.EXPIRED
    assert allocation.placements.count() == 0
    assert Quota.objects.get(tenant=world.tenant_a, pool=world.pool).compute_slices_used == 0


def test_a_released_allocation_is_not_expired_again(world: World):
    allocation = active_allocation(world, lease_hours=1)
    services.release_allocation(allocation_id=allocation.pk, actor=world.alice)
    assert allocation.lease_expires_at is not None
    assert services.expire_due_leases(now=allocation.lease_expires_at + timedelta(hours=1)) == []


def test_extending_a_lease_rearms_the_warning(world: World):
    allocation = active_allocation(world, lease_hours=8)
    assert allocation.lease_expires_at is not None
    services.warn_expiring_leases(now=allocation.lease_expires_at - timedelta(hours=1))
    services.request_lease_extension(allocation_id=allocation.pk, hours=8, actor=world.alice)
    allocation.refresh_from_db()
    assert allocation.expiry_warning_sent_at is None
    assert allocation.lease_expires_at == allocation.activated_at + timedelta(hours=16)
    assert timezone.is_aware(allocation.lease_expires_at)
