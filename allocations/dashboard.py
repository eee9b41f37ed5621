"""The live fleet dashboard: pools at a glance, each pool's nodes with every GPU drawn slot by slot,
and a Server-Sent Events stream that tells an open page which pool changed.

Views only parse the query string and call the dashboard selectors (allocations/selectors.py, last
section), which apply tenancy: members see other tenants' slices as "occupied".

The event stream (`events`) is built in allocations/live.py: what it tells each viewer, how little it
costs under ASGI (portal/asgi.py), and why it ends every 25 s under WSGI.
"""

from __future__ import annotations

import csv
import math
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import date

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.handlers.asgi import ASGIRequest
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.gzip import gzip_page
from django.views.decorators.http import require_GET

from allocations import live, selectors
from allocations.models import Node, NodePool
from allocations.nodeagent import history
from tenants.views import signed_in_user


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


def parse_filters(request: HttpRequest) -> selectors.DashboardFilters:
    """Filters from the query string; unknown or malformed values are ignored, never an error."""
    state = request.GET.get("state", "")
    return selectors.DashboardFilters(
        pool_id=_int_or_none(request.GET.get("pool")),
        tenant_id=_int_or_none(request.GET.get("tenant")),
        state=state if state in Node.State.values else "",
        search=request.GET.get("q", "").strip()[:253],
        page=max(_int_or_none(request.GET.get("page")) or 1, 1),
    )


def _nodes_or_404(user: User, pool_id: int, filters: selectors.DashboardFilters) -> selectors.NodePage:
    try:
        return selectors.dashboard_nodes(user, pool_id, filters)
    except NodePool.DoesNotExist as exc:
        raise Http404("No such pool.") from exc


@login_required
@require_GET
def dashboard(request: HttpRequest) -> HttpResponse:
    """Every pool's summary, and the chosen pool's nodes (the first pool when none is chosen)."""
    user = signed_in_user(request)
    filters = parse_filters(request)
    pools = selectors.dashboard_overview(user)
    chosen = next((p for p in pools if p.pool_id == filters.pool_id), pools[0] if pools else None)
    return render(
        request,
        "dashboard/index.html",
        {
            "pools": pools,
            "chosen": chosen,
            "filters": filters,
            "node_page": _nodes_or_404(user, chosen.pool_id, filters) if chosen else None,
            "tenants": selectors.dashboard_tenant_choices(user),
            "states": Node.State.choices,
        },
    )


@login_required
@require_GET
def pool_summary(request: HttpRequest, pool_id: int) -> HttpResponse:
    """One pool's summary card (HTML fragment): what the page's script swaps in when the pool changed."""
    user = signed_in_user(request)
    pools = selectors.dashboard_overview(user, selectors.DashboardFilters(pool_id=pool_id))
    if not pools:
        raise Http404("No such pool.")
    chosen = _int_or_none(request.GET.get("chosen"))
    return render(request, "dashboard/_pool_card.html", {"pool": pools[0], "chosen_id": chosen})


@login_required
@require_GET
def pool_nodes(request: HttpRequest, pool_id: int) -> HttpResponse:
    """One page of a pool's nodes (HTML fragment), with the same filters as the page."""
    user = signed_in_user(request)
    filters = parse_filters(request)
    return render(
        request, "dashboard/_nodes.html", {"node_page": _nodes_or_404(user, pool_id, filters), "filters": filters}
    )


@login_required
@require_GET
def events(request: HttpRequest) -> StreamingHttpResponse:
    """Server-Sent Events for the dashboard and the request pages (allocations/live.py): `versions` on connect,
    then `changed` {pool, version} when a pool changed for this viewer and `requests` {version} when the
    viewer's tenants' requests changed.

    Carries no tenant data (pool ids and opaque hashes of what the viewer may see); the page refetches what
    changed through the tenancy-scoped views. A reconnecting browser's Last-Event-ID, or the `since` a page
    was rendered with, makes the stream announce at once what changed in between."""
    user = signed_in_user(request)
    scope = selectors.viewer_scope(user)
    duration = float(getattr(settings, "FATIA_DASHBOARD_STREAM_SECONDS", 25))
    interval = float(getattr(settings, "FATIA_DASHBOARD_POLL_SECONDS", 1))
    seen = live.decode_event_id(request.headers.get("Last-Event-ID") or request.GET.get("since", ""))
    stream: Iterator[str] | AsyncIterator[str]
    if isinstance(request, ASGIRequest):
        stream = live.async_event_stream(scope=scope, duration=duration, interval=interval, seen=seen)
    else:
        stream = live.event_stream(scope=scope, duration=duration, interval=interval, seen=seen)
    response = StreamingHttpResponse(stream, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event through at once
    return response


SHOWBACK_DAYS = (7, 14, 30, 90)


def _showback_days(request: HttpRequest) -> int:
    days = _int_or_none(request.GET.get("days"))
    return days if days in SHOWBACK_DAYS else 14


@dataclass(frozen=True, slots=True)
class AxisTick:
    value: float
    percent: float
    label: str


@dataclass(frozen=True, slots=True)
class ChartBar:
    day: date
    total: float
    # (tenant name, colour, hours, height in percent of the axis), bottom to top
    segments: list[tuple[str, str, float, float]]
    by_tenant: list[tuple[str, float]]  # (tenant name, hours) for every tenant of the showback, zeros too
    label: bool  # the day's date is written under its bar
    minor: bool  # ... but not on narrow screens


@dataclass(frozen=True, slots=True)
class UsageChart:
    ticks: list[AxisTick]
    bars: list[ChartBar]
    top: float

    @property
    def top_label(self) -> str:
        return self.ticks[-1].label


def axis_ticks(maximum: float, *, count: int = 4) -> list[float]:
    """Round values from 0 to at least `maximum` in `count` equal steps of 1, 2, 2.5 or 5 x 10^n: the
    chart's y axis. An empty chart still gets an axis (0 to 1)."""
    if maximum <= 0:
        return [n / count for n in range(count + 1)]
    raw = maximum / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw - 1e-9)
    return [round(n * step, 6) for n in range(count + 1)]


