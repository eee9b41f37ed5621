"""Real agent payloads for the portal's tests: the agent's own code over the fake NVML, with a chosen clock."""

from __future__ import annotations

from typing import Any

from agent.nvml import Nvml
from agent.payloads import inventory_payload, telemetry_payload, telemetry_sample
from tests.agent.scenarios import fake, two_gpus

T0 = 1_796_040_000.0  # 2026-11-30 12:00:00 UTC


class FakeNode:
    """One node's agent pieces without the sender: inventory and telemetry payloads on demand."""

    def __init__(self, node: str, scenario: dict[str, Any] | None = None) -> None:
        self.node = node
        self.lib = fake(scenario or two_gpus())
        self.nvml = Nvml(self.lib)
        self.seq = 0

    def inventory(self) -> dict[str, Any]:
        return inventory_payload(self.node, self.nvml.inventory())

    def sample(self, ts: float) -> dict[str, Any]:
        self.seq += 1
        return telemetry_sample(self.seq, ts, self.nvml.sample())

    def telemetry(self, *timestamps: float, boot: str = "boot-1", dropped: int = 0) -> dict[str, Any]:
        return telemetry_payload(self.node, boot, dropped, [self.sample(ts) for ts in timestamps])
