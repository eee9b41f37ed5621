"""The node's credential from its pod's ServiceAccount token, for agents run by the chart's DaemonSet.

The kubelet projects a short-lived token (audience ``fatia-agent``, bound to the pod) into the pod and refreshes it;
the agent trades it for a node credential at ``POST /api/v1/agent/bootstrap/`` (the portal asks the API server whose
token it is, and that its pod runs on this node). The credential stays in memory only. :class:`BootstrapTransport`
bootstraps before its first request and again when the portal answers 401 (the credential was revoked, or another
bootstrap of this node rotated it); a bootstrap that fails is a :class:`~agent.sender.TransportError`, so the
sender's back-off paces the retries.
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.sender import HttpTransport, TransportError

log = logging.getLogger("agent.bootstrap")

BOOTSTRAP_PATH = "/api/v1/agent/bootstrap/"


def request_credential(base_url: str, node: str, token_file: str, timeout_s: float = 10.0) -> str:
    """Ask the portal for this node's credential; returns it. Raises TransportError with the portal's reason."""
    try:
        token = Path(token_file).read_text(encoding="utf-8").strip()  # read afresh: the kubelet rotates it
    except OSError as exc:
        raise TransportError(f"cannot read the ServiceAccount token {token_file}: {exc.strerror}") from None
    request = urllib.request.Request(  # noqa: S310 -- HttpTransport checked the scheme
        base_url.rstrip("/") + BOOTSTRAP_PATH,
        data=json.dumps({"node": node, "token": token}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
            answer: Any = json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        raise TransportError(f"bootstrap refused (HTTP {exc.code}): {_reason(exc.read())}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
        raise TransportError(f"bootstrap failed: {exc or type(exc).__name__}") from exc
    credential = answer.get("token") if isinstance(answer, dict) else None
    if not isinstance(credential, str) or not credential:
        raise TransportError("bootstrap answer holds no credential")
    return credential


def _reason(body: bytes) -> str:
    try:
        answer = json.loads(body)
    except ValueError:
        return body[:200].decode(errors="replace")
    if isinstance(answer, dict):
        return str(answer.get("errors") or answer.get("detail") or answer)
    return str(answer)


class BootstrapTransport:
    """An :class:`HttpTransport` whose credential comes from bootstrapping, renewed once on a 401."""

    def __init__(
        self,
        base_url: str,
        node: str,
        token_file: str,
        timeout_s: float = 10.0,
        fetch: Callable[[str, str, str, float], str] = request_credential,
    ) -> None:
        self.http = HttpTransport(base_url, "", timeout_s)
        self.node = node
        self.token_file = token_file
        self.fetch = fetch
        self.bootstraps = 0
        self._lock = threading.Lock()

    def _credential(self, *, refused: str | None = None) -> str:
        """The credential to use. ``refused`` is one the portal has just answered 401 to: it is replaced, unless
        another thread (the sender and the command poller share this transport) has replaced it already; two
        renewals at once would each revoke the other's credential."""
        with self._lock:
            if refused is not None and self.http.token == refused:
                self.http.token = ""
            if not self.http.token:
                self.http.token = self.fetch(self.http.base_url, self.node, self.token_file, self.http.timeout_s)
                self.bootstraps += 1
                log.info("bootstrapped this node's credential from the ServiceAccount token")
            return self.http.token

    def post(self, path: str, body: dict[str, Any]) -> int:
        return self.post_answer(path, body)[0]

    def post_answer(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        used = self._credential()
        status, answer = self.http.post_answer(path, body)
        if status == 401:
            log.warning("the portal refused this node's credential (HTTP 401); bootstrapping a new one")
            self._credential(refused=used)
            status, answer = self.http.post_answer(path, body)
        return status, answer

    def get(self, path: str) -> tuple[int, Any]:
        used = self._credential()
        status, answer = self.http.get(path)
        if status == 401:
            log.warning("the portal refused this node's credential (HTTP 401); bootstrapping a new one")
            self._credential(refused=used)
            status, answer = self.http.get(path)
        return status, answer
