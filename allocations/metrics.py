"""Reads for GET /metrics (portal/metrics/collector.py): the whole fleet, no user scope (the endpoint is for the
platform's Prometheus, behind its own token), in a fixed number of aggregate queries whatever the fleet size.

Every label value is a pool's or tenant's slug, a profile or a state: bounded by what admins create.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.contrib.postgres.aggregates import StringAgg
from django.db import connection
from django.db.models import CharField, Count, DurationField, ExpressionWrapper, F, Func, Q, Sum, Value

from allocations.costs import gpu_model_for
from allocations.mig.catalog import GpuModel
from allocations.models import Allocation, Gpu, Node, NodePool, Quota, SlicePlacement
from allocations.placement import gpu_model_of, outside_instance, outside_instances
from allocations.selectors import LayoutKeyByModel, layout_figures, requested_mix

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


@dataclass(frozen=True, slots=True)
class PoolFigures:
    slug: str
    profiles: list[str]
    node_states: dict[str, int]
    gpu_count: int
    compute_total: int
    compute_used: int
    fits_now: dict[str, int]
    stranded: int
    free: int


def _held_layouts() -> dict[int, str]:
    """Per GPU holding slices: its held (profile, start) pairs as one string, "1g.10gb@0,3g.40gb@4", by start (no
    two instances of one GPU start at the same slot, so equal layouts make equal strings). PostgreSQL
    joins them per GPU in one aggregate (a few thousand short rows instead of every slice); other databases (the
    demo's SQLite) get the slices and join them here."""
    held = SlicePlacement.objects.filter(allocation__status__in=Allocation.QUOTA_HOLDING).order_by()
    if connection.vendor == "postgresql":
        # PostgreSQL's CONCAT takes the integer as it is (Django's Concat would wrap every part in casts).
        pair = Func(F("profile"), Value("@"), F("start"), function="CONCAT", output_field=CharField())
        rows = (
            held.values("gpu_id")
            .annotate(layout=StringAgg(pair, delimiter=",", order_by=("start",)))
            .values_list("gpu_id", "layout")
        )
        return dict(rows)
    pairs: dict[int, list[str]] = {}
    for gpu_id, profile, start in held.order_by("start").values_list("gpu_id", "profile", "start"):
        pairs.setdefault(gpu_id, []).append(f"{profile}@{start}")
    return {gpu_id: ",".join(p) for gpu_id, p in pairs.items()}


def _instances(layout: str) -> list[tuple[str, int, bool]]:
    out = []
    for pair in filter(None, layout.split(",")):
        profile, _, start = pair.rpartition("@")
        out.append((profile, int(start), False))
    return out


def pool_figures() -> list[PoolFigures]:
    """Per pool: nodes by state, GPUs, compute slices in all and held, and how many more of each offered profile
    fit now and how fragmented the free capacity is, with the dashboard's own measure (selectors.layout_figures:
    the placement engine's fits and stranded slices, once per distinct layout of ready GPUs; devices held outside
    the portal included). Equal to fleet_pool_summaries() (tests/web/test_metrics.py), but the slices are joined
    per GPU in the database: seven queries, and Python work per distinct layout rather than per slice."""
    pools = list(NodePool.objects.order_by("name"))
    models = {pool.pk: gpu_model_for(pool.gpu_model) for pool in pools}
    states: dict[int, dict[str, int]] = {}
    for pool_id, state, n in (
        Node.objects.filter(pool__isnull=False).values_list("pool_id", "state").annotate(n=Count("pk")).order_by()
    ):
        states.setdefault(pool_id, {})[state] = n
    held_by_gpu = _held_layouts()
    outside = outside_instances()
    mix = requested_mix(pools)
    gpu_counts: dict[int, int] = {}
    # Ready GPUs by (pool, published figures, held layout, outside devices): thousands of GPUs, a few dozen
    # distinct keys, each parsed and measured once below.
    distinct: dict[tuple[int, int | None, str, tuple[tuple[str, int], ...]], int] = {}
    for gpu_id, pool_id, state, figures_id in (
        Gpu.objects.filter(node__pool__isnull=False)
        .order_by()
        .values_list("pk", "node__pool_id", "node__state", "figures_id")
    ):
        gpu_counts[pool_id] = gpu_counts.get(pool_id, 0) + 1
        if state == Node.State.READY:
            key = (pool_id, figures_id, held_by_gpu.get(gpu_id, ""), tuple(outside.get(gpu_id, ())))
            distinct[key] = distinct.get(key, 0) + 1
    layouts: dict[int, dict[LayoutKeyByModel, int]] = {}
    gpu_models: dict[int, GpuModel] = {}
    for (pool_pk, figures, held, outside_pairs), n in distinct.items():
        gpu_model = gpu_model_of(models[pool_pk], figures)
        if gpu_model is None:
            continue
        instances = _instances(held)
        for profile, start in outside_pairs:
            instance = outside_instance(gpu_model, profile, start, "o")
            instances.append((instance.profile, instance.start, False))
        gpu_models[id(gpu_model)] = gpu_model
        layout = (id(gpu_model), tuple(sorted(instances)))
        pool_layouts = layouts.setdefault(pool_pk, {})
        pool_layouts[layout] = pool_layouts.get(layout, 0) + n
    compute_used: dict[int, int] = {}
    slug_to_pk = {pool.slug: pool.pk for pool in pools}
    for (slug, profile), n in slices_in_use().items():
        model = models[slug_to_pk[slug]]
        compute = model.profile(profile).compute_slices if model.has_profile(profile) else 0
        compute_used[slug_to_pk[slug]] = compute_used.get(slug_to_pk[slug], 0) + n * compute
    out = []
    for pool in pools:
        fits, lost, free = layout_figures(gpu_models, layouts.get(pool.pk, {}), mix[pool.pk])
        out.append(
            PoolFigures(
                slug=pool.slug,
                profiles=list(pool.profiles),
                node_states=states.get(pool.pk, {}),
                gpu_count=gpu_counts.get(pool.pk, 0),
                compute_total=gpu_counts.get(pool.pk, 0) * models[pool.pk].compute_slices,
                compute_used=compute_used.get(pool.pk, 0),
                fits_now={name: fits.get(name, 0) for name in pool.profiles},
                stranded=lost,
                free=free,
            )
        )
    return out


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
