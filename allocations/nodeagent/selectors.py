"""Reads of what node agents reported, for the dashboard and the API."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from allocations.nodeagent.models import AgentCommand, AgentStatus, DeviceState


@dataclass(frozen=True, slots=True)
class SliceUsage:
    """A MIG device's latest figures. `utilisation` is SM utilisation in percent, None where NVML attributes none
    to MIG devices (Ampere); `utilisation_source` says where it came from ("gpm", "device", "none")."""

    memory_used_mib: int | None
    memory_total_mib: int | None
    processes: int
    utilisation: float | None
    utilisation_source: str
    sampled_at: datetime

    @property
    def memory_share(self) -> int:
        """Memory used as a whole percentage of the device's memory (0 when unknown)."""
        if not self.memory_total_mib or self.memory_used_mib is None:
            return 0
        return min(100, round(100 * self.memory_used_mib / self.memory_total_mib))

    @property
    def short(self) -> str:
        """What fits in the slot: "8.0 GiB · 40 %" (the utilisation only where NVML gives it)."""
        used = "?" if self.memory_used_mib is None else f"{self.memory_used_mib / 1024:.1f}"
        util = "" if self.utilisation is None else f" · {self.utilisation:.0f} %"
        return f"{used} GiB{util}"

    @property
    def sentence(self) -> str:
        """The tooltip's line: memory, utilisation and where it comes from, processes, and when."""
        used = "?" if self.memory_used_mib is None else f"{self.memory_used_mib / 1024:.1f}"
        total = "?" if self.memory_total_mib is None else f"{self.memory_total_mib / 1024:.1f}"
        if self.utilisation is None:
            util = "utilisation not reported by NVML for MIG devices on this GPU"
        else:
            where = "of this instance (GPM)" if self.utilisation_source == "gpm" else "of the whole GPU"
            util = f"SM utilisation {self.utilisation:.0f} % {where}"
        procs = f"{self.processes} process{'es' if self.processes != 1 else ''}"
        return f"Memory used {used} of {total} GiB · {util} · {procs} · as of {self.sampled_at:%H:%M:%S} UTC"


def slice_usage(gpu_ids: Iterable[int]) -> dict[tuple[int, int], SliceUsage]:
    """The latest figures of the MIG devices on these GPUs, by (GPU id, first memory slot): how the dashboard
    finds the device behind a slice. One query. Callers apply tenancy (show usage only on slices the viewer may
    see)."""
    rows = DeviceState.objects.filter(gpu_id__in=list(gpu_ids), kind=DeviceState.Kind.MIG).values_list(
        "gpu_id",
        "start",
        "memory_used_mib",
        "memory_total_mib",
        "processes",
        "utilisation",
        "utilisation_source",
        "sampled_at",
    )
    return {
        (gpu_id, start): SliceUsage(used, total, processes, util, source, at)
        for gpu_id, start, used, total, processes, util, source, at in rows
        if gpu_id is not None and start is not None
    }


def reported_instances(node_ids: Iterable[int]) -> dict[tuple[int, int], list[tuple[str, int]]]:
    """(node id, GPU index) -> the GPU instances `(profile, start)` in the node's latest agent inventory. Nodes whose
    agent never sent one are absent: what exists on their GPUs is unknown, not empty."""
    out: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for node_id, inventory in AgentStatus.objects.filter(node_id__in=list(node_ids)).values_list(
        "node_id", "inventory"
    ):
        for gpu in (inventory or {}).get("gpus", []):
            out[(node_id, int(gpu["index"]))] = [(str(i["profile"]), int(i["start"])) for i in gpu.get("instances", [])]
    return out


def commands_waiting(*, node_id: int) -> int:
    """How many MIG commands wait to be handed to the node's agent (the telemetry answer's ``commands`` when the
    report is applied in its request; with the queue, a flag in Redis says the same without a query)."""
    return AgentCommand.objects.filter(node_id=node_id, status=AgentCommand.Status.PENDING).count()
