"""The sampling loop: telemetry every ``interval_s``, the inventory when it changes (and every ``inventory_s``)."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

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

    def run(self, stop: threading.Event, interval_s: float) -> None:
        while not stop.is_set():
            started = time.monotonic()
            self.tick()
            stop.wait(max(0.0, interval_s - (time.monotonic() - started)))


def new_boot_id() -> str:
    """Identifies one run of the agent: sequence numbers restart with it."""
    return uuid.uuid4().hex[:16]
