"""The metric families of GET /metrics, computed at scrape time.

Fleet, request and quota figures come from the database in a fixed number of aggregate queries
(allocations/metrics.py); HTTP latency, task retries and failures and the pass times come from the shared store
(portal/metrics/store.py). Nothing is kept in this process's memory between scrapes, so every web process
answers with the same figures and none is lost when a worker restarts. Names follow Prometheus's conventions:
`fatia_` prefix, base units (seconds), `_total` on counters.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from allocations import metrics as fleet
from allocations.models import Allocation, Node
from portal.metrics import events
from portal.metrics.store import HTTP, PASSES, TASKS, StoreUnavailable, get_store

logger = logging.getLogger(__name__)


def _histogram_buckets(bounds: Iterable[float], cumulative: list[int]) -> list[tuple[str, float]]:
    labels = [repr(float(b)) for b in bounds] + ["+Inf"]  # "0.5", "10.0": as prometheus_client writes le
    return list(zip(labels, map(float, cumulative), strict=True))


def database_families() -> Iterator[Metric]:
    summaries = fleet.pool_figures()
    pools = [p.slug for p in summaries]

    requests = GaugeMetricFamily(
        "fatia_requests", "Slice requests by pool and state (pending, active, released, ...).", labels=["pool", "state"]
    )
    counts = fleet.request_counts()
    for pool in sorted({*pools, *(p for p, _ in counts)}):
        for state in Allocation.Status.values:
            requests.add_metric([pool, state], counts.get((pool, state), 0))
    yield requests

    quota_help = {
        "fatia_quota_compute_slices_used": "Compute slices (of 7 per GPU) a tenant holds in a pool.",
        "fatia_quota_compute_slices_limit": "Compute slices a tenant's quota allows in a pool.",
        "fatia_quota_memory_slices_used": "Memory slices (of 8 per GPU) a tenant holds in a pool.",
        "fatia_quota_memory_slices_limit": "Memory slices a tenant's quota allows in a pool.",
    }
    quota = {name: GaugeMetricFamily(name, text, labels=["tenant", "pool"]) for name, text in quota_help.items()}
    for row in fleet.quota_figures():
        labels = [row.tenant, row.pool]
        quota["fatia_quota_compute_slices_used"].add_metric(labels, row.compute_used)
        quota["fatia_quota_compute_slices_limit"].add_metric(labels, row.compute_limit)
        quota["fatia_quota_memory_slices_used"].add_metric(labels, row.memory_used)
        quota["fatia_quota_memory_slices_limit"].add_metric(labels, row.memory_limit)
    yield from quota.values()

    in_use = GaugeMetricFamily(
        "fatia_slices_in_use", "MIG slices placed for requests (approved to releasing).", labels=["pool", "profile"]
    )
    fit_now = GaugeMetricFamily(
        "fatia_slices_fit_now",
        "Free slices by profile: how many more of the profile fit now on ready GPUs, each profile alone.",
        labels=["pool", "profile"],
    )
    used = fleet.slices_in_use()
    nodes = GaugeMetricFamily("fatia_pool_nodes", "Nodes in a pool by state.", labels=["pool", "state"])
    gpus = GaugeMetricFamily("fatia_pool_gpus", "GPUs in a pool.", labels=["pool"])
    compute_total = GaugeMetricFamily("fatia_pool_compute_slices", "Compute slices of every GPU.", labels=["pool"])
    compute_used = GaugeMetricFamily(
        "fatia_pool_compute_slices_used", "Compute slices held by requests.", labels=["pool"]
    )
    free = GaugeMetricFamily(
        "fatia_pool_free_compute_slices", "Unallocated compute slices on ready GPUs.", labels=["pool"]
    )
    stranded = GaugeMetricFamily(
        "fatia_pool_stranded_compute_slices",
        "Free compute slices on ready GPUs that no mix of the pool's requested profiles can use.",
        labels=["pool"],
    )
    fragmentation = GaugeMetricFamily(
        "fatia_pool_fragmentation_ratio",
        "Stranded / free compute slices on ready GPUs (0 when none free).",
        labels=["pool"],
    )
    for summary in summaries:
        pool = summary.slug
        profiles = sorted({*summary.profiles, *(prof for p, prof in used if p == pool)})
        for profile in profiles:
            in_use.add_metric([pool, profile], used.get((pool, profile), 0))
        for profile, n in sorted(summary.fits_now.items()):
            fit_now.add_metric([pool, profile], n)
        for state in Node.State.values:
            nodes.add_metric([pool, state], summary.node_states.get(state, 0))
        gpus.add_metric([pool], summary.gpu_count)
        compute_total.add_metric([pool], summary.compute_total)
        compute_used.add_metric([pool], summary.compute_used)
        free.add_metric([pool], summary.free)
        stranded.add_metric([pool], summary.stranded)
        ratio = summary.stranded / summary.free if summary.free else 0.0
        fragmentation.add_metric([pool], ratio)
    yield from (in_use, fit_now, nodes, gpus, compute_total, compute_used, free, stranded, fragmentation)

    latency = HistogramMetricFamily(
        "fatia_provisioning_duration_seconds",
        "Approval to active, per request that became active (from the requests' own timestamps).",
        labels=["pool"],
    )
    for pool, histogram in sorted(fleet.provisioning_latency().items()):
        latency.add_metric(
            [pool], _histogram_buckets(fleet.PROVISIONING_BUCKETS_S, histogram.buckets), histogram.sum_seconds
        )
    yield latency


def _http_family(fields: dict[str, float]) -> HistogramMetricFamily:
    """Rebuild cumulative buckets from the per-bucket counts the middleware adds (portal/metrics/events.py)."""
    per_series: dict[tuple[str, ...], list[float]] = {}
    sums: dict[tuple[str, ...], float] = {}
    top = len(events.HTTP_BUCKETS_S)
    for field, value in fields.items():
        *labels, what = field.split(events.SEP)
        key = tuple(labels)
        if len(key) != 3:
            continue  # written by another version of the portal: not ours to read
        counts = per_series.setdefault(key, [0.0] * (top + 1))
        if what == "sum":
            sums[key] = value
        elif what.isdigit() and int(what) <= top:
            counts[int(what)] += value
    family = HistogramMetricFamily(
        "fatia_http_request_duration_seconds",
        "Time to answer a request, by URL pattern name, method and status class (every web process together).",
        labels=["view", "method", "status"],
    )
    for key, counts in sorted(per_series.items()):
        cumulative, running = [], 0
        for n in counts:
            running += int(n)
            cumulative.append(running)
        family.add_metric(list(key), _histogram_buckets(events.HTTP_BUCKETS_S, cumulative), sums.get(key, 0.0))
    return family


def store_families() -> Iterator[Metric]:
    store = get_store()
    up = GaugeMetricFamily(
        "fatia_metrics_store_up", "1 when the shared store of HTTP, task and pass figures could be read."
    )
    try:
        http, tasks, passes = store.read(HTTP), store.read(TASKS), store.read(PASSES)
    except StoreUnavailable:
        logger.warning("metrics: the shared cache does not answer; HTTP, task and pass figures left out")
        up.add_metric([], 0)
        yield up
        return
    up.add_metric([], 1)
    yield up
    yield _http_family(http)

    retries = CounterMetricFamily(
        "fatia_celery_task_retries", "Celery task runs that ended in a scheduled retry.", labels=["task"]
    )
    failures = CounterMetricFamily(
        "fatia_celery_task_failures",
        "Celery task runs that failed for good (no retry left or not retryable).",
        labels=["task"],
    )
    for field, value in sorted(tasks.items()):
        task, _, what = field.rpartition(events.SEP)
        if what == "retry":
            retries.add_metric([task], value)
        elif what == "failure":
            failures.add_metric([task], value)
    yield retries
    yield failures

    for name in events.PASS_NAMES:
        family = GaugeMetricFamily(
            f"fatia_{name}_last_success_timestamp_seconds", f"Unix time the last {name} pass finished without error."
        )
        if name in passes:
            family.add_metric([], passes[name])
        yield family


class FatiaCollector(Collector):
    def collect(self) -> Iterable[Metric]:
        yield from database_families()
        yield from store_families()


REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(FatiaCollector())
