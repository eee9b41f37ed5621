"""Ships what the sampler buffers to the portal, on its own thread.

The sampler only ever calls :meth:`Sender.put_sample` / :meth:`Sender.put_inventory`: a short lock and an append,
so NVML sampling never waits on the network. The buffer is bounded: past ``capacity`` samples the oldest is
dropped and counted (the count travels with the next batch, so the portal knows what it missed). A batch leaves the
buffer only when the portal has answered 2xx; any other outcome keeps it, so a lost connection loses nothing within
the bound. Failures back off exponentially up to ``backoff_cap`` seconds, with jitter so that a fleet of agents does
not return all at once when the portal comes back.

Results of MIG commands (``put_result``) go first, then the inventory, then telemetry: the portal learns what
changed before it reads the layout that follows. They wait in an :class:`~agent.outbox.Outbox` until a 2xx.
"""

from __future__ import annotations

import collections
import http.client
import itertools
import json
import logging
import random
import ssl
import threading
import urllib.parse
from collections.abc import Callable
from typing import Any, Protocol

from agent.outbox import Outbox
from agent.payloads import telemetry_payload

log = logging.getLogger("agent.sender")

INVENTORY_PATH = "/api/v1/agent/inventory/"
TELEMETRY_PATH = "/api/v1/agent/telemetry/"
RESULT_PATH = "/api/v1/agent/commands/{id}/result/"
# Answers to a result that resending cannot change: malformed, no such command, or one the portal has settled
# otherwise (cancelled, or a different outcome recorded). The next inventory tells the portal what is there.
_FINAL_REFUSALS = (400, 404, 409, 413)


class TransportError(Exception):
    """The portal could not be reached (refused, reset, timed out)."""


class Transport(Protocol):
    def post(self, path: str, body: dict[str, Any]) -> int: ...

    def post_answer(self, path: str, body: dict[str, Any]) -> tuple[int, Any]: ...

    def get(self, path: str) -> tuple[int, Any]: ...


