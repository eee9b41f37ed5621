"""The node page's history chart: per GPU, memory used and SM utilisation over the last 24 hours (minute rollups,
drawn per 10 minutes) or 7 days (hourly rollups), as SVG polylines the template draws server-side (the CSP
forbids inline script, and no chart library is shipped).

Tenancy: platform admins see each whole GPU (the agent's GPU-level figures). Everybody else sees only their
tenants' slices on it, the sum of those MIG devices' memory and their mean utilisation, within each request's
active window (SliceDevice): another tenant's slice is never drawn, not even inside a GPU total.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q

from allocations.costs import gpu_model_for
from allocations.models import Allocation, Gpu, SliceDevice
from allocations.nodeagent.models import DeviceRollup, DeviceState

WIDTH, HEIGHT = 720, 120
PERIODS = {"24h": (timedelta(hours=24), timedelta(minutes=10)), "7d": (timedelta(days=7), timedelta(hours=1))}


@dataclass(frozen=True, slots=True)
class GpuHistory:
    index: int
    title: str
    # Polyline point lists ("x,y x,y ..."), one per unbroken run of data, y: 0 at the top (100 %).
    memory_lines: list[str]
    utilisation_lines: list[str]
    summary: str

    @property
    def has_data(self) -> bool:
        return bool(self.memory_lines)


@dataclass(frozen=True, slots=True)
class NodeHistory:
    period: str
    start: datetime
    end: datetime
    whole_gpus: bool
    gpus: list[GpuHistory]
    width: int = WIDTH
    height: int = HEIGHT


@dataclass
class _Point:
    memory: float = 0.0
    util_sum: float = 0.0
    util_n: int = 0
    memory_peak: float = 0.0


def _step_of(bucket: datetime, start: datetime, step: timedelta) -> int:
    return int((bucket - start) // step)


def _lines(values: dict[int, float], steps: int) -> list[str]:
    """Percentages per step as polylines, broken where a step has no value."""
    runs: list[list[tuple[float, float]]] = []
    previous = -2
    for n in sorted(values):
        if n != previous + 1:
            runs.append([])
        x = WIDTH * (n + 0.5) / steps
        y = HEIGHT * (1 - min(max(values[n], 0.0), 100.0) / 100)
        runs[-1].append((x, y))
        previous = n
    # A lone point draws nothing as a polyline: give it a short flat stroke.
    runs = [run if len(run) > 1 else [(run[0][0] - 1, run[0][1]), (run[0][0] + 1, run[0][1])] for run in runs]
    return [" ".join(f"{x:.1f},{y:.1f}" for x, y in run) for run in runs]


def _gpu_history(index: int, title: str, points: dict[int, _Point], total_mib: float, steps: int) -> GpuHistory:
    memory = {n: 100 * p.memory / total_mib for n, p in points.items()} if total_mib else {}
    util = {n: p.util_sum / p.util_n for n, p in points.items() if p.util_n}
    if not points:
        summary = f"{title}: no reports in this period."
    else:
        mean_gib = sum(p.memory for p in points.values()) / len(points) / 1024
        peak_gib = max(p.memory_peak for p in points.values()) / 1024
        summary = (
            f"{title}: memory used {mean_gib:.1f} GiB on average, {peak_gib:.1f} GiB at most, of "
            f"{total_mib / 1024:.0f} GiB; "
        )
        if util:
            summary += (
                f"SM utilisation {sum(util.values()) / len(util):.0f} % on average, {max(util.values()):.0f} % at most"
            )
        else:
            summary += "no utilisation reported"
        summary += f"; reports in {len(points)} of {steps} intervals."
    return GpuHistory(index, title, _lines(memory, steps), _lines(util, steps), summary)


def _accumulate(
    rows: Iterable[tuple[str, datetime, float, int, float | None]],
    index_of: dict[str, int],
    start: datetime,
    step: timedelta,
) -> dict[int, dict[int, _Point]]:
    """Rollup rows (uuid, bucket, memory mean, memory peak, utilisation mean) into per-GPU, per-step points.
    Memory of several devices in one step adds up (mean over the step's buckets per device)."""
    per_device: dict[tuple[int, str, int], list[tuple[float, int, float | None]]] = defaultdict(list)
    for uuid, bucket, memory, peak, util in rows:
        if uuid in index_of:
            per_device[(index_of[uuid], uuid, _step_of(bucket, start, step))].append((memory, peak, util))
    out: dict[int, dict[int, _Point]] = defaultdict(dict)
    for (gpu, _, n), samples in per_device.items():
        point = out[gpu].setdefault(n, _Point())
        point.memory += sum(m for m, _, _ in samples) / len(samples)
        point.memory_peak += max(p for _, p, _ in samples)
        utils = [u for _, _, u in samples if u is not None]
        if utils:
            point.util_sum += sum(utils) / len(utils)
            point.util_n += 1
    return out


def _catalog_mib(model: str | None) -> int:
    """A GPU's memory from the catalog when discovery did not record it (the simulated fleet)."""
    try:
        return gpu_model_for(model or "").memory_mib
    except KeyError:
        return 0


def node_history(*, node_id: int, visible_tenants: set[int] | None, period: str, now: datetime) -> NodeHistory:
    """The chart of one node for a viewer: `visible_tenants` None for platform admins (whole GPUs), else the
    tenants whose slices the viewer sees in full. Four queries."""
    span, step = PERIODS[period]
    end = now
    start = end - span
    steps = int(span // step)
    resolution = DeviceRollup.Resolution.MINUTE if period == "24h" else DeviceRollup.Resolution.HOUR
    gpus = list(
        Gpu.objects.filter(node_id=node_id)
        .order_by("index")
        .values_list("pk", "index", "memory_mib", "node__pool__gpu_model")
    )
    memory_of = {pk: mib or _catalog_mib(model) for pk, _, mib, model in gpus}
    index_by_pk = {pk: index for pk, index, _, _ in gpus}
    rollups = DeviceRollup.objects.filter(node_id=node_id, resolution=resolution, bucket__gte=start, bucket__lt=end)
    rows: Iterable[tuple[str, datetime, float, int, float | None]]
    if visible_tenants is None:
        index_of = {
            uuid: index_by_pk[gpu_id]
            for uuid, gpu_id in DeviceState.objects.filter(node_id=node_id, kind=DeviceState.Kind.GPU).values_list(
                "uuid", "gpu_id"
            )
            if gpu_id in index_by_pk
        }
        rows = rollups.filter(kind=DeviceState.Kind.GPU).values_list(
            "uuid", "bucket", "memory_mean_mib", "memory_max_mib", "utilisation_mean"
        )
        points = _accumulate(rows, index_of, start, step)
        totals = {index_by_pk[pk]: float(memory_of[pk]) for pk in index_by_pk}
        titles = {index: f"GPU {index}" for index in index_by_pk.values()}
    else:
        devices = list(
            SliceDevice.objects.filter(node_id=node_id, allocation__tenant_id__in=visible_tenants)
            .filter(Q(allocation__ended_at__isnull=True) | Q(allocation__ended_at__gt=start))
            .exclude(allocation__status__in=[Allocation.Status.PENDING, Allocation.Status.APPROVED])
            .values_list("uuid", "gpu_id", "allocation__activated_at", "allocation__ended_at")
        )
        windows = {uuid: (activated or start, ended or end) for uuid, _, activated, ended in devices}
        index_of = {uuid: index_by_pk[gpu_id] for uuid, gpu_id, _, _ in devices if gpu_id in index_by_pk}
        rows = [
            r
            for r in rollups.filter(kind=DeviceState.Kind.MIG, uuid__in=list(windows)).values_list(
                "uuid", "bucket", "memory_mean_mib", "memory_max_mib", "utilisation_mean"
            )
            if windows[r[0]][0] - timedelta(hours=1) < r[1] < windows[r[0]][1]
        ]
        points = _accumulate(rows, index_of, start, step)
        totals = {index_by_pk[pk]: float(memory_of[pk]) for pk in index_by_pk}
        titles = {index: f"GPU {index}, your slices" for index in index_by_pk.values()}
    return NodeHistory(
        period=period,
        start=start,
        end=end,
        whole_gpus=visible_tenants is None,
        gpus=[_gpu_history(i, titles[i], points.get(i, {}), totals[i], steps) for i in sorted(titles)],
    )
