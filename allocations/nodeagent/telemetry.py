"""Applying telemetry reports to the latest device state and the minute history, several nodes in one transaction.

The web process (no queue) applies one report at once; the drain worker (FATIA_INGEST_QUEUE_URL) applies a batch of
queued reports from many nodes: one lock query for their AgentStatus rows, one read of their device rows, one
UPDATE for every device row they change and one for the status rows, and one INSERT each for new devices, minute
rollups and health events. Per report that leaves the model work in Python and the rows themselves.

Idempotent: samples at or below a node's last sequence number for the same agent boot are skipped (under the
AgentStatus row lock), so a report applied twice (a resend, or a queue entry redelivered after a crash between
commit and acknowledgement) changes nothing. A device missing from a node's newest sample is gone (its instance was
destroyed): its state row goes, its last minute is kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import transaction

from allocations.models import Gpu, Node
from allocations.nodeagent.bulk import update_rows
from allocations.nodeagent.device_rows import SAMPLED_FIELDS, DeviceRow, read_device_rows
from allocations.nodeagent.models import AgentStatus, DeviceRollup, DeviceState, HealthEvent


@dataclass(frozen=True, slots=True)
class Report:
    """One validated telemetry payload of ``node_id``, accepted (its agent last seen) at ``accepted_at``."""

    node_id: int
    payload: dict[str, Any]
    accepted_at: datetime


@dataclass
class IngestResult:
    accepted: int = 0
    duplicates: int = 0
    rollups: int = 0
    events: int = 0
    devices: int = 0
    removed: list[str] = field(default_factory=list)


STATE_FIELDS = ["gpu", *SAMPLED_FIELDS]
STATUS_FIELDS = ["boot", "last_seq", "last_seen_at", "dropped"]

# A device row as read (a plain row, device_rows.py) or as made for a new device (a model instance).
Device = DeviceState | DeviceRow


def _minute(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


def _flush(state: Device, rollups: list[DeviceRollup]) -> None:
    if not state.minute_samples:
        return
    rollups.append(
        DeviceRollup(
            node_id=state.node_id,
            uuid=state.uuid,
            kind=state.kind,
            resolution=DeviceRollup.Resolution.MINUTE,
            bucket=state.minute,
            samples=state.minute_samples,
            memory_mean_mib=state.minute_memory_sum / state.minute_samples,
            memory_max_mib=state.minute_memory_max,
            utilisation_mean=(state.minute_util_sum / state.minute_util_samples if state.minute_util_samples else None),
            utilisation_max=state.minute_util_max if state.minute_util_samples else None,
            processes_max=state.minute_processes_max,
        )
    )
    state.minute_samples = state.minute_memory_sum = state.minute_memory_max = 0
    state.minute_util_sum = state.minute_util_max = 0.0
    state.minute_util_samples = state.minute_processes_max = 0


def _observe(
    state: Device,
    at: datetime,
    memory: int | None,
    util: float | None,
    processes: int,
    rollups: list[DeviceRollup],
) -> None:
    minute = _minute(at)
    if state.minute_samples and minute > state.minute:
        _flush(state, rollups)
    if minute >= state.minute or not state.minute_samples:
        state.minute = minute
        state.minute_samples += 1
        state.minute_memory_sum += memory or 0
        state.minute_memory_max = max(state.minute_memory_max, memory or 0)
        state.minute_processes_max = max(state.minute_processes_max, processes)
        if util is not None:
            state.minute_util_sum += util
            state.minute_util_samples += 1
            state.minute_util_max = max(state.minute_util_max, util)
    state.memory_used_mib = memory
    state.utilisation = util
    state.processes = processes
    state.sampled_at = at


def _gpu_rows(node: Node, status: AgentStatus) -> dict[str, int]:
    """The portal's GPU id for each reported GPU UUID: by UUID when discovery recorded it, else by minor number
    from the agent's inventory (the simulated fleet has no UUIDs)."""
    rows = list(Gpu.objects.filter(node=node).values_list("pk", "uuid", "index"))
    by_uuid = {uuid: pk for pk, uuid, _ in rows if uuid}
    by_index = {index: pk for pk, _, index in rows}
    out = dict(by_uuid)
    for gpu in (status.inventory or {}).get("gpus", []):
        if gpu["uuid"] not in out and gpu["minor"] in by_index:
            out[gpu["uuid"]] = by_index[gpu["minor"]]
    return out


