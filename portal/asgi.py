"""ASGI entry point: in production the server of the live event streams (README: the proxy sends it
/dashboard/events/, sync gunicorn workers on portal.wsgi serve everything else):

    gunicorn -k uvicorn_worker.UvicornWorker -w 1 portal.asgi:application

It serves the whole portal just as well, only less quickly for the ordinary views (docs/api-performance.md).

Why not Django's stock ASGIHandler: every view of the portal is synchronous. Stock Django runs each request's
synchronous middleware and view on a fresh thread of its own (asgiref's per-request ThreadSensitiveContext),
hopping between that thread and the event loop around every middleware, and each fresh thread opens its own
database connection instead of reusing a persistent one. A plain request then costs several times what it
costs under WSGI (docs/api-performance.md), and an open event stream keeps its thread and its database
connection for its whole life.

PortalASGIHandler keeps ASGI for what it is good at, many long-lived streams on one event loop, and serves
everything else the way a WSGI worker does: the whole middleware chain and the view run as one call, on one of
a few long-lived threads per process ("lanes"), each with its persistent database connection. A view that
returns a streaming response with an asynchronous iterator (the live event stream, allocations/live.py) gives
its thread back as soon as it has returned; the events are then sent from the event loop.

There are FATIA_ASGI_THREADS lanes per process (2). Each request is pinned to one lane for its thread-sensitive
work (middleware, view, the request_started and request_finished signals that close stale connections), the
lane with the fewest requests in their synchronous part. asgiref asks that an executor serve one
ThreadSensitiveContext at a time; here several requests share a lane, which is safe because each request's
synchronous work is a single call that never waits on another request (no async_to_sync bridge to a
coroutine that needs the same lane).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from typing import Any

import django
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.base import BaseHandler
from django.http import FileResponse, HttpRequest, HttpResponseBase
from django.urls import set_script_prefix

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django.setup(set_prefix=False)

Scope = dict[str, Any]


class _Lane:
    """One long-lived thread for synchronous work, and how many requests are in their synchronous part on it."""

    def __init__(self, number: int) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"fatia-lane-{number}")
        self.busy = 0


_lane: ContextVar[_Lane] = ContextVar("fatia_lane")


class PortalASGIHandler(ASGIHandler):
    def __init__(self, lanes: int = 1) -> None:
        BaseHandler.__init__(self)
        # The synchronous middleware chain, as under WSGI: run whole on a lane by handle().
        self.load_middleware(is_async=False)
        self.lanes = [_Lane(n) for n in range(max(lanes, 1))]

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        lane = min(self.lanes, key=lambda lane: lane.busy)
        _lane.set(lane)
        async with ThreadSensitiveContext(executor=lane.executor):
            await self.handle(scope, receive, send)

    async def handle(self, scope: Scope, receive: Any, send: Any) -> None:
        """Django's ASGIHandler.handle, with the synchronous part of a request in one call on its lane.

        Django's version hops to a thread and back for request_started, for the response and for
        response.close(), and races every response against a disconnect listener. Here an ordinary response
        is made and closed in one call on the lane (as a WSGI worker does) and then sent; only a streaming
        response is sent while listening for the client leaving, which cancels the stream."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        request, error_response = self.create_request(scope, body_file)
        lane = _lane.get()
        lane.busy += 1
        try:
            response = await sync_to_async(self._respond, thread_sensitive=True)(scope, request, error_response)
        finally:
            lane.busy -= 1
        try:
            if response.streaming:
                await self._stream(response, receive, send)
            else:
                await self.send_response(response, send)
        finally:
            body_file.close()

    def _respond(
        self, scope: Scope, request: HttpRequest | None, error_response: HttpResponseBase | None
    ) -> HttpResponseBase:
        """On the request's lane: request_started, the response, and closing it (request_finished, which
        closes a stale database connection) unless it streams: its content is already in memory."""
        signals.request_started.send(sender=self.__class__, scope=scope)
        # create_request returns a request, or else an error response.
        response = self.get_response(request) if request is not None else error_response
        if response is None:
            raise RuntimeError("create_request returned neither a request nor a response")
        response._handler_class = self.__class__  # type: ignore[attr-defined]  # as ASGIHandler does
        if isinstance(response, FileResponse):
            response.block_size = self.chunk_size
        if not response.streaming:
            response.close()
        return response

    async def _stream(self, response: HttpResponseBase, receive: Any, send: Any) -> None:
        """Send a streaming response until it ends or the client leaves (then the stream's iterator is
        cancelled at its next await and closed), then close it on the lane."""
        sending = asyncio.create_task(self.send_response(response, send))
        listening = asyncio.create_task(self.listen_for_disconnect(receive))
        await asyncio.wait([sending, listening], return_when=asyncio.FIRST_COMPLETED)
        for task in (listening, sending):
            if not task.done():
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, RequestAborted):
                await task
        await sync_to_async(response.close, thread_sensitive=True)()

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def aclose(self) -> None:
        """Close every lane's database connection and the live stream's (on shutdown)."""
        from django.db import connections

        from allocations import live

        for lane in self.lanes:
            await sync_to_async(connections.close_all, thread_sensitive=False, executor=lane.executor)()
        await sync_to_async(live.versions.close, thread_sensitive=False)()


# Lanes per process (FATIA_ASGI_THREADS, 2 by default). One would make a worker serve one request at a time,
# like a sync worker; but a client keeps its connection to the worker that accepted it (keep-alive), and with
# few connections some workers got two or three times as many as others: with one lane those queued while
# others idled, and bench/api.py measured half the throughput of gunicorn's sync workers (docs/api-performance.md).
application = PortalASGIHandler(lanes=settings.FATIA_ASGI_THREADS)
