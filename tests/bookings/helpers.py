"""Shared set-up of the booking tests: a small pool whose slots run out fast, and leases made the usual way."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.utils import timezone

from allocations import services
from allocations.models import Allocation, Booking, NodePool
from allocations.services import bookings
from tests.conftest import H100, World


@dataclass
class Small:
    """One node of `gpus` H100s, with room in the quota of both tenants for everything it holds."""

    pool: NodePool
    world: World


def small_pool(world: World, gpus: int = 1, slug: str = "tiny") -> Small:
    pool = services.create_node_pool(name=f"{slug} pool", slug=slug, gpu_model=H100, actor=world.root)
    services.register_node(pool_id=pool.pk, name=f"{slug}-node-0", gpu_count=gpus, actor=world.root)
    for tenant in (world.tenant_a, world.tenant_b):
        services.set_tenant_quota(
            tenant_id=tenant.pk, pool_id=pool.pk, compute_slices_limit=28, memory_slices_limit=32, actor=world.root
        )
    return Small(pool=pool, world=world)


def hours_from_now(hours: float) -> datetime:
    """A whole minute some hours ahead, so windows compare exactly."""
    return (timezone.now() + timedelta(hours=hours)).replace(second=0, microsecond=0)


def book(
    world: World,
    pool: NodePool,
    *,
    profile: str = "1g.10gb",
    count: int = 1,
    start: float = 24,
    end: float = 28,
    actor: User | None = None,
    tenant_id: int | None = None,
) -> Booking:
    who = actor or world.alice
    return bookings.request_booking(
        tenant_id=tenant_id or (world.tenant_b.pk if who == world.charlie else world.tenant_a.pk),
        pool_id=pool.pk,
        profile=profile,
        count=count,
        starts_at=hours_from_now(start),
        ends_at=hours_from_now(end),
        purpose="workshop",
        actor=who,
    )


def active_lease(world: World, pool: NodePool, *, profile: str, count: int = 1, hours: int = 8) -> Allocation:
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=pool.pk,
        profile=profile,
        count=count,
        lease_hours=hours,
        purpose="training",
        actor=world.alice,
    )
    if allocation.status == Allocation.Status.PENDING:
        services.approve_allocation(allocation_id=allocation.pk, actor=world.mallory)
    return services.provision_allocation(allocation_id=allocation.pk)


def move_window(booking: Booking, *, start: float, end: float) -> Booking:
    """Time passes: the booking's window is now `start`..`end` hours from now (negative: in the past)."""
    Booking.objects.filter(pk=booking.pk).update(starts_at=hours_from_now(start), ends_at=hours_from_now(end))
    booking.refresh_from_db()
    return booking