@dataclass
class _Writes:
    """What a batch writes, gathered over its nodes and written once."""

    created: list[DeviceState] = field(default_factory=list)
    changed: list[Device] = field(default_factory=list)
    gone: list[Device] = field(default_factory=list)
    rollups: list[DeviceRollup] = field(default_factory=list)
    events: list[HealthEvent] = field(default_factory=list)


def _apply_samples(
    status: AgentStatus,
    states: dict[str, Device],
    samples: list[tuple[dict[str, Any], datetime]],
    writes: _Writes,
    result: IngestResult,
) -> None:
    """One node's fresh samples (oldest first, each with the time it was accepted) onto its device rows."""
    node = status.node
    created: set[str] = set()
    gpu_ids: dict[str, int] | None = None

    def gpu_id(uuid: str) -> int | None:
        # Looked up only for a device without its GPU row (new, moved, or its GPU unknown so far), not per report.
        nonlocal gpu_ids
        if gpu_ids is None:
            gpu_ids = _gpu_rows(node, status)
        return gpu_ids.get(uuid)

    def inventory_newer(state: Device) -> bool:
        # A device with no GPU row is matched again only when an inventory arrived since its last sample (the
        # agent sends one every few minutes), not on every report: looking costs two queries and the inventory.
        return status.inventory_at is not None and (state.pk is None or status.inventory_at >= state.sampled_at)

    rollups_before, events_before = len(writes.rollups), len(writes.events)
    latest: set[str] = set()
    for sample, accepted_at in samples:
        # The agent's clock says when; one ahead of ours is pulled back so history never lies about the future.
        at = min(datetime.fromtimestamp(sample["ts"], UTC), accepted_at)
        latest = set()
        for gpu in sample["gpus"]:
            rows = [(gpu, DeviceState.Kind.GPU)] + [(m, DeviceState.Kind.MIG) for m in gpu["mig"]]
            for item, kind in rows:
                latest.add(item["uuid"])
                state = states.get(item["uuid"])
                if state is None:
                    state = DeviceState(node=node, kind=kind, uuid=item["uuid"], sampled_at=at, minute=_minute(at))
                    states[item["uuid"]] = state
                    created.add(item["uuid"])
                if state.gpu_uuid != gpu["uuid"] or (state.gpu_id is None and inventory_newer(state)):
                    state.gpu_id = gpu_id(gpu["uuid"])
                state.gpu_uuid = gpu["uuid"]
                state.utilisation_source = gpu["src"]
                if kind == DeviceState.Kind.MIG:
                    state.profile, state.start, state.memory_total_mib = item["profile"], item["start"], item["total"]
                    processes = item["procs"]
                else:
                    state.ecc_uncorrected = item["ecc"][1]
                    processes = sum(m["procs"] for m in gpu["mig"])
                _observe(state, at, item["mem"], item["util"], processes, writes.rollups)
        writes.events.extend(
            HealthEvent(
                node=node,
                gpu_uuid=e["gpu"],
                kind=e["kind"],
                code=e["code"],
                gpu_instance=e["gi"],
                compute_instance=e["ci"],
                at=at,
            )
            for e in sample["events"]
        )
    gone = [s for uuid, s in states.items() if uuid not in latest]
    for state in gone:
        _flush(state, writes.rollups)
        if state.pk is not None:
            writes.gone.append(state)
    writes.created.extend(
        s for uuid, s in states.items() if uuid in latest and uuid in created and isinstance(s, DeviceState)
    )
    writes.changed.extend(s for uuid, s in states.items() if uuid in latest and uuid not in created)
    result.accepted += len(samples)
    result.rollups += len(writes.rollups) - rollups_before
    result.events += len(writes.events) - events_before
    result.devices = len(latest)
    result.removed = sorted(s.uuid for s in gone)


