"""The production server (portal/asgi.py): open event streams cost no worker, no thread and no database
connection, ordinary requests are answered while they are open, and a stream whose client left ends.

The first test starts the real server the README names (gunicorn with one uvicorn worker) on loopback against
the test database; the others drive portal.asgi's handler in-process through the ASGI interface.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from allocations import live, services
from portal.asgi import PortalASGIHandler
from tests.conftest import World

ROOT = Path(__file__).resolve().parents[1]
APP_NAME = "fatia-asgi-test"


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def asgi_server(workers: int) -> Iterator[tuple[int, int]]:
    """gunicorn -k uvicorn_worker.UvicornWorker portal.asgi:application on the test database; (port, pid)."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    port = free_port()
    env = {
        **os.environ,
        # application_name tells the server's database connections apart from the test's own.
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}?application_name={APP_NAME}",
        "PYTHONPATH": str(ROOT),
        # One lane: the thread and connection counts below are then exact.
        "FATIA_ASGI_THREADS": "1",
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "portal.asgi:application", "--workers", str(workers)]
        + ["--worker-class", "uvicorn_worker.UvicornWorker", "--bind", f"127.0.0.1:{port}", "--log-level", "warning"],
        cwd=ROOT,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, "the server exited"
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert time.monotonic() < deadline, "the server did not listen within 60 s"
            time.sleep(0.2)
        yield port, server.pid
    finally:
        server.terminate()
        server.wait(timeout=60)


def open_stream(port: int, cookie: str) -> socket.socket:
    """An event stream, read until its `versions` event (so it is open and has been served). The timeout is
    generous for an answer that takes milliseconds, and shorter than a stream's 25 s life, so a server that
    serves one stream at a time per worker (gunicorn sync workers) fails here instead of answering late."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=20)
    sock.sendall(f"GET /dashboard/events/ HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: sessionid={cookie}\r\n\r\n".encode())
    received = b""
    while b"event: versions" not in received:
        chunk = sock.recv(65536)
        assert chunk, f"the stream closed: {received!r}"
        received += chunk
    assert received.startswith(b"HTTP/1.1 200 ")
    assert b"content-type: text/event-stream" in received.lower()
    return sock


def get(port: int, path: str, cookie: str) -> tuple[int, bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: sessionid={cookie}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        response = b""
        while chunk := sock.recv(65536):
            response += chunk
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def worker_threads(master_pid: int) -> list[int]:
    children = Path(f"/proc/{master_pid}/task/{master_pid}/children").read_text().split()
    return [
        int(line.split()[1])
        for child in children
        for line in Path(f"/proc/{child}/status").read_text().splitlines()
        if line.startswith("Threads:")
    ]


def server_connections() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [APP_NAME])
        return int(cursor.fetchone()[0])


def test_eight_open_streams_on_one_worker_leave_it_free_for_other_requests(transactional_db, world: World):
    # given: the production server with a single worker (issue 9: under gunicorn sync workers, each open
    # dashboard held a worker for 25 s, so with one worker the second request waited for the first to end)
    services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="1g.10gb",
        count=1,
        lease_hours=8,
        purpose="notebook",
        actor=world.alice,
    )
    cookies = [session_cookie(user) for user in (world.alice, world.charlie, world.root)]
    with asgi_server(workers=1) as (port, pid):
        # when: eight streams are open (more than workers, threads or connections)
        streams = [open_stream(port, cookies[n % 3]) for n in range(8)]
        try:
            status, body = get(port, "/api/v1/allocations/", cookies[0])
            page_status, page = get(port, "/", cookies[0])
            threads = worker_threads(pid)
            connections = server_connections()
        finally:
            for stream in streams:
                stream.close()
    # then: both answered while the streams were open, by a worker that holds its event loop, one thread
    # for requests and one for the streams' shared reads; one database connection for each of those two
    assert status == 200
    assert json.loads(body)["count"] == 1
    assert page_status == 200
    assert b"My requests" in page
    assert threads == [3]
    assert connections == 2


class FakeBrowser:
    """One ASGI connection: sends the request, collects the response, and leaves when told to."""

    def __init__(self, path: str, cookie: str) -> None:
        self.scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"127.0.0.1"), (b"cookie", f"sessionid={cookie}".encode())],
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 80),
        }
        self.status = 0
        self.body = b""
        self.requested = False
        self.opened = asyncio.Event()
        self.leave = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        if not self.requested:
            self.requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self.leave.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        else:
            self.body += message.get("body", b"")
            if b"event: versions" in self.body or not message.get("more_body", False):
                self.opened.set()


@pytest.fixture
def handler(transactional_db, settings) -> Iterator[PortalASGIHandler]:
    settings.FATIA_DASHBOARD_STREAM_SECONDS = 3600  # only the client leaving ends a stream here
    live.versions.clear()
    app = PortalASGIHandler(lanes=1)
    yield app
    asyncio.run(app.aclose())  # the lane's and the stream reader's database connections
    live.versions.clear()


def test_a_stream_ends_when_its_client_leaves(world: World, handler: PortalASGIHandler):
    # given
    browser = FakeBrowser("/dashboard/events/", session_cookie(world.alice))

    async def scenario() -> None:
        served = asyncio.create_task(handler(browser.scope, browser.receive, browser.send))
        await asyncio.wait_for(browser.opened.wait(), timeout=30)
        # when: the browser goes away
        browser.leave.set()
        # then: the server's side of the stream finishes (it would run for an hour otherwise)
        await asyncio.wait_for(served, timeout=30)

    asyncio.run(scenario())
    assert browser.status == 200
    assert b"event: versions" in browser.body
    assert b"event: bye" not in browser.body


def test_twenty_open_streams_add_no_thread_per_stream(world: World, handler: PortalASGIHandler):
    # given
    cookie = session_cookie(world.charlie)
    before = set(threading.enumerate())
    browsers = [FakeBrowser("/dashboard/events/", cookie) for _ in range(20)]
    page = FakeBrowser("/api/v1/allocations/", cookie)

    async def scenario() -> set[threading.Thread]:
        served = [asyncio.create_task(handler(b.scope, b.receive, b.send)) for b in browsers]
        await asyncio.wait_for(asyncio.gather(*(b.opened.wait() for b in browsers)), timeout=60)
        # when: an ordinary request comes while they are open
        await asyncio.wait_for(handler(page.scope, page.receive, page.send), timeout=30)
        threads = set(threading.enumerate())
        for b in browsers:
            b.leave.set()
        await asyncio.wait_for(asyncio.gather(*served), timeout=30)
        return threads

    during = asyncio.run(scenario())
    # then: it was answered, and the only new threads are the handler's lane and the streams' shared reader
    assert page.status == 200
    assert all(b.status == 200 for b in browsers)
    new = sorted(t.name.rsplit("_", 1)[0] for t in during - before)
    expected = ["fatia-lane-0"] + ([] if any(t.name.startswith("fatia-live") for t in before) else ["fatia-live"])
    assert new == expected
