"""Database reads for the what-if answers: a pool's real layouts, queue, refused requests and quotas, as the
plain dataclasses the pure modules of this package take. Nothing here writes."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Q, Sum

from allocations.mig.demand import DemandMix
from allocations.mig.fleet import Fleet
from allocations.models import Allocation, NodePool, Quota
from allocations.placement import offered_profiles, read_pool, recent_demand
from allocations.queue_order import Waiting
from allocations.queue_state import queued_in_order, tenant_usage

from .quota import Limits, Queued, TenantQuota
from .replay import Ask

Status = Allocation.Status

#: Requests refused this many days back count as demand the pool did not serve.
REFUSED_DAYS = 7


def ask_of(allocation: Allocation) -> Ask:
    return Ask(str(allocation.pk), allocation.tenant_id, allocation.profile, allocation.count)


def pool_fleet(pool: NodePool) -> Fleet:
    """The pool's ready GPUs with the slices held now (portal requests and claims made outside it)."""
    return read_pool(pool).fleet


def pool_offered(pool: NodePool) -> list[str]:
    return offered_profiles(pool)


def pool_demand(pool: NodePool) -> DemandMix:
    """The learnt mix the placement policy uses for this pool (its recent requests and the default prior)."""
    return recent_demand(pool)


def queued_asks(pool: NodePool, *, now: datetime) -> list[Ask]:
    """The pool's QUEUED requests in admission order."""
    return [ask_of(a) for a in queued_in_order(pool, now=now)]


def refused_asks(pool: NodePool, *, now: datetime) -> list[Ask]:
    """Requests of the last REFUSED_DAYS days that never got a slice: FAILED before activation (no room, or no
    layout could ever hold them) or WITHDRAWN after waiting in the queue; oldest first."""
    rows = (
        Allocation.objects.filter(
            pool=pool,
            activated_at__isnull=True,
            created_at__gte=now - timedelta(days=REFUSED_DAYS),
        )
        .filter(Q(status=Status.FAILED) | Q(status=Status.WITHDRAWN, queued_at__isnull=False))
        .order_by("created_at", "pk")
    )
    return [ask_of(a) for a in rows]


def queue_entries(pool: NodePool) -> list[Queued]:
    """The pool's QUEUED requests with what the fair order needs (allocations/queue_order.py)."""
    rows = Allocation.objects.filter(pool=pool, status=Status.QUEUED).order_by("pk")
    return [
        Queued(ask_of(a), Waiting(a.pk, a.tenant_id, a.priority, a.queued_at or a.created_at, a.compute_slices))
        for a in rows
    ]


def compute_quotas(pool: NodePool) -> dict[int, int]:
    return dict(Quota.objects.filter(pool=pool).values_list("tenant_id", "compute_slices_limit"))


def usage_by_tenant(pool: NodePool, *, now: datetime) -> dict[int, float]:
    return tenant_usage(pool, now=now)


def tenant_quota(pool: NodePool, tenant_id: int) -> TenantQuota:
    """The tenant's quota row in the pool (zero limits without one) and the slices it holds per profile."""
    quota = Quota.objects.filter(pool=pool, tenant_id=tenant_id).first()
    held = (
        Allocation.objects.holding_quota()
        .filter(pool=pool, tenant_id=tenant_id)
        .values("profile")
        .annotate(n=Sum("count"))
        .order_by()
    )
    return TenantQuota(
        limits=Limits(quota.compute_slices_limit, quota.memory_slices_limit) if quota else Limits(0, 0),
        compute_used=quota.compute_slices_used if quota else 0,
        memory_used=quota.memory_slices_used if quota else 0,
        caps=dict(quota.profile_caps) if quota else {},
        held={row["profile"]: int(row["n"]) for row in held},
    )


def pending_asks(pool: NodePool, tenant_id: int) -> list[Ask]:
    """The tenant's PENDING requests in the pool, oldest first (the order managers decide them in)."""
    rows = Allocation.objects.filter(pool=pool, tenant_id=tenant_id, status=Status.PENDING).order_by("created_at", "pk")
    return [ask_of(a) for a in rows]