def _lock_statuses(node_ids: list[int]) -> dict[int, AgentStatus]:
    """The nodes' AgentStatus rows, locked in node order, each with its node's current row. Missing rows are made
    first (a node's first report; two at once: one inserts, both then lock). The stored inventory (tens of KB of
    JSON) is read only when asked for: a telemetry report rarely needs it. Nodes that no longer exist are left out."""
    locked = (
        AgentStatus.objects.select_for_update(of=("self",))
        .select_related("node")
        .defer("inventory")
        .filter(node_id__in=node_ids)
        .order_by("node_id")
    )
    statuses = {s.node_id: s for s in locked}
    missing = [n for n in node_ids if n not in statuses]
    if missing:
        known = Node.objects.filter(pk__in=missing).values_list("pk", flat=True)
        AgentStatus.objects.bulk_create([AgentStatus(node_id=n) for n in known], ignore_conflicts=True)
        statuses.update({s.node_id: s for s in locked.filter(node_id__in=missing)})
    return statuses


@transaction.atomic
def apply_reports(reports: list[Report]) -> list[IngestResult | None]:
    """Apply ``reports`` (validated payloads, each already checked to be its node's own) in one transaction, in
    their order; a result per report (None for a node that no longer exists). Locks the nodes' AgentStatus rows in
    node order. A node that was agent-silent is ready again after commit."""
    statuses = _lock_statuses(sorted({r.node_id for r in reports}))
    states: dict[int, dict[str, Device]] = {node_id: {} for node_id in statuses}
    for row in read_device_rows(list(statuses)):
        states[row.node_id][row.uuid] = row
    fresh: dict[int, list[tuple[dict[str, Any], datetime]]] = {node_id: [] for node_id in statuses}
    results: list[IngestResult | None] = []
    for report in reports:
        status = statuses.get(report.node_id)
        if status is None:
            results.append(None)
            continue
        payload, result = report.payload, IngestResult()
        if status.boot != payload["boot"]:
            status.boot, status.last_seq = payload["boot"], 0
        samples = sorted(payload["samples"], key=lambda s: s["seq"])
        new = [s for s in samples if s["seq"] > status.last_seq]
        result.duplicates = len(samples) - len(new)
        result.accepted = len(new)
        if new:
            status.last_seq = new[-1]["seq"]
            fresh[report.node_id].extend((s, report.accepted_at) for s in new)
        if status.last_seen_at is None or report.accepted_at > status.last_seen_at:
            status.last_seen_at = report.accepted_at
        status.dropped = payload["dropped"]
        results.append(result)
    writes = _Writes()
    detail: dict[int, IngestResult] = {}
    for node_id, samples in fresh.items():
        if samples:
            detail[node_id] = IngestResult()
            _apply_samples(statuses[node_id], states[node_id], samples, writes, detail[node_id])
    if writes.gone:
        DeviceState.objects.filter(pk__in=[s.pk for s in writes.gone]).delete()
    DeviceState.objects.bulk_create(writes.created)
    update_rows(DeviceState, STATE_FIELDS, writes.changed)
    # A minute already written (the agent restarted within it) keeps its first figures.
    DeviceRollup.objects.bulk_create(writes.rollups, ignore_conflicts=True)
    HealthEvent.objects.bulk_create(writes.events)
    update_rows(AgentStatus, STATUS_FIELDS, list(statuses.values()))
    _fill_details(reports, results, detail)
    _wake_on_commit(list(statuses.values()))
    return results


def _fill_details(reports: list[Report], results: list[IngestResult | None], detail: dict[int, IngestResult]) -> None:
    # Rollups, events, devices and removals are per node; the last report of a node that brought samples carries
    # them (one report, the web path's case, gets exactly its own).
    done: set[int] = set()
    for report, result in reversed(list(zip(reports, results, strict=True))):
        if result is None or not result.accepted or report.node_id in done or report.node_id not in detail:
            continue
        done.add(report.node_id)
        d = detail[report.node_id]
        result.rollups, result.events, result.devices, result.removed = d.rollups, d.events, d.devices, d.removed


def _wake_on_commit(statuses: list[AgentStatus]) -> None:
    # The node as read with the status lock (not the credential's node, which may predate the freshness task's
    # last mark).
    from allocations.nodeagent.services import set_agent_silent  # it imports this module

    for status in statuses:
        if status.node.state == Node.State.AGENT_SILENT:
            node_id = status.node_id
            transaction.on_commit(lambda node_id=node_id: set_agent_silent(node_id=node_id, silent=False))  # type: ignore[misc]
