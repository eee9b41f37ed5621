"""MIG operations the portal sends (static-MIG agent mode): fetch them, run them, say how it went.

Three parts on three threads, so that neither the network nor NVML writes hold up telemetry sampling:

* :class:`CommandPoller` (its own thread) asks the portal for this node's commands when a telemetry answer says
  some wait (:meth:`CommandPoller.wake`), and every ``interval_s`` (a slow fallback), and hands the new ones to the
  sampler; it never touches NVML. One it already ran (the outbox knows it) is re-reported from
  the kept result instead: a command runs once even when its result got lost on the way.
* :meth:`agent.runner.Agent.run_commands` (the sampler's thread, the only owner of the NVML session) runs them
  with :func:`execute`, in the portal's order; after a failure the rest of that batch is skipped (the portal
  cancels it), and after any change the inventory is sent again at once.
* The sender's thread delivers each result from the outbox (``agent/outbox.py``) until the portal answers 2xx.
"""

from __future__ import annotations

import logging
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.nvml import Nvml, NvmlError
from agent.outbox import Outbox
from agent.sender import Transport, TransportError

log = logging.getLogger("agent.commands")

COMMANDS_PATH = "/api/v1/agent/commands/"
AGENT_ERROR = "AGENT_ERROR"  # the code of a failure that is a bug in the agent, not a refusal


@dataclass(frozen=True, slots=True)
class Command:
    id: int
    gpu_index: int
    action: str  # "create" or "destroy"
    profile: str
    start: int
    batch_key: str

    @classmethod
    def from_json(cls, item: Any) -> Command:
        """Raises ValueError for anything but the portal's shape (an agent must not guess at a MIG write)."""
        try:
            command = cls(
                id=_int(item["id"]),
                gpu_index=_int(item["gpu_index"]),
                action=str(item["action"]),
                profile=str(item["profile"]),
                start=_int(item["start"]),
                batch_key=str(item["batch_key"]),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed command {item!r}") from exc
        if command.action not in ("create", "destroy"):
            raise ValueError(f"unknown action in command {item!r}")
        return command


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError(f"not a count: {value!r}")
    return int(value)


def execute(nvml: Nvml, command: Command) -> dict[str, Any]:
    """Run one command; the result's fields as the portal takes them (``node`` aside). NVML's refusals and the
    agent's own (a busy instance, another profile in the slot, MIG off) are failures with their code."""
    try:
        if command.action == "create":
            made = nvml.create_instance(gpu_index=command.gpu_index, profile=command.profile, start=command.start)
            return {"ok": True, "gi_id": made.gi_id, "ci_id": made.ci_id, "mig_uuid": made.mig_uuid}
        gone = nvml.destroy_at(gpu_index=command.gpu_index, profile=command.profile, start=command.start)
        return {"ok": True, "gi_id": gone, "ci_id": None, "mig_uuid": ""}
    except NvmlError as exc:
        what = f"{command.action} {command.profile} at {command.start}"
        log.warning("command %d (%s on GPU %d) failed: %s", command.id, what, command.gpu_index, exc)
        return {"ok": False, "error": str(exc)[:2000], "code": exc.name}
    except Exception as exc:  # a bug must fail this command, not end the agent (which would rerun it, and crash again)
        log.exception("command %d failed unexpectedly", command.id)
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000], "code": AGENT_ERROR}


class CommandPoller:
    """Fetches this node's commands and hands the ones not yet run to ``hand_over`` (the sampler's queue)."""

    def __init__(
        self,
        *,
        transport: Transport,
        node: str,
        outbox: Outbox,
        hand_over: Callable[[list[Command]], None],
        interval_s: float = 60.0,
        backoff_cap_s: float = 60.0,
    ) -> None:
        self.transport = transport
        self.node = node
        self.outbox = outbox
        self.hand_over = hand_over
        self.interval_s = interval_s
        self.backoff_cap_s = backoff_cap_s
        self.failures = 0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.polls = 0

    def wake(self) -> None:
        """Poll now (the portal said commands wait), instead of at the end of the interval."""
        self._wake.set()

    def poll_once(self) -> str:
        """One request: "handed" (new commands went to the sampler), "idle" or "failed"."""
        path = f"{COMMANDS_PATH}?{urllib.parse.urlencode({'node': self.node})}"
        self.polls += 1
        try:
            status, body = self.transport.get(path)
        except TransportError as exc:
            log.warning("portal unreachable for commands: %s", exc)
            return "failed"
        if not 200 <= status < 300 or not isinstance(body, dict) or not isinstance(body.get("commands"), list):
            log.warning("portal answered HTTP %d to %s", status, COMMANDS_PATH)
            return "failed"
        fresh = []
        for item in body["commands"]:
            try:
                command = Command.from_json(item)
            except ValueError as exc:
                log.error("%s; skipped", exc)
                continue
            if self.outbox.known(command.id) is not None:
                self.outbox.resend(command.id)  # ran here already; the portal has not recorded it
            else:
                fresh.append(command)
        if not fresh:
            return "idle"
        self.hand_over(fresh)
        return "handed"

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                outcome = self.poll_once()
            except Exception:  # a bug here must not end the thread: commands would never run again
                log.exception("polling for commands failed")
                outcome = "failed"
            self.failures = self.failures + 1 if outcome == "failed" else 0
            delay = min(self.backoff_cap_s, self.interval_s * 2 ** max(0, self.failures - 1))
            if self.failures:
                self._stop.wait(delay)  # a wake does not cut a back-off short: the portal is not answering
            else:
                self._wake.wait(delay)
            self._wake.clear()

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="fatia-agent-commands", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
