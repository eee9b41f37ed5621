"""The sender and the command poller share one BootstrapTransport: a revoked credential is renewed once, for both."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agent.bootstrap import BootstrapTransport


class _Portal(http.server.BaseHTTPRequestHandler):
    """Accepts only the newest credential; a request with an older one waits for a second 401 to arrive, so two
    threads hold the same refused credential at once."""

    current = ""
    refused = threading.Barrier(2, timeout=10)

    def _answer(self) -> None:
        ok = self.headers.get("Authorization") == f"Bearer {type(self).current}"
        if not ok and self.headers.get("Authorization") == "Bearer cred-1":
            type(self).refused.wait()
        body = json.dumps({"commands": []} if ok else {"detail": "revoked"}).encode()
        self.send_response(200 if ok else 401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._answer()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def portal() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Portal)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_two_threads_refused_the_same_credential_bootstrap_once_and_both_go_on(portal: str) -> None:
    # given: a transport whose first credential the portal has revoked since (a rotation)
    issued: list[str] = []

    def fetch(base_url: str, node: str, token_file: str, timeout_s: float) -> str:
        issued.append(f"cred-{len(issued) + 1}")
        _Portal.current = issued[-1] if len(issued) > 1 else "cred-0"
        return issued[-1]

    transport = BootstrapTransport(portal, "gpu-node-1", "/unused", fetch=fetch)
    answers: dict[str, Any] = {}

    # when: the sender (POST) and the command poller (GET) both get a 401 for it at the same moment
    sender = threading.Thread(target=lambda: answers.update(post=transport.post("/api/v1/agent/telemetry/", {})))
    poller = threading.Thread(target=lambda: answers.update(get=transport.get("/api/v1/agent/commands/?node=n")))
    sender.start()
    poller.start()
    sender.join(15)
    poller.join(15)

    # then: one renewal, not two that would revoke each other, and both requests went through with it
    assert issued == ["cred-1", "cred-2"]
    assert transport.bootstraps == 2
    assert answers == {"post": 200, "get": (200, {"commands": []})}