def _tick_label(value: float) -> str:
    return f"{value:g}" if value >= 10 or value == int(value) else f"{value:.2f}".rstrip("0")


def usage_chart(showback: selectors.Showback) -> UsageChart:
    """The stacked bars of the showback page, scaled to a y axis with round tick values. Dates are
    written under every bar up to 14 days (else every k-th); on narrow screens about 7 are kept."""
    ticks = axis_ticks(showback.daily_max)
    top = ticks[-1]
    days = len(showback.days)
    every, every_narrow = max(math.ceil(days / 14), 1), max(math.ceil(days / 7), 1)
    bars = []
    for i, day in enumerate(showback.days):
        segments = [
            (t.tenant_name, t.colour, t.daily[i], round(100 * t.daily[i] / top, 2))
            for t in showback.tenants
            if t.daily[i] > 0
        ]
        last = days - 1 - i  # counted from the newest day, so today always has its date
        bars.append(
            ChartBar(
                day=day,
                total=showback.daily_totals[i],
                segments=segments,
                by_tenant=[(t.tenant_name, t.daily[i]) for t in showback.tenants],
                label=last % every == 0,
                minor=last % every_narrow != 0,
            )
        )
    return UsageChart([AxisTick(v, round(100 * v / top, 2), _tick_label(v)) for v in ticks], bars, top)


@login_required
@require_GET
def usage(request: HttpRequest) -> HttpResponse:
    """Showback: slice-hours and GPU-equivalent-hours per tenant and day (the user's tenants; all for staff)."""
    user = signed_in_user(request)
    days = _showback_days(request)
    showback = selectors.showback_for_user(user, days=days)
    return render(
        request,
        "dashboard/usage.html",
        {"showback": showback, "chart": usage_chart(showback), "days": days, "day_choices": SHOWBACK_DAYS},
    )


@login_required
@require_GET
def usage_csv(request: HttpRequest) -> HttpResponse:
    """The showback as CSV, one kind of value in each column.

    Default: one row per tenant and UTC day (`day` is always a date, so a spreadsheet's sum of a column
    is the period's total). `?rows=totals`: one row per tenant for the whole period, which is named by
    its first and last day."""
    user = signed_in_user(request)
    days = _showback_days(request)
    totals = request.GET.get("rows") == "totals"
    showback = selectors.showback_for_user(user, days=days)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    name = f"fatia-showback-{days}d{'-totals' if totals else ''}.csv"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    writer = csv.writer(response)
    if totals:
        writer.writerow(
            ["period_start", "period_end", "tenant", "gpu_equivalent_hours", "slice_hours", "used_slice_hours"]
        )
        first, last = showback.days[0].isoformat(), showback.days[-1].isoformat()
        for tenant in showback.tenants:
            total = [f"{tenant.gpu_equivalent_hours:.2f}", f"{tenant.slice_hours:.2f}", _used(tenant.used_slice_hours)]
            writer.writerow([first, last, tenant.tenant_name, *total])
        return response
    writer.writerow(["day", "tenant", "gpu_equivalent_hours", "slice_hours", "used_slice_hours"])
    for tenant in showback.tenants:
        used = tenant.daily_used_slice_hours or [None] * len(showback.days)
        for day, hours, slice_hours, used_hours in zip(
            showback.days, tenant.daily, tenant.daily_slice_hours, used, strict=True
        ):
            writer.writerow(
                [day.isoformat(), tenant.tenant_name, f"{hours:.2f}", f"{slice_hours:.2f}", _used(used_hours)]
            )
    return response


