"""Reads for GET /metrics (portal/metrics/collector.py): the whole fleet, no user scope (the endpoint is for the
platform's Prometheus, behind its own token), in a fixed number of aggregate queries whatever the fleet size.

Every label value is a pool's or tenant's slug, a profile or a state: bounded by what admins create.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, Sum

from allocations.models import Allocation, Quota, SlicePlacement
from allocations.selectors import PoolSummary, fleet_pool_summaries

#: Upper bounds (seconds) of the provisioning latency histogram (approval -> active); +Inf follows. Kubernetes
#: bursts took tens of seconds (docs/benchmarks.md, "provision"), the simulated backend well under one.
PROVISIONING_BUCKETS_S: tuple[float, ...] = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


def request_counts() -> dict[tuple[str, str], int]:
    """(pool slug, state) -> requests in that state. One query."""
    rows = Allocation.objects.values_list("pool__slug", "status").annotate(n=Count("pk")).order_by()
    return {(pool, status): n for pool, status, n in rows}


@dataclass(frozen=True, slots=True)
class QuotaFigures:
    tenant: str
    pool: str
    compute_used: int
    compute_limit: int
    memory_used: int
    memory_limit: int


def quota_figures() -> list[QuotaFigures]:
    """Every quota row: a tenant's compute and memory slices used and allowed in a pool. One query."""
    rows = Quota.objects.order_by("tenant__slug", "pool__slug").values_list(
        "tenant__slug",
        "pool__slug",
        "compute_slices_used",
        "compute_slices_limit",
        "memory_slices_used",
        "memory_slices_limit",
    )
    return [QuotaFigures(*row) for row in rows]


def slices_in_use() -> dict[tuple[str, str], int]:
    """(pool slug, profile) -> MIG slices placed for requests that hold them (provisioning to releasing). One
    query."""
    rows = (
        SlicePlacement.objects.filter(allocation__status__in=Allocation.QUOTA_HOLDING)
        .values_list("allocation__pool__slug", "profile")
        .annotate(n=Count("pk"))
        .order_by()
    )
    return {(pool, profile): n for pool, profile, n in rows}


def pool_summaries() -> list[PoolSummary]:
    """Per pool: fits-now per profile and fragmentation, as the dashboard computes them (the placement engine's
    layouts and its stranded-capacity measure), node states and compute slices used and in all."""
    return fleet_pool_summaries()


@dataclass(frozen=True, slots=True)
class LatencyHistogram:
    """Cumulative counts per bucket of PROVISIONING_BUCKETS_S, then +Inf (== count), and the sum in seconds."""

    buckets: list[int]
    count: int
    sum_seconds: float


def provisioning_latency() -> dict[str, LatencyHistogram]:
    """Per pool slug: approval (decided_at) -> active (activated_at) of every request that became active, from
    the rows' own timestamps. Computed from the database, it is the same whichever web process is scraped and
    however many workers provisioned; it only grows, because requests are never deleted. One query."""
    duration = ExpressionWrapper(F("activated_at") - F("decided_at"), output_field=DurationField())
    buckets = {
        f"le_{i}": Count("pk", filter=Q(latency__lte=timedelta(seconds=bound)))
        for i, bound in enumerate(PROVISIONING_BUCKETS_S)
    }
    rows = (
        Allocation.objects.filter(activated_at__isnull=False, decided_at__isnull=False)
        .annotate(latency=duration)
        .values("pool__slug")
        .annotate(n=Count("pk"), total=Sum("latency"), **buckets)
        .order_by()
    )
    out = {}
    for row in rows:
        total: timedelta | None = row["total"]
        out[row["pool__slug"]] = LatencyHistogram(
            buckets=[row[f"le_{i}"] for i in range(len(PROVISIONING_BUCKETS_S))] + [row["n"]],
            count=row["n"],
            sum_seconds=total.total_seconds() if total is not None else 0.0,
        )
    return out
