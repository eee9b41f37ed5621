"""The live fleet dashboard: pools at a glance, each pool's nodes with every GPU drawn slot by slot,
and a Server-Sent Events stream that tells an open page which pool changed.

Views only parse the query string and call the dashboard selectors (allocations/selectors.py, last
section), which apply tenancy: members see other tenants' slices as "occupied".

The event stream (`events`) is built in allocations/live.py: what it tells each viewer, how little it
costs under ASGI (portal/asgi.py), and why it ends every 25 s under WSGI.
"""

from __future__ import annotations

import csv
from collections.abc import AsyncIterator, Iterator

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.handlers.asgi import ASGIRequest
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from allocations import live, selectors
from allocations.models import Node, NodePool
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


@login_required
@require_GET
def usage(request: HttpRequest) -> HttpResponse:
    """Showback: slice-hours and GPU-equivalent-hours per tenant and day (the user's tenants; all for staff)."""
    user = signed_in_user(request)
    days = _showback_days(request)
    return render(
        request,
        "dashboard/usage.html",
        {"showback": selectors.showback_for_user(user, days=days), "days": days, "day_choices": SHOWBACK_DAYS},
    )


@login_required
@require_GET
def usage_csv(request: HttpRequest) -> HttpResponse:
    """The showback as CSV: one row per tenant and day, then one total row per tenant."""
    user = signed_in_user(request)
    days = _showback_days(request)
    showback = selectors.showback_for_user(user, days=days)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="fatia-showback-{days}d.csv"'
    writer = csv.writer(response)
    writer.writerow(["day", "tenant", "gpu_equivalent_hours", "slice_hours"])
    for tenant in showback.tenants:
        for day, hours, slice_hours in zip(showback.days, tenant.daily, tenant.daily_slice_hours, strict=True):
            writer.writerow([day.isoformat(), tenant.tenant_name, f"{hours:.2f}", f"{slice_hours:.2f}"])
        total = [f"{tenant.gpu_equivalent_hours:.2f}", f"{tenant.slice_hours:.2f}"]
        writer.writerow(["total", tenant.tenant_name, *total])
    return response
