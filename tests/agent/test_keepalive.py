"""The agent keeps one HTTP connection alive per thread (package `ingest`): reports every few seconds pay no new
handshake, a connection the portal closed while idle is replaced without losing the request, and a portal that
closes after each answer (HTTP/1.0, gunicorn's sync workers) still gets every request."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agent.sender import HttpTransport


class CountingPortal:
    """Answers every POST 202 over HTTP/1.1 (or 1.0), counting the connections it accepted and the requests."""

    def __init__(self, protocol: str) -> None:
        self.connections = 0
        self.requests: list[dict[str, Any]] = []
        self.open: list[Any] = []  # the server side of each connection, to close one from here
        portal = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = protocol

            def setup(self) -> None:
                super().setup()
                portal.connections += 1
                portal.open.append(self.connection)

            def do_POST(self) -> None:  # noqa: N802 -- http.server's name
                portal.requests.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(202)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close_idle_connections(self) -> None:
        """As a server's keep-alive timeout does: the client is not told until it sends."""
        for connection in self.open:
            connection.shutdown(2)
        self.open.clear()


@pytest.fixture
def portal(request: pytest.FixtureRequest) -> Iterator[CountingPortal]:
    started = CountingPortal(getattr(request, "param", "HTTP/1.1"))
    yield started
    started.server.shutdown()
    started.server.server_close()


def test_reports_share_one_connection(portal: CountingPortal) -> None:
    transport = HttpTransport(portal.url, "fagent_a_b")
    statuses = [transport.post("/api/v1/agent/telemetry/", {"seq": k}) for k in range(5)]
    assert statuses == [202] * 5
    assert portal.connections == 1
    assert [r["seq"] for r in portal.requests] == [0, 1, 2, 3, 4]


def test_a_connection_the_portal_closed_while_idle_is_replaced_and_the_report_sent_once(
    portal: CountingPortal,
) -> None:
    transport = HttpTransport(portal.url, "fagent_a_b")
    assert transport.post("/api/v1/agent/telemetry/", {"seq": 1}) == 202
    portal.close_idle_connections()
    assert transport.post("/api/v1/agent/telemetry/", {"seq": 2}) == 202
    assert portal.connections == 2
    assert [r["seq"] for r in portal.requests] == [1, 2]


@pytest.mark.parametrize("portal", ["HTTP/1.0"], indirect=True)
def test_a_portal_that_closes_after_each_answer_gets_every_report(portal: CountingPortal) -> None:
    transport = HttpTransport(portal.url, "fagent_a_b")
    assert [transport.post("/api/v1/agent/telemetry/", {"seq": k}) for k in range(3)] == [202] * 3
    assert portal.connections == 3


def test_each_thread_has_its_own_connection(portal: CountingPortal) -> None:
    transport = HttpTransport(portal.url, "fagent_a_b")
    transport.post("/api/v1/agent/telemetry/", {"seq": 1})
    other = threading.Thread(target=lambda: transport.post("/api/v1/agent/telemetry/", {"seq": 2}))
    other.start()
    other.join()
    transport.post("/api/v1/agent/telemetry/", {"seq": 3})
    assert portal.connections == 2
    assert len(portal.requests) == 3
