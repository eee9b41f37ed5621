"""The live event stream behind /dashboard/events/: Server-Sent Events that tell an open page what changed.

What a stream says is cut down to its viewer (selectors.FleetVersions.for_viewer): per pool an opaque hash of
the slot layout everyone sees and of the viewer's own tenants' requests there, and one hash of all the viewer's
tenants' requests (the request pages follow it). No counts, no times, nothing about other tenants beyond the
occupied slots the dashboard draws anyway. The page refetches what changed through the tenancy-scoped views.

Cost: the versions are read by seven aggregate queries, at most once a second per process, whatever the number
of open streams (VersionsCache). Under ASGI (portal.asgi) a stream is an async generator on the event loop: it
waits with asyncio.sleep, takes the versions from the cache without leaving the loop, and when they are stale
one read for every stream of the process runs on a single reader thread with its own database connection. So
an open stream holds no worker, no thread and no database connection between polls. When the client goes
away, Django's ASGI handler cancels the generator at its next await, and it ends.

Under WSGI (the test server, or gunicorn sync workers) the same events come from a plain generator that holds
its worker thread for the life of the stream: that is why every stream ends after FATIA_DASHBOARD_STREAM_SECONDS
(25 s by default) with a `retry:` hint, and the browser's EventSource reconnects by itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from django.db import DatabaseError, close_old_connections, connections

from allocations import selectors
from allocations.selectors import FleetVersions, ViewerVersions

logger = logging.getLogger(__name__)

RETRY_MS = 2000
# Under ASGI a client that left is noticed without writing to it, so an idle stream only sends a comment
# often enough to keep proxies from closing it.
ASYNC_KEEPALIVE_S = 15.0
# Versions are read at most this often per process.
MAX_AGE_S = 1.0

Scope = frozenset[int] | None


@dataclass
class _Read:
    fleet: FleetVersions
    at: float
    # Per viewer scope, cut down once per read however many streams share that scope.
    viewers: dict[Scope, ViewerVersions] = field(default_factory=dict)

    def for_viewer(self, scope: Scope) -> ViewerVersions:
        versions = self.viewers.get(scope)
        if versions is None:
            versions = self.viewers[scope] = self.fleet.for_viewer(scope)
        return versions


class VersionsCache:
    """The fleet's versions, shared by every stream of the process and read at most once per MAX_AGE_S.

    `get()` serves threads (WSGI streams, templates): the first caller after expiry reads, under a lock.
    `aget()` serves the event loop: a fresh read is returned without leaving the loop; a stale one is
    refreshed once for every waiting stream on the reader thread (its own database connection), and a
    stream cancelled while waiting (the client left) does not cancel the read for the others."""

    def __init__(self, max_age: float = MAX_AGE_S) -> None:
        self.max_age = max_age
        self._read: _Read | None = None
        self._lock = threading.Lock()
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fatia-live")
        self._inflight: asyncio.Future[_Read] | None = None

    def _fresh(self) -> _Read | None:
        read = self._read
        return read if read is not None and time.monotonic() - read.at < self.max_age else None

    def _load(self) -> _Read:
        try:
            fleet = selectors.fleet_versions()
        except DatabaseError:
            if self._read is None:
                raise
            # Keep the streams on what they had rather than dropping every one of them at once; retried
            # after max_age.
            logger.warning("live stream: could not read versions; keeping the last ones", exc_info=True)
            fleet = self._read.fleet
        read = _Read(fleet, time.monotonic())
        self._read = read
        return read

    def get(self) -> _Read:
        read = self._fresh()
        if read is not None:
            return read
        with self._lock:
            return self._fresh() or self._load()

    def _load_on_reader(self) -> _Read:
        # The reader thread is not a request thread: do what Django does around each request.
        close_old_connections()
        return self._load()

    async def aget(self) -> _Read:
        read = self._fresh()
        if read is not None:
            return read
        loop = asyncio.get_running_loop()
        if self._inflight is None or self._inflight.get_loop() is not loop:
            inflight = loop.run_in_executor(self._reader, self._load_on_reader)
            self._inflight = inflight

            def forget(done: asyncio.Future[_Read]) -> None:
                if self._inflight is done:
                    self._inflight = None

            inflight.add_done_callback(forget)
        return await asyncio.shield(self._inflight)

    def clear(self) -> None:
        """Forget the last read (tests that change the database and want the next poll to see it)."""
        self._read = None

    def close(self) -> None:
        """Close the reader thread's database connection (ASGI lifespan shutdown, test teardown)."""
        self._reader.submit(connections.close_all).result()


versions = VersionsCache()


