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
from allocations.static_capacity import static_pool_fits

#: Upper bounds (seconds) of the provisioning latency histogram (approval -> active); +Inf follows. Kubernetes
#: bursts took tens of seconds (docs/benchmarks.md, "provision"), the simulated backend well under one.
PROVISIONING_BUCKETS_S: tuple[float, ...] = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


def request_counts(slugs: dict[int, str]) -> dict[tuple[str, str], int]:
    """(pool slug, state) -> requests in that state. One query (grouped by the pool's id: no join)."""
    rows = Allocation.objects.values_list("pool_id", "status").annotate(n=Count("pk")).order_by()
    return {(slugs[pool_id], status): n for pool_id, status, n in rows}


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


@dataclass(frozen=True, slots=True)
class PoolFigures:
    pk: int
    slug: str
    profiles: list[str]
    #: MIG slices placed for the pool's requests from approved to releasing, by profile (every offered one).
    slices_in_use: dict[str, int]
    node_states: dict[str, int]
    gpu_count: int
    compute_total: int
    compute_used: int
    fits_now: dict[str, int]
    stranded: int
    free: int
    #: Static MIG: fits_now counts free pre-created instances, this what fits after a layout change; None on
    #: DynamicMIG (allocations/static_capacity.py).
    fits_after_reconfiguration: dict[str, int] | None = None


def _held_layouts() -> dict[tuple[int, int], str]:
    """Per GPU holding slices and the pool of the requests they are for (one pool, unless discovery moved the node
    since): the held (profile, start) pairs as one string, "1g.10gb@0,3g.40gb@4", by start (no two instances of
    one GPU start at the same slot, so equal layouts make equal strings). PostgreSQL joins them per GPU in one
    aggregate (a few thousand short rows instead of every slice); other databases (the demo's SQLite) get the
    slices and join them here."""
    held = SlicePlacement.objects.filter(allocation__status__in=Allocation.QUOTA_HOLDING).order_by()
    if connection.vendor == "postgresql":
        # PostgreSQL's CONCAT takes the integer as it is (Django's Concat would wrap every part in casts).
        pair = Func(F("profile"), Value("@"), F("start"), function="CONCAT", output_field=CharField())
        rows = (
            held.values("gpu_id", "allocation__pool_id")
            .annotate(layout=StringAgg(pair, delimiter=",", order_by=("start",)))
            .values_list("gpu_id", "allocation__pool_id", "layout")
        )
        return {(gpu_id, pool_id): layout for gpu_id, pool_id, layout in rows}
    pairs: dict[tuple[int, int], list[str]] = {}
    for gpu_id, pool_id, profile, start in held.order_by("start").values_list(
        "gpu_id", "allocation__pool_id", "profile", "start"
    ):
        pairs.setdefault((gpu_id, pool_id), []).append(f"{profile}@{start}")
    return {key: ",".join(p) for key, p in pairs.items()}


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
    the portal included), and the slices in use by profile. Equal to fleet_pool_summaries()
    (tests/web/test_metrics.py), but the slices are joined per GPU in the database: seven queries, and Python work
    per GPU and per distinct layout rather than per slice."""
    pools = list(NodePool.objects.order_by("name"))
    models = {pool.pk: gpu_model_for(pool.gpu_model) for pool in pools}
    states: dict[int, dict[str, int]] = {}
    for pool_id, state, n in (
        Node.objects.filter(pool__isnull=False).values_list("pool_id", "state").annotate(n=Count("pk")).order_by()
    ):
        states.setdefault(pool_id, {})[state] = n
    # Slices in use by the requests' pool and profile, counted once per distinct layout string.
    by_pool_layout: dict[tuple[int, str], int] = {}
    held_by_gpu: dict[int, str] = {}
    for (gpu_id, pool_id), layout in _held_layouts().items():
        by_pool_layout[(pool_id, layout)] = by_pool_layout.get((pool_id, layout), 0) + 1
        held_by_gpu[gpu_id] = f"{held_by_gpu[gpu_id]},{layout}" if gpu_id in held_by_gpu else layout
    in_use: dict[int, dict[str, int]] = {}
    for (pool_id, layout), n in by_pool_layout.items():
        counts = in_use.setdefault(pool_id, {})
        for profile, _, _ in _instances(layout):
            counts[profile] = counts.get(profile, 0) + n
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
    for (pool_pk, figures, held_pairs, outside_pairs), n in distinct.items():
        gpu_model = gpu_model_of(models[pool_pk], figures)
        if gpu_model is None:
            continue
        instances = _instances(held_pairs)
        for profile, start in outside_pairs:
            instance = outside_instance(gpu_model, profile, start, "o")
            instances.append((instance.profile, instance.start, False))
        gpu_models[id(gpu_model)] = gpu_model
        layout_key = (id(gpu_model), tuple(sorted(instances)))
        pool_layouts = layouts.setdefault(pool_pk, {})
        pool_layouts[layout_key] = pool_layouts.get(layout_key, 0) + n
    static_fits = static_pool_fits(pools)
    out = []
    for pool in pools:
        fits, lost, free = layout_figures(gpu_models, layouts.get(pool.pk, {}), mix[pool.pk])
        static = static_fits.get(pool.pk)
        model = models[pool.pk]
        used = in_use.get(pool.pk, {})
        compute_used = sum(
            n * model.profile(name).compute_slices for name, n in used.items() if model.has_profile(name)
        )
        out.append(
            PoolFigures(
                pk=pool.pk,
                slug=pool.slug,
                profiles=list(pool.profiles),
                node_states=states.get(pool.pk, {}),
                gpu_count=gpu_counts.get(pool.pk, 0),
                compute_total=gpu_counts.get(pool.pk, 0) * models[pool.pk].compute_slices,
                compute_used=compute_used,
                slices_in_use={name: used.get(name, 0) for name in sorted({*pool.profiles, *used})},
                fits_now={name: fits.get(name, 0) for name in pool.profiles} if static is None else static.free,
                stranded=lost,
                free=free,
                fits_after_reconfiguration=None if static is None else static.after_reconfiguration,
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class LatencyHistogram:
    """Cumulative counts per bucket of PROVISIONING_BUCKETS_S, then +Inf (== count), and the sum in seconds."""

    buckets: list[int]
    count: int
    sum_seconds: float


def provisioning_latency(slugs: dict[int, str]) -> dict[str, LatencyHistogram]:
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
        .values("pool_id")
        .annotate(n=Count("pk"), total=Sum("latency"), **buckets)
        .order_by()
    )
    out = {}
    for row in rows:
        total: timedelta | None = row["total"]
        out[slugs[row["pool_id"]]] = LatencyHistogram(
            buckets=[row[f"le_{i}"] for i in range(len(PROVISIONING_BUCKETS_S))] + [row["n"]],
            count=row["n"],
            sum_seconds=total.total_seconds() if total is not None else 0.0,
        )
    return out
