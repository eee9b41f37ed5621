"""The live fleet dashboard: pools at a glance, each pool's nodes with every GPU drawn slot by slot,
and a Server-Sent Events stream that tells an open page which pool changed.

Views only parse the query string and call the dashboard selectors (allocations/selectors.py, last
section), which apply tenancy: members see other tenants' slices as "occupied".

The event stream is bounded: it ends after FATIA_DASHBOARD_STREAM_SECONDS (25 s by default) with a
`retry:` hint, so the browser's EventSource reconnects by itself. That keeps a gunicorn sync worker
from being held for ever; under an ASGI server (uvicorn portal.asgi:application) the same view streams
too. The database is asked for the pools' versions at most once a second per process, whatever the
number of open pages (a one-second cache shared by every stream of the process).
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Protocol

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.handlers.asgi import ASGIRequest
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from allocations import selectors
from allocations.models import Node, NodePool
from tenants.views import signed_in_user

VERSIONS_CACHE_KEY = "dashboard:pool-versions"
RETRY_MS = 2000


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


def current_versions() -> dict[int, str]:
    """Per-pool versions, read from the database at most once a second per process."""
    versions = cache.get(VERSIONS_CACHE_KEY)
    if versions is None:
        versions = selectors.dashboard_versions()
        cache.set(VERSIONS_CACHE_KEY, versions, timeout=1)
    return dict(versions)


def changed_pools(before: dict[int, str], after: dict[int, str]) -> list[int]:
    """Pools whose version differs, including pools that appeared or went away."""
    return sorted(pk for pk in before.keys() | after.keys() if before.get(pk) != after.get(pk))


def _event(name: str, data: object) -> str:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def version_hashes(versions: dict[int, str]) -> dict[int, str]:
    """A short hash per pool version: what goes into the event id, so a reconnecting browser's
    Last-Event-ID says what it had seen."""
    return {pk: hashlib.blake2s(v.encode(), digest_size=6).hexdigest() for pk, v in versions.items()}


def encode_event_id(versions: dict[int, str]) -> str:
    return ",".join(f"{pk}:{digest}" for pk, digest in sorted(version_hashes(versions).items()))


def decode_event_id(value: str) -> dict[int, str] | None:
    """The per-pool hashes of a Last-Event-ID header; None when there is none (a first connection)."""
    if not value:
        return None
    seen: dict[int, str] = {}
    for part in value.split(",")[:10_000]:
        pk, _, digest = part.partition(":")
        if pk.isdigit():
            seen[int(pk)] = digest
    return seen


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


def event_stream(
    *, duration: float, interval: float, seen: dict[int, str] | None = None, clock: Clock | None = None
) -> Iterator[str]:
    """`retry:` and the current versions first, then `changed` events for the pools that changed,
    checked every `interval` seconds until `duration` has passed, then `bye` (the browser reconnects
    after `retry` ms). `seen` holds the hashes a reconnecting client had (Last-Event-ID): pools that
    changed while it was away are announced at once."""
    clock = clock or _SystemClock()
    yield f"retry: {RETRY_MS}\n\n"
    versions = current_versions()
    if seen is not None:
        hashes = version_hashes(versions)
        missed = sorted(pk for pk in hashes.keys() | seen.keys() if hashes.get(pk) != seen.get(pk))
        yield "".join(_event("changed", {"pool": pk, "version": versions.get(pk, "")}) for pk in missed)
    yield f"id: {encode_event_id(versions)}\n" + _event("versions", {str(k): v for k, v in versions.items()})
    deadline = clock.monotonic() + duration
    while clock.monotonic() < deadline:
        clock.sleep(interval)
        latest = current_versions()
        changed = changed_pools(versions, latest)
        if changed:
            events_ = "".join(_event("changed", {"pool": pk, "version": latest.get(pk, "")}) for pk in changed)
            yield f"id: {encode_event_id(latest)}\n" + events_
            versions = latest
        else:
            # A comment line: keeps proxies from closing an idle connection; EventSource ignores it.
            yield ": idle\n\n"
    yield _event("bye", {})


class _SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


async def async_event_stream(
    *, duration: float, interval: float, seen: dict[int, str] | None = None
) -> AsyncIterator[str]:
    """event_stream for an ASGI server (uvicorn portal.asgi:application): the same events, but it
    waits with asyncio.sleep, so an open page holds no thread between polls. Django would buffer a
    synchronous iterator whole under ASGI (and an asynchronous one under WSGI), hence two of them."""
    versions_now = sync_to_async(current_versions)
    yield f"retry: {RETRY_MS}\n\n"
    versions = await versions_now()
    if seen is not None:
        hashes = version_hashes(versions)
        missed = sorted(pk for pk in hashes.keys() | seen.keys() if hashes.get(pk) != seen.get(pk))
        yield "".join(_event("changed", {"pool": pk, "version": versions.get(pk, "")}) for pk in missed)
    yield f"id: {encode_event_id(versions)}\n" + _event("versions", {str(k): v for k, v in versions.items()})
    loop = asyncio.get_running_loop()
    deadline = loop.time() + duration
    while loop.time() < deadline:
        await asyncio.sleep(interval)
        latest = await versions_now()
        changed = changed_pools(versions, latest)
        if changed:
            events_ = "".join(_event("changed", {"pool": pk, "version": latest.get(pk, "")}) for pk in changed)
            yield f"id: {encode_event_id(latest)}\n" + events_
            versions = latest
        else:
            yield ": idle\n\n"
    yield _event("bye", {})


@login_required
@require_GET
def events(request: HttpRequest) -> StreamingHttpResponse:
    """Server-Sent Events: `versions` on connect, then `changed` {pool, version} when a pool changes.

    Carries no tenant data at all (pool ids and opaque versions only); the page refetches the changed
    pool's fragments through the tenancy-scoped views above."""
    signed_in_user(request)
    duration = float(getattr(settings, "FATIA_DASHBOARD_STREAM_SECONDS", 25))
    interval = float(getattr(settings, "FATIA_DASHBOARD_POLL_SECONDS", 1))
    seen = decode_event_id(request.headers.get("Last-Event-ID", ""))
    stream: Iterator[str] | AsyncIterator[str]
    if isinstance(request, ASGIRequest):
        stream = async_event_stream(duration=duration, interval=interval, seen=seen)
    else:
        stream = event_stream(duration=duration, interval=interval, seen=seen)
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
