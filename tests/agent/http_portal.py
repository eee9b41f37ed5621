"""A tiny local HTTP server standing in for the portal's agent endpoints: it records what arrives and answers
with whatever status the test sets. The agent's own code runs unchanged against it."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RecordingPortal:
    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.requests: list[tuple[str, dict[str, Any], str]] = []
        self.status = 201
        self.answer = b"{}"  # the body of every POST's answer
        self.on_request: Callable[[str, dict[str, Any]], None] | None = None
        self.hold: threading.Event | None = None  # set: requests wait until it is set
        self.garble = 0  # this many next requests get a malformed HTTP answer (the connection breaks mid-answer)
        self.commands: list[dict[str, Any]] = []  # what GET /api/v1/agent/commands/ answers
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        portal = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 -- http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if portal.hold is not None:
                    portal.hold.wait(30)
                if portal.garble:
                    portal.garble -= 1
                    self.wfile.write(b"NOT HTTP\r\n\r\n")
                    self.close_connection = True
                    return
                portal.requests.append((self.path, body, self.headers.get("Authorization", "")))
                status, answer = portal.status, portal.answer  # this request's answer: what was set before it came
                # Before the answer goes out: the agent may send its next request the moment it has this answer, and
                # that request must see what on_request changes (run after the answer, it raced the next request).
                if portal.on_request is not None:
                    portal.on_request(self.path, body)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def do_GET(self) -> None:  # noqa: N802 -- http.server's name
                portal.requests.append((self.path, {}, self.headers.get("Authorization", "")))
                body = json.dumps({"commands": portal.commands}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def samples(self) -> list[dict[str, Any]]:
        return [s for path, body, _ in self.requests if path.endswith("/telemetry/") for s in body["samples"]]


class Proxy:
    """A pass-through HTTP proxy in front of a real server, which a test can take away and bring back on the same
    port (the agent then sees a refused connection, as when the portal goes down), or have forward a request and
    then drop the answer (the portal did the work; the agent never heard)."""

    def __init__(self, target: str) -> None:
        self.target = target.removeprefix("http://")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.swallow = 0  # this many next requests are forwarded, and their answer is lost
        self.paths: list[tuple[str, str, int]] = []  # (method, path, status the server gave)
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                import http.client

                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                connection = http.client.HTTPConnection(proxy.target, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                connection.request(self.command, self.path, body=body, headers=headers)
                answer = connection.getresponse()
                data = answer.read()
                connection.close()
                proxy.paths.append((self.command, self.path, answer.status))
                if proxy.swallow:
                    proxy.swallow -= 1
                    self.close_connection = True
                    return  # no answer at all: the client sees the connection close
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("connection", "transfer-encoding", "content-length", "date", "server"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _forward  # noqa: N815 -- http.server's names

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
