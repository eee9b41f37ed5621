"""The sampling loop: telemetry every ``interval_s``, the inventory when it changes (and every ``inventory_s``), and
the MIG commands the poller hands over, run on this same thread because it alone owns the NVML session."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from agent.commands import Command, execute
from agent.nvml import Nvml, NvmlError
from agent.payloads import inventory_payload, telemetry_sample
from agent.sender import Sender

log = logging.getLogger("agent")


def load_library(fake_scenario: str = "") -> Any:
    """``pynvml`` itself, or the fake over a scenario file."""
    if fake_scenario:
        from agent import fake_nvml

        return fake_nvml.load(fake_scenario)
    import pynvml

    return pynvml


class Agent:
    """Owns the NVML session; every NVML call happens on the thread that calls :meth:`tick`."""

    def __init__(
        self,
        *,
        nvml: Nvml,
        sender: Sender,
        node: str,
        inventory_s: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.nvml = nvml
        self.sender = sender
        self.node = node
        self.inventory_s = inventory_s
        self.clock = clock
        self.seq = 0
        self._inventory: dict[str, Any] | None = None
        self._inventory_at = float("-inf")
        self._commands_lock = threading.Lock()
        self._commands: list[Command] = []
        self._command_ids: set[int] = set()  # handed over and not yet in the outbox
        self._wake = threading.Event()

    def refresh_inventory(self, *, force: bool = False) -> None:
        payload = inventory_payload(self.node, self.nvml.inventory())
        now = self.clock()
        if force or payload != self._inventory or now - self._inventory_at >= self.inventory_s:
            self.sender.put_inventory(payload)
            self._inventory = payload
            self._inventory_at = now

    def tick(self) -> None:
        """One telemetry sample into the sender's buffer; the inventory too when it changed or is due."""
        try:
            if self._inventory is None:
                self.refresh_inventory(force=True)
            sample = self.nvml.sample()
            if sample.stale or self.clock() - self._inventory_at >= self.inventory_s:
                self.refresh_inventory()
        except NvmlError as exc:
            log.warning("NVML: %s", exc)  # the next tick tries again; the portal marks the node if this lasts
            return
        self.seq += 1
        self.sender.put_sample(telemetry_sample(self.seq, self.clock(), sample))

    # --- MIG commands ------------------------------------------------------------------------------------------

    def offer_commands(self, commands: list[Command]) -> None:
        """From the poller's thread: queue the commands not already queued, and wake the loop to run them."""
        with self._commands_lock:
            for command in commands:
                if command.id not in self._command_ids:
                    self._command_ids.add(command.id)
                    self._commands.append(command)
        self._wake.set()

    def run_commands(self) -> int:
        """Run the queued commands in order; returns how many ran. A batch stops at its first failure (here or
        in an earlier poll): its later commands are skipped, and the portal cancels them when the failure
        arrives. Each result goes to the sender's outbox before the command leaves the queue, so the poller never
        hands it over again. After any change, the inventory is sent again at once."""
        with self._commands_lock:
            queued, self._commands = self._commands, []
        outbox = self.sender.outbox
        ran = 0
        for command in queued:
            if outbox.known(command.id) is not None:
                pass  # ran already (listed twice before its result was recorded)
            elif outbox.batch_failed(command.batch_key):
                log.info("command %d skipped: an earlier step of %s failed", command.id, command.batch_key)
            else:
                result = execute(self.nvml, command)
                self.sender.put_result(command.id, command.batch_key, {"node": self.node, **result})
                ran += 1
            with self._commands_lock:
                self._command_ids.discard(command.id)
        if ran:
            try:
                self.refresh_inventory(force=True)
            except NvmlError as exc:
                log.warning("NVML: %s", exc)  # the next tick sends it
        return ran

    def wake(self) -> None:
        """Cut the loop's wait short (a stop, or commands to run)."""
        self._wake.set()

    def run(self, stop: threading.Event, interval_s: float) -> None:
        """Sample every ``interval_s``; between samples, run commands as soon as they arrive. Whoever sets
        ``stop`` calls :meth:`wake` too."""
        while not stop.is_set():
            started = time.monotonic()
            self.tick()
            while not stop.is_set():
                left = interval_s - (time.monotonic() - started)
                if left <= 0:
                    break
                if self._wake.wait(left):
                    self._wake.clear()
                    if not stop.is_set():
                        self.run_commands()


def new_boot_id() -> str:
    """Identifies one run of the agent: sequence numbers restart with it."""
    return uuid.uuid4().hex[:16]