def _used(hours: float | None) -> str:
    """Showback's "used" in the CSV: "no data" where no agent reported, never a misleading 0."""
    return "no data" if hours is None else f"{hours:.2f}"


# --- Fleet overview: one cell per GPU -------------------------------------------------------------------

PLACEHOLDER_ID = 987654321
FLEET_SORT_LABELS = {"name": "Node name", "free": "Most free first", "full": "Fullest first"}


def fleet_density(gpu_count: int) -> str:
    """The cell size: the largest that keeps every GPU on one 1440 x 900 screen (small: 1,000 nodes x
    8 GPUs; measured by tests/dashboard/browser/test_fleet_overview.py)."""
    if gpu_count <= 512:
        return "large"
    if gpu_count <= 2048:
        return "medium"
    return "small"


@dataclass(frozen=True, slots=True)
class FleetSection:
    pool: selectors.FleetPool
    nodes_html: SafeString


def fleet_nodes_html(pool: selectors.FleetPool, *, density: str) -> SafeString:
    """The overview's <li> per node: its handle (a <summary> that collapses it) and one link per GPU
    to the node's slot view, named in words ("node-12 gpu-3: 5 of 8 slots used").

    Built with plain string formatting rather than in the template: for 1,000 nodes x 8 GPUs the
    template engine took about a second, this takes a few tens of milliseconds (bench/dashboard.py).
    Every text that comes from the database is escaped here."""
    name_class = "fleet-node__name" if density == "large" else "fleet-node__name visually-hidden"
    # reverse() once, not per node: it is most of the cost otherwise.
    url_pattern = escape(reverse("dashboard-node", args=[PLACEHOLDER_ID]))
    items = []
    for node in pool.nodes:
        name = escape(node.name)
        state = escape(node.state_label.lower())
        url = url_pattern.replace(str(PLACEHOLDER_ID), str(node.node_id))
        down = "" if node.ready else f" ({state} node)"
        cells = "".join(
            f'<a class="fc l{gpu.level}" href="{url}#gpu-{gpu.gpu_id}" '
            f'aria-label="{name} gpu-{gpu.index}: {gpu.used} of {gpu.slots} slots used{down}"></a>'
            for gpu in node.gpus
        )
        items.append(
            f'<li class="fleet-node{"" if node.ready else " fleet-node--down"}" data-node="{name}" '
            f'data-free="{node.free}"><details open><summary class="fc fc--node l{node.level}">'
            f'<span class="{name_class}">{name}</span><span class="visually-hidden">, {state}: {node.used} of '
            f'{node.slots} slots used</span></summary><span class="fleet-gpus">{cells}</span></details></li>'
        )
    return mark_safe("".join(items))  # noqa: S308 - built from escaped text and our own markup only


@gzip_page  # ~1 MB of very repetitive HTML for 8,000 GPUs; sort and pool are validated, nothing is echoed
@login_required
@require_GET
def fleet(request: HttpRequest) -> HttpResponse:
    """The dense fleet overview: every GPU of every pool (or of ?pool=) as one cell coloured and filled
    by the share of its memory slots in use, nodes sorted by ?sort= (name, free, full)."""
    user = signed_in_user(request)
    sort = request.GET.get("sort", "name")
    sort = sort if sort in selectors.FLEET_SORTS else "name"
    pools = selectors.dashboard_fleet(user, sort=sort, pool_id=_int_or_none(request.GET.get("pool")))
    gpu_count = sum(pool.gpu_count for pool in pools)
    density = fleet_density(gpu_count)
    return render(
        request,
        "dashboard/fleet.html",
        {
            "sections": [FleetSection(pool, fleet_nodes_html(pool, density=density)) for pool in pools],
            "sort": sort,
            "sorts": FLEET_SORT_LABELS,
            "gpu_count": gpu_count,
            "node_count": sum(len(pool.nodes) for pool in pools),
            "density": density,
        },
    )


@login_required
@require_GET
def node_slots(request: HttpRequest, node_id: int) -> HttpResponse:
    """One node's GPUs drawn slot by slot: what a cell of the overview opens. A page; with
    ?fragment=1 only the drawing, which the overview's script shows in a dialog."""
    user = signed_in_user(request)
    try:
        node_page = selectors.dashboard_node(user, node_id)
    except Node.DoesNotExist as exc:
        raise Http404("No such node.") from exc
    if request.GET.get("fragment"):
        return render(request, "dashboard/_node_slots.html", {"node_page": node_page, "node": node_page.nodes[0]})
    asked = request.GET.get("history", "24h")
    period = asked if asked in history.PERIODS else "24h"
    chart = history.node_history(
        node_id=node_id, visible_tenants=selectors.visible_tenant_ids(user), period=period, now=timezone.now()
    )
    return render(
        request,
        "dashboard/node.html",
        {"node_page": node_page, "node": node_page.nodes[0], "history": chart, "history_periods": history.PERIODS},
    )
