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
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import generate_latest
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
    slugs = {p.pk: p.slug for p in summaries}
    pools = list(slugs.values())

    requests = GaugeMetricFamily(
        "fatia_requests", "Slice requests by pool and state (pending, active, released, ...).", labels=["pool", "state"]
    )
    counts = fleet.request_counts(slugs)
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
    fit_reconfigured = GaugeMetricFamily(
        "fatia_slices_fit_after_reconfiguration",
        "Static-MIG pools only: how many more of the profile fit after a layout change of free space (fit_now "
        "counts their free pre-created instances), each profile alone.",
        labels=["pool", "profile"],
    )
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
        for profile, n in summary.slices_in_use.items():
            in_use.add_metric([pool, profile], n)
        for profile, n in sorted(summary.fits_now.items()):
            fit_now.add_metric([pool, profile], n)
        for profile, n in sorted((summary.fits_after_reconfiguration or {}).items()):
            fit_reconfigured.add_metric([pool, profile], n)
        for state in Node.State.values:
            nodes.add_metric([pool, state], summary.node_states.get(state, 0))
        gpus.add_metric([pool], summary.gpu_count)
        compute_total.add_metric([pool], summary.compute_total)
        compute_used.add_metric([pool], summary.compute_used)
        free.add_metric([pool], summary.free)
        stranded.add_metric([pool], summary.stranded)
        ratio = summary.stranded / summary.free if summary.free else 0.0
        fragmentation.add_metric([pool], ratio)
    yield from (
        in_use,
        fit_now,
        fit_reconfigured,
        nodes,
        gpus,
        compute_total,
        compute_used,
        free,
        stranded,
        fragmentation,
    )

    latency = HistogramMetricFamily(
        "fatia_provisioning_duration_seconds",
        "Approval to active, per request that became active (from the requests' own timestamps).",
        labels=["pool"],
    )
    for pool, histogram in sorted(fleet.provisioning_latency(slugs).items()):
        latency.add_metric(
            [pool], _histogram_buckets(fleet.PROVISIONING_BUCKETS_S, histogram.buckets), histogram.sum_seconds
        )
    yield latency


HTTP_FAMILY = "fatia_http_request_duration_seconds"
HTTP_HELP = "Time to answer a request, by URL pattern name, method and status class (every web process together)."


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def http_histogram_text(fields: dict[str, float]) -> str:
    """The HTTP latency histogram in the text format, with cumulative buckets rebuilt from the per-bucket counts
    the middleware adds (portal/metrics/events.py).

    Written here rather than through prometheus_client's families: at a few hundred series (every URL pattern
    name x method x status class) its per-sample validation and escaping was over half the scrape's CPU time
    (bench/metrics.py); the tests parse this text with prometheus_client's own parser."""
    top = len(events.HTTP_BUCKETS_S)
    per_series: dict[tuple[str, ...], list[int]] = {}
    sums: dict[tuple[str, ...], float] = {}
    for field, value in fields.items():
        *parts, what = field.split(events.SEP)
        key = tuple(parts)
        if len(key) != 3:
            continue  # written by another version of the portal: not ours to read
        counts = per_series.setdefault(key, [0] * (top + 1))
        if what == "sum":
            sums[key] = value
        elif what.isdigit() and int(what) <= top:
            counts[int(what)] += int(value)
    bounds = [repr(float(b)) for b in events.HTTP_BUCKETS_S] + ["+Inf"]
    lines = [f"# HELP {HTTP_FAMILY} {HTTP_HELP}", f"# TYPE {HTTP_FAMILY} histogram"]
    for key, counts in sorted(per_series.items()):
        view, method, status = map(_label, key)
        series = f'view="{view}",method="{method}",status="{status}"'
        running = 0
        for bound, n in zip(bounds, counts, strict=True):
            running += n
            lines.append(f'{HTTP_FAMILY}_bucket{{{series},le="{bound}"}} {running}')
        lines.append(f"{HTTP_FAMILY}_count{{{series}}} {running}")
        lines.append(f"{HTTP_FAMILY}_sum{{{series}}} {sums.get(key, 0.0)!r}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class StoreFigures:
    """What the processes recorded in the shared store (portal/metrics/store.py); `up` False when unreadable."""

    up: bool
    http: dict[str, float]
    tasks: dict[str, float]
    passes: dict[str, float]


def read_store() -> StoreFigures:
    store = get_store()
    try:
        return StoreFigures(True, store.read(HTTP), store.read(TASKS), store.read(PASSES))
    except StoreUnavailable:
        logger.warning("metrics: the shared cache does not answer; HTTP, task and pass figures left out")
        return StoreFigures(False, {}, {}, {})


def store_families(figures: StoreFigures) -> Iterator[Metric]:
    """Everything from the store but the HTTP histogram (http_histogram_text)."""
    up = GaugeMetricFamily(
        "fatia_metrics_store_up", "1 when the shared store of HTTP, task and pass figures could be read."
    )
    up.add_metric([], 1 if figures.up else 0)
    yield up
    if not figures.up:
        return
    retries = CounterMetricFamily(
        "fatia_celery_task_retries", "Celery task runs that ended in a scheduled retry.", labels=["task"]
    )
    failures = CounterMetricFamily(
        "fatia_celery_task_failures",
        "Celery task runs that failed for good (no retry left or not retryable).",
        labels=["task"],
    )
    for field, value in sorted(figures.tasks.items()):
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
        if name in figures.passes:
            family.add_metric([], figures.passes[name])
        yield family


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def render() -> bytes:
    """The whole /metrics body: the database's families, the store's, and the HTTP latency histogram."""
    store = read_store()
    families = [*database_families(), *store_families(store)]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    body = generate_latest(registry)
    if store.up:
        body += http_histogram_text(store.http).encode()
    return body