def viewer_versions(scope: Scope) -> ViewerVersions:
    return versions.get().for_viewer(scope)


# --- Event ids: what a reconnecting browser had seen (Last-Event-ID), or what a page was rendered with ------


@dataclass(frozen=True, slots=True)
class Seen:
    pools: dict[int, str]
    requests: str | None


def encode_event_id(current: ViewerVersions) -> str:
    return ",".join([f"r:{current.requests}", *(f"{pk}:{v}" for pk, v in sorted(current.pools.items()))])


def decode_event_id(value: str) -> Seen | None:
    """What a Last-Event-ID header (or a page's `since`) says the client had; None when it says nothing.
    Malformed parts are skipped: pool ids are ASCII digits only (str.isdigit also accepts "²" or "١",
    which int() refuses), of a sane length."""
    if not value:
        return None
    pools: dict[int, str] = {}
    requests: str | None = None
    for part in value.split(",")[:10_000]:
        key, _, version = part.partition(":")
        version = version[:64]
        if key == "r":
            requests = version
        elif key.isascii() and key.isdigit() and len(key) <= 18:
            pools[int(key)] = version
    return Seen(pools, requests)


# --- The events -------------------------------------------------------------------------------------------


def _event(name: str, data: object) -> str:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def _differences(before: ViewerVersions | Seen, after: ViewerVersions) -> str:
    """`changed` for each pool whose version differs (also pools that appeared or went away), `requests` when
    the viewer's requests changed."""
    pools = sorted(pk for pk in before.pools.keys() | after.pools.keys() if before.pools.get(pk) != after.pools.get(pk))
    out = "".join(_event("changed", {"pool": pk, "version": after.pools.get(pk, "")}) for pk in pools)
    if before.requests != after.requests:
        out += _event("requests", {"version": after.requests})
    return out


def _opening(current: ViewerVersions, seen: Seen | None) -> list[str]:
    """`retry:`; what changed since `seen` (a reconnect or a rendered page), at once; then the versions,
    with the event id the browser sends back when it reconnects."""
    chunks = [f"retry: {RETRY_MS}\n\n"]
    if seen is not None:
        missed = _differences(seen, current)
        if missed:
            chunks.append(missed)
    versions_data = {"pools": {str(k): v for k, v in current.pools.items()}, "requests": current.requests}
    chunks.append(f"id: {encode_event_id(current)}\n" + _event("versions", versions_data))
    return chunks


BYE = _event("bye", {})
IDLE = ": idle\n\n"  # a comment line: EventSource ignores it, proxies see traffic


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class _SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def event_stream(
    *, scope: Scope, duration: float, interval: float, seen: Seen | None = None, clock: Clock | None = None
) -> Iterator[str]:
    """The stream for a WSGI worker: the opening, then every `interval` seconds what changed for this viewer
    (or an idle comment, so a client that left is noticed at the next write), until `duration` has passed;
    then `bye` (the browser reconnects after `retry` ms)."""
    clock = clock or _SystemClock()
    current = viewer_versions(scope)
    yield from _opening(current, seen)
    deadline = clock.monotonic() + duration
    while clock.monotonic() < deadline:
        clock.sleep(interval)
        latest = viewer_versions(scope)
        changes = _differences(current, latest)
        if changes:
            yield f"id: {encode_event_id(latest)}\n" + changes
            current = latest
        else:
            yield IDLE
    yield BYE


async def async_event_stream(
    *, scope: Scope, duration: float, interval: float, seen: Seen | None = None
) -> AsyncIterator[str]:
    """event_stream for an ASGI server: the same events, but it holds no thread. It waits with asyncio.sleep
    and reads the shared versions with VersionsCache.aget; idle comments go out every ASYNC_KEEPALIVE_S only.
    Django would buffer a synchronous iterator whole under ASGI (and an asynchronous one under WSGI), hence
    two of them."""
    current = (await versions.aget()).for_viewer(scope)
    for chunk in _opening(current, seen):
        yield chunk
    loop = asyncio.get_running_loop()
    deadline = loop.time() + duration
    quiet_since = loop.time()
    while loop.time() < deadline:
        await asyncio.sleep(min(interval, max(deadline - loop.time(), 0)))
        latest = (await versions.aget()).for_viewer(scope)
        changes = _differences(current, latest)
        if changes:
            yield f"id: {encode_event_id(latest)}\n" + changes
            current = latest
            quiet_since = loop.time()
        elif loop.time() - quiet_since >= ASYNC_KEEPALIVE_S:
            yield IDLE
            quiet_since = loop.time()
    yield BYE