class HttpTransport:
    """JSON over HTTP(S) with the node's credential; ``post`` returns the status code.

    One kept-alive connection per thread (the sender's, the command poller's): a report every few seconds would
    otherwise pay a TCP (and TLS) handshake each time, on the agent and on the portal's side. A connection the portal
    closed while idle is noticed on the next request, which is sent again once on a fresh one; every agent request
    may be repeated (samples by boot id and sequence, command results by command id).
    """

    def __init__(self, base_url: str, token: str, timeout_s: float = 10.0) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"the portal URL must start with http:// or https://, not {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        parts = urllib.parse.urlsplit(self.base_url)
        self._https = parts.scheme == "https"
        self._netloc = parts.netloc
        self._path = parts.path
        self._local = threading.local()

    def post(self, path: str, body: dict[str, Any]) -> int:
        return self.post_answer(path, body)[0]

    def post_answer(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        """The status and the JSON answer (None when it is not JSON)."""
        return _json(*self._request("POST", path, json.dumps(body, separators=(",", ":")).encode()))

    def get(self, path: str) -> tuple[int, Any]:
        """The status and the JSON body (None when it is not JSON)."""
        return _json(*self._request("GET", path, None))

    def close(self) -> None:
        """Close this thread's connection (the next request opens another)."""
        connection = getattr(self._local, "connection", None)
        self._local.connection = None
        if connection is not None:
            connection.close()

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection, and whether it served a request before."""
        connection: http.client.HTTPConnection | None = getattr(self._local, "connection", None)
        if connection is not None:
            return connection, True
        if self._https:
            connection = http.client.HTTPSConnection(
                self._netloc, timeout=self.timeout_s, context=ssl.create_default_context()
            )
        else:
            connection = http.client.HTTPConnection(self._netloc, timeout=self.timeout_s)
        self._local.connection = connection
        return connection, False

    def _request(self, method: str, path: str, data: bytes | None) -> tuple[int, bytes]:
        headers = {"Authorization": f"Bearer {self.token}"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        while True:
            connection, reused = self._connection()
            try:
                connection.request(method, self._path + path, body=data, headers=headers)
                response = connection.getresponse()
                answer = response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                self.close()
                if reused:  # closed by the portal while idle: once more on a fresh connection
                    continue
                raise TransportError(str(exc) or type(exc).__name__) from exc
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                raise TransportError(str(exc) or type(exc).__name__) from exc
            if response.will_close:
                self.close()
            return int(response.status), bytes(answer)


def _json(status: int, raw: bytes) -> tuple[int, Any]:
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, None


def _jitter(delay: float) -> float:
    return delay * random.uniform(0.5, 1.0)  # noqa: S311 -- spreading retries, not security


class Sender:
    """A bounded buffer of telemetry samples plus the latest inventory, and the thread that sends them."""

    def __init__(
        self,
        *,
        transport: Transport,
        node: str,
        boot: str,
        capacity: int = 720,
        batch: int = 60,
        batch_bytes: int = 48_000,
        backoff_base_s: float = 1.0,
        backoff_cap_s: float = 60.0,
        send_interval_s: float = 0.0,
        wait: Callable[[float], object] | None = None,
        jitter: Callable[[float], float] = _jitter,
        outbox: Outbox | None = None,
        on_commands: Callable[[], object] | None = None,
    ) -> None:
        self.transport = transport
        # Called when a telemetry answer says MIG commands wait for this node (the poller's wake): idle nodes need
        # not poll for commands, the answer they get anyway tells them when to.
        self.on_commands = on_commands
        self.outbox = outbox or Outbox()
        self.node = node
        self.boot = boot
        self.capacity = capacity
        self.batch = batch
        # The portal refuses bodies over DATA_UPLOAD_MAX_MEMORY_SIZE (64 KiB by default): a sample of 8 GPUs x 7 MIG
        # devices is about 8 KB, so a batch stops at this many bytes of samples (and always holds at least one).
        self.batch_bytes = batch_bytes
        self.backoff_base_s = backoff_base_s
        self.backoff_cap_s = backoff_cap_s
        # 0: send each sample as soon as it is taken. More: wait this long after a send that emptied the buffer, so
        # samples travel in batches (fewer requests for the portal, fresher figures later).
        self.send_interval_s = send_interval_s
        self.jitter = jitter
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._wait = wait or self._stop.wait
        self._lock = threading.Lock()
        self._samples: collections.deque[dict[str, Any]] = collections.deque()
        self._inventory: dict[str, Any] | None = None
        self._thread: threading.Thread | None = None
        self.dropped = 0  # samples thrown away because the buffer was full
        self.rejected = 0  # samples the portal refused as malformed (400/413): resending cannot help
        self.sent = 0
        self.results_refused = 0  # command results the portal refused for good (see _FINAL_REFUSALS)
        self.failures = 0  # consecutive failed attempts (drives the back-off)
        self.delays: list[float] = []  # back-off delays waited, newest last (the last 100)

    # --- sampler side: never blocks on the network -------------------------------------------------------------

    def put_sample(self, sample: dict[str, Any]) -> None:
        with self._lock:
            if len(self._samples) >= self.capacity:
                self._samples.popleft()
                self.dropped += 1
            self._samples.append(sample)
        self._wake.set()

    def put_inventory(self, payload: dict[str, Any]) -> None:
        with self._lock:
            self._inventory = payload  # only the latest matters
        self._wake.set()

    def put_result(self, command_id: int, batch_key: str, body: dict[str, Any]) -> None:
        self.outbox.record(command_id, batch_key, body)
        self._wake.set()

    def pending(self) -> int:
        with self._lock:
            return len(self._samples) + (self._inventory is not None) + self.outbox.pending()

    # --- sender side ---------------------------------------------------------------------------------------------

    def send_pending(self) -> str:
        """One attempt: a command result if one waits, else the inventory if one waits, else one batch of samples.
        "idle", "sent" or "failed"."""
        result = self.outbox.next_pending()
        if result is not None:
            return self._send_result(*result)
        with self._lock:
            inventory = self._inventory
            batch = list(itertools.islice(self._samples, self.batch)) if inventory is None else []
            dropped = self.dropped
        size = 0
        for n, sample in enumerate(batch):
            size += len(json.dumps(sample, separators=(",", ":")))
            if n and size > self.batch_bytes:
                batch = batch[:n]
                break
        if inventory is not None:
            status = self._post(INVENTORY_PATH, inventory)
            if status is None or not (200 <= status < 300 or status in (400, 413)):
                return "failed"
            with self._lock:
                if self._inventory is inventory:
                    self._inventory = None
            return "sent"
        if not batch:
            return "idle"
        status = self._post(TELEMETRY_PATH, telemetry_payload(self.node, self.boot, dropped, batch), self._answered)
        if status is None or not (200 <= status < 300 or status in (400, 413)):
            return "failed"
        last = batch[-1]["seq"]
        with self._lock:
            while self._samples and self._samples[0]["seq"] <= last:
                self._samples.popleft()
        if status in (400, 413):
            self.rejected += len(batch)
            log.error("the portal refused %d samples as malformed (HTTP %d); they are dropped", len(batch), status)
        else:
            self.sent += len(batch)
        return "sent"

    def _send_result(self, command_id: int, body: dict[str, Any]) -> str:
        status = self._post(RESULT_PATH.format(id=command_id), body)
        if status is None or not (200 <= status < 300 or status in _FINAL_REFUSALS):
            return "failed"
        if status in _FINAL_REFUSALS:
            self.results_refused += 1
            log.error("the portal refused the result of command %d (HTTP %d); not sent again", command_id, status)
        self.outbox.ack(command_id)
        return "sent"

    def _answered(self, status: int, answer: Any) -> None:
        # 200 (applied) and 202 (queued) both carry "commands"; older portals do not (the slow poll covers them).
        waiting = answer.get("commands") if isinstance(answer, dict) else None
        if 200 <= status < 300 and isinstance(waiting, int) and waiting > 0 and self.on_commands is not None:
            self.on_commands()

    def _post(self, path: str, body: dict[str, Any], answered: Callable[[int, Any], None] | None = None) -> int | None:
        try:
            if answered is None:
                status = self.transport.post(path, body)
            else:
                status, answer = self.transport.post_answer(path, body)
                answered(status, answer)
        except TransportError as exc:
            log.warning("portal unreachable: %s", exc)
            return None
        if status in (401, 403):
            log.error("the portal refused this node's credential (HTTP %d)", status)
        elif not 200 <= status < 300:
            log.warning("portal answered HTTP %d to %s", status, path)
        return status

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                outcome = self.send_pending()
            except Exception:  # a bug here must not end the thread: the samples would pile up unsent
                log.exception("sending failed")
                outcome = "failed"
            if outcome == "sent":
                self.failures = 0
                if self.send_interval_s and not self.pending():
                    self._wait(self.send_interval_s)
            elif outcome == "failed":
                self.failures += 1
                delay = self.jitter(min(self.backoff_cap_s, self.backoff_base_s * 2 ** (self.failures - 1)))
                self.delays = [*self.delays[-99:], delay]
                self._wait(delay)
            else:
                self._wake.wait(1.0)
                self._wake.clear()

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="fatia-agent-sender", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
