"""Whether an allocation's slices are idle, judged from what the node agents reported (reads only).

A slice is in use in a minute when its MIG device ran a process or had more than FATIA_IDLE_MEMORY_MIB of memory
in use. A slice is idle since the start of the latest unbroken run of reported minutes without use, counted from
the allocation's activation at the earliest (with static MIG the same device served someone else before). A run
is broken by a minute in use and by a gap in the reports longer than FATIA_IDLE_GAP_MINUTES: minutes nobody
reported are not known to be idle. A slice whose device the agent does not report now (no agent, agent silent,
device unknown) is unknown, and an allocation is idle only when every slice is known to be idle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from django.conf import settings
from django.db.models import Q

from allocations.nodeagent.models import DeviceRollup, DeviceState


class Idleness(StrEnum):
    IDLE = "idle"
    BUSY = "busy"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class SliceRef:
    """A slice as placement knows it: the GPU row and the first memory slot of its instance."""

    gpu_id: int
    start: int


@dataclass(frozen=True, slots=True)
class IdleVerdict:
    """`idle_since` is set only for IDLE: since when every slice has been idle (it may be a moment ago)."""

    state: Idleness
    idle_since: datetime | None = None
    reason: str = ""


def _in_use(processes: int, memory_mib: int | None) -> bool:
    return processes > 0 or (memory_mib or 0) > settings.FATIA_IDLE_MEMORY_MIB


def _device_idle_since(
    state: DeviceState, minutes: Sequence[tuple[datetime, int, int]], *, not_before: datetime
) -> datetime | None:
    """The start of the device's current idle run, or None when it is in use now.

    `minutes` are its finished minute rollups (bucket, peak processes, peak memory), newest first."""
    if _in_use(state.processes, state.memory_used_mib):
        return None
    if state.minute_samples and _in_use(state.minute_processes_max, state.minute_memory_max):
        return None
    gap = timedelta(minutes=settings.FATIA_IDLE_GAP_MINUTES)
    since = state.minute if state.minute_samples else state.sampled_at
    for bucket, processes, memory in minutes:
        if bucket >= since:
            continue  # the current minute, or a rollup written again after an agent restart
        if _in_use(processes, memory) or since - (bucket + timedelta(minutes=1)) > gap:
            break
        since = bucket
    return max(since, not_before)


def allocation_idleness(*, slices: Sequence[SliceRef], activated_at: datetime, now: datetime) -> IdleVerdict:
    """Judge one active allocation. Three queries whatever the number of slices; reads at most the history
    since the later of activation and one week ago (minute rollups are kept a week)."""
    if not slices:
        return IdleVerdict(Idleness.UNKNOWN, reason="no placed slices")
    wanted = Q()
    for ref in slices:
        wanted |= Q(gpu_id=ref.gpu_id, start=ref.start)
    states = {
        (s.gpu_id, s.start): s
        for s in DeviceState.objects.filter(wanted, kind=DeviceState.Kind.MIG).order_by("sampled_at")
    }
    fresh_after = now - timedelta(minutes=settings.FATIA_IDLE_GAP_MINUTES)
    devices: list[DeviceState] = []
    for ref in slices:
        state = states.get((ref.gpu_id, ref.start))
        if state is None:
            return IdleVerdict(Idleness.UNKNOWN, reason="no telemetry for a slice")
        if state.sampled_at < fresh_after:
            return IdleVerdict(Idleness.UNKNOWN, reason="the node's agent stopped reporting")
        devices.append(state)
    horizon = max(activated_at, now - timedelta(days=settings.FATIA_AGENT_MINUTES_KEPT_DAYS)) - timedelta(minutes=1)
    by_device: dict[tuple[int, str], list[tuple[datetime, int, int]]] = {}
    rows = (
        DeviceRollup.objects.filter(
            resolution=DeviceRollup.Resolution.MINUTE,
            node_id__in={d.node_id for d in devices},
            uuid__in={d.uuid for d in devices},
            bucket__gte=horizon,
        )
        .order_by("-bucket")
        .values_list("node_id", "uuid", "bucket", "processes_max", "memory_max_mib")
    )
    for node_id, uuid, bucket, processes, memory in rows:
        by_device.setdefault((node_id, uuid), []).append((bucket, processes, memory))
    latest: datetime | None = None
    for state in devices:
        since = _device_idle_since(state, by_device.get((state.node_id, state.uuid), []), not_before=activated_at)
        if since is None:
            return IdleVerdict(Idleness.BUSY, reason="a slice is in use")
        latest = since if latest is None else max(latest, since)
    return IdleVerdict(Idleness.IDLE, idle_since=latest)
