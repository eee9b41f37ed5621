"""Every state change of the node-agent area: credentials, ingest, freshness, rollups and retention.

Lock order (the fleet's, ``allocations/services/locks.py``): a node's pool, then the node, then its AgentStatus row.
Ingest locks only the AgentStatus row, so one node's batches apply one at a time and never wait on placement.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import psycopg
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, FloatField, Max, Q, Sum
from django.db.models.functions import Cast, TruncHour
from django.utils import timezone

from allocations.models import Gpu, Node
from allocations.nodeagent.models import AgentCredential, AgentStatus, DeviceRollup, DeviceState, HealthEvent
from allocations.services.locks import lock_pool
from tenants.errors import InvalidTransition, NotAllowed
from tenants.services import record_audit_event

if TYPE_CHECKING:
    from django.contrib.auth.models import User

TOKEN_PREFIX = "fagent"  # noqa: S105 -- the token format's first word, not a secret


class WrongNode(NotAllowed):
    """A credential reported for a node other than its own."""


def hash_agent_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def mint_agent_token() -> tuple[str, str]:
    """A new token and its prefix (the row's lookup key): ``fagent_<prefix>_<secret>``."""
    prefix = secrets.token_hex(6)
    return prefix, f"{TOKEN_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"


# --- credentials ------------------------------------------------------------------------------------------------


@transaction.atomic
def issue_agent_credential(*, node_id: int, actor: User | None) -> tuple[AgentCredential, str]:
    """A new credential for one node; returns it with the token, which is never stored nor shown again.

    Platform admins only (``actor`` None: the management command, run by whoever holds the server). Audited as
    issue_agent_credential. Earlier credentials of the node stay valid until revoked (rotation without a gap)."""
    if actor is not None and not actor.is_staff:
        raise NotAllowed("Only platform admins can issue node agent credentials.")
    node = Node.objects.get(pk=node_id)
    prefix, token = mint_agent_token()
    credential = AgentCredential.objects.create(
        node=node, prefix=prefix, digest=hash_agent_token(token), created_by=actor
    )
    record_audit_event(
        actor=actor, verb="issue_agent_credential", obj=credential, after={"node": node.name, "prefix": prefix}
    )
    return credential, token


@transaction.atomic
def revoke_agent_credential(*, credential_id: int, actor: User | None) -> AgentCredential:
    """Revoke a credential at once (the next request with it gets 401). Locks the credential row.
    Raises InvalidTransition when it is already revoked; audited as revoke_agent_credential."""
    if actor is not None and not actor.is_staff:
        raise NotAllowed("Only platform admins can revoke node agent credentials.")
    credential = AgentCredential.objects.select_for_update(of=("self",)).select_related("node").get(pk=credential_id)
    if credential.revoked_at is not None:
        raise InvalidTransition(current="revoked", target="revoked")
    credential.revoked_at = timezone.now()
    credential.save(update_fields=["revoked_at"])
    # Other processes notice within FATIA_AGENT_CREDENTIAL_CACHE_S (authentication.py); this one at once.
    _forget_credentials()
    record_audit_event(
        actor=actor,
        verb="revoke_agent_credential",
        obj=credential,
        before={"prefix": credential.prefix},
        after={"node": credential.node.name, "prefix": credential.prefix},
    )
    return credential


def _forget_credentials() -> None:
    from allocations.nodeagent.authentication import forget_agent_credentials  # it imports this module

    forget_agent_credentials()


def touch_agent_credential(*, credential: AgentCredential, now: datetime) -> None:
    """Record use at most once a minute: a write per telemetry request would cost more than the telemetry."""
    if credential.last_used_at is None or now - credential.last_used_at > timedelta(minutes=1):
        AgentCredential.objects.filter(pk=credential.pk).update(last_used_at=now)
        credential.last_used_at = now  # the same object may be cached for the next requests


# --- freshness --------------------------------------------------------------------------------------------------


@transaction.atomic
def set_agent_silent(*, node_id: int, silent: bool) -> bool:
    """Mark a ready node agent-silent (placement skips it) or a silent one ready again; False when the node is in
    another state (cordoned, reconfiguring, gone: those win). Locks its pool, then the node, as placement does.
    Audited as agent_silent / agent_back."""
    pool_id = Node.objects.values_list("pool_id", flat=True).get(pk=node_id)
    if pool_id is not None:
        lock_pool(pool_id=pool_id)
    node = Node.objects.select_for_update(no_key=True, of=("self",)).get(pk=node_id)
    before, after = (
        (Node.State.READY, Node.State.AGENT_SILENT) if silent else (Node.State.AGENT_SILENT, Node.State.READY)
    )
    if node.state != before:
        return False
    node.state = after
    node.save(update_fields=["state", "updated_at"])
    verb = "agent_silent" if silent else "agent_back"
    record_audit_event(actor=None, verb=verb, obj=node, before={"state": before}, after={"state": after})
    return True


def mark_silent_agents(*, now: datetime | None = None) -> list[str]:
    """Nodes whose agent has reported before but not for FATIA_AGENT_SILENT_AFTER_S are marked agent-silent.
    A node that never ran an agent is left alone. Returns the names marked."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.FATIA_AGENT_SILENT_AFTER_S)
    stale = AgentStatus.objects.filter(last_seen_at__lt=cutoff, node__state=Node.State.READY).order_by("node_id")
    return [
        name
        for node_id, name in stale.values_list("node_id", "node__name")
        if set_agent_silent(node_id=node_id, silent=True)
    ]


# --- ingest -----------------------------------------------------------------------------------------------------


def _lock_status(node: Node) -> AgentStatus:
    """The node's AgentStatus, locked, with the node's current row (one query on every report but the first).
    The stored inventory (tens of KB of JSON) is read only when asked for: a telemetry report rarely needs it."""
    locked = (
        AgentStatus.objects.select_for_update(of=("self",)).select_related("node").defer("inventory").filter(node=node)
    )
    status = locked.first()
    if status is None:
        AgentStatus.objects.get_or_create(node=node)  # two first reports at once: one creates, both then lock
        status = locked.get()
    return status


def _check_node(credential: AgentCredential, node_name: str) -> Node:
    node = credential.node
    if node.name != node_name:
        raise WrongNode(f"This credential reports for node {node.name}, not {node_name}.", field="node")
    return node


@transaction.atomic
def record_inventory(
    *, credential: AgentCredential, payload: dict[str, Any], now: datetime | None = None
) -> AgentStatus:
    """Store a node's latest inventory (validated by the API's serializer). Raises WrongNode (403).
    Locks the node's AgentStatus; a node that was agent-silent is ready again after commit."""
    now = now or timezone.now()
    node = _check_node(credential, payload["node"])
    status = _lock_status(node)
    status.inventory = payload
    status.inventory_at = now
    status.agent_version = payload["agent_version"]
    status.driver_version = payload["driver_version"]
    status.last_seen_at = now
    status.save(update_fields=["inventory", "inventory_at", "agent_version", "driver_version", "last_seen_at"])
    _wake_on_commit(status)
    return status


def _wake_on_commit(status: AgentStatus) -> None:
    # The node as read with the status lock (not the credential's node, which may predate the freshness task's
    # last mark).
    if status.node.state == Node.State.AGENT_SILENT:
        node_id = status.node_id
        transaction.on_commit(lambda: set_agent_silent(node_id=node_id, silent=False))


@dataclass
class IngestResult:
    accepted: int = 0
    duplicates: int = 0
    rollups: int = 0
    events: int = 0
    devices: int = 0
    removed: list[str] = field(default_factory=list)


def _minute(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


def _flush(state: DeviceState, rollups: list[DeviceRollup]) -> None:
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
    state: DeviceState,
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


_STATE_FIELDS = [
    "gpu",
    "profile",
    "start",
    "memory_used_mib",
    "memory_total_mib",
    "processes",
    "utilisation",
    "utilisation_source",
    "ecc_uncorrected",
    "sampled_at",
    "minute",
    "minute_samples",
    "minute_memory_sum",
    "minute_memory_max",
    "minute_util_sum",
    "minute_util_samples",
    "minute_util_max",
    "minute_processes_max",
]


def _update_states(states: list[DeviceState]) -> None:
    """Write back device rows in one statement: the hot path of ingest (64 rows per node and sample).

    On PostgreSQL: one UPDATE ... FROM unnest(one array per column), bound on the server in binary and prepared
    once per connection; its text is the same for any number of rows. Measured per 64-row update (client CPU /
    server CPU): Django's bulk_update about 25 ms of Python; UPDATE ... FROM (VALUES ...) with a placeholder per
    value 8.1 / 4.9 ms (psycopg re-parsed the long statement each time and quoted each value in Python); this
    2.0 / 2.0 ms, and 2.0 / 1.2 ms with the table's fillfactor at 50 (HOT updates, migration 0002). Elsewhere (the
    demo's SQLite) one UPDATE per row. Values go in as the model holds them: the rows were read from the database
    and filled from validated figures."""
    if not states:
        return
    concrete = {f.name: f for f in DeviceState._meta.concrete_fields}
    columns = [concrete[name] for name in _STATE_FIELDS]
    quote = connection.ops.quote_name
    table = quote(DeviceState._meta.db_table)
    if connection.vendor == "postgresql":
        # One type per array: a float column's whole numbers go as floats (binary arrays are not mixed).
        arrays = [
            [None if v is None else float(v) for v in (getattr(s, c.attname) for s in states)]
            if isinstance(c, FloatField)
            else [getattr(s, c.attname) for s in states]
            for c in columns
        ]
        arrays.append([state.pk for state in states])
        casts = ", ".join(f"%b::{c.db_type(connection)}[]" for c in columns)
        names = ", ".join(quote(c.column) for c in columns)
        assignments = ", ".join(f"{quote(c.column)} = v.{quote(c.column)}" for c in columns)
        connection.ensure_connection()
        # Django's cursors bind on the client and quote every array element in Python; this one statement binds
        # on the server (%b: binary arrays) on the same connection and transaction.
        with psycopg.Cursor(connection.connection) as cursor:
            cursor.execute(
                f"UPDATE {table} AS t SET {assignments} FROM unnest({casts}, %b::bigint[]) AS v({names}, id) "  # noqa: S608
                "WHERE t.id = v.id",
                arrays,
                prepare=True,
            )
        return
    assignments = ", ".join(f"{quote(c.column)} = %s" for c in columns)
    rows = [[getattr(state, c.attname) for c in columns] + [state.pk] for state in states]
    with connection.cursor() as cursor:
        cursor.executemany(f"UPDATE {table} SET {assignments} WHERE id = %s", rows)  # noqa: S608


@transaction.atomic
def record_telemetry(
    *, credential: AgentCredential, payload: dict[str, Any], now: datetime | None = None
) -> IngestResult:
    """Apply a batch of telemetry samples (validated by the API's serializer) to the latest state and the minute
    history. Raises WrongNode (403).

    Idempotent: samples at or below the node's last sequence number for the same agent boot are skipped, so a
    batch the agent resends after a lost answer changes nothing. Locks the node's AgentStatus row. A device missing
    from the newest sample is gone (its instance was destroyed): its state row goes, its last minute is kept."""
    now = now or timezone.now()
    node = _check_node(credential, payload["node"])
    status = _lock_status(node)
    result = IngestResult()
    if status.boot != payload["boot"]:
        status.boot, status.last_seq = payload["boot"], 0
    samples = sorted(payload["samples"], key=lambda s: s["seq"])
    fresh = [s for s in samples if s["seq"] > status.last_seq]
    result.duplicates = len(samples) - len(fresh)
    if fresh:
        _apply_samples(node, status, fresh, now, result)
        status.last_seq = fresh[-1]["seq"]
    status.last_seen_at = now
    status.dropped = payload["dropped"]
    status.save(update_fields=["boot", "last_seq", "last_seen_at", "dropped"])
    _wake_on_commit(status)
    return result


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


def _apply_samples(
    node: Node, status: AgentStatus, samples: list[dict[str, Any]], now: datetime, result: IngestResult
) -> None:
    states = {s.uuid: s for s in DeviceState.objects.filter(node=node)}
    created: dict[str, DeviceState] = {}
    gpu_ids: dict[str, int] | None = None

    def gpu_id(uuid: str) -> int | None:
        # Looked up only for a device without its GPU row (new, moved, or its GPU unknown so far), not per report.
        nonlocal gpu_ids
        if gpu_ids is None:
            gpu_ids = _gpu_rows(node, status)
        return gpu_ids.get(uuid)

    rollups: list[DeviceRollup] = []
    events: list[HealthEvent] = []
    latest: set[str] = set()
    for sample in samples:
        # The agent's clock says when; one ahead of ours is pulled back so history never lies about the future.
        at = min(datetime.fromtimestamp(sample["ts"], UTC), now)
        latest = set()
        for gpu in sample["gpus"]:
            rows = [(gpu, DeviceState.Kind.GPU)] + [(m, DeviceState.Kind.MIG) for m in gpu["mig"]]
            for item, kind in rows:
                latest.add(item["uuid"])
                state = states.get(item["uuid"])
                if state is None:
                    state = DeviceState(node=node, kind=kind, uuid=item["uuid"], sampled_at=at, minute=_minute(at))
                    states[item["uuid"]] = created[item["uuid"]] = state
                if state.gpu_id is None or state.gpu_uuid != gpu["uuid"]:
                    state.gpu_id = gpu_id(gpu["uuid"])
                state.gpu_uuid = gpu["uuid"]
                state.utilisation_source = gpu["src"]
                if kind == DeviceState.Kind.MIG:
                    state.profile, state.start, state.memory_total_mib = item["profile"], item["start"], item["total"]
                    processes = item["procs"]
                else:
                    state.ecc_uncorrected = item["ecc"][1]
                    processes = sum(m["procs"] for m in gpu["mig"])
                _observe(state, at, item["mem"], item["util"], processes, rollups)
        for e in sample["events"]:
            events.append(
                HealthEvent(
                    node=node,
                    gpu_uuid=e["gpu"],
                    kind=e["kind"],
                    code=e["code"],
                    gpu_instance=e["gi"],
                    compute_instance=e["ci"],
                    at=at,
                )
            )
    gone = [s for uuid, s in states.items() if uuid not in latest]
    for state in gone:
        _flush(state, rollups)
    existing = [s for uuid, s in states.items() if uuid in latest and uuid not in created]
    if gone:
        DeviceState.objects.filter(pk__in=[s.pk for s in gone if s.pk is not None]).delete()
    DeviceState.objects.bulk_create([s for s in created.values() if s.uuid in latest])
    if existing:
        _update_states(existing)
    # A minute already written (the agent restarted within it) keeps its first figures.
    DeviceRollup.objects.bulk_create(rollups, ignore_conflicts=True)
    HealthEvent.objects.bulk_create(events)
    result.accepted = len(samples)
    result.rollups = len(rollups)
    result.events = len(events)
    result.devices = len(latest)
    result.removed = sorted(s.uuid for s in gone)


# --- history ----------------------------------------------------------------------------------------------------


def roll_up_hours(*, now: datetime | None = None) -> int:
    """Rebuild the hourly rollups of the previous and the current hour from the minute rollups (idempotent: run it
    as often as you like). Returns the number of hourly rows written."""
    now = now or timezone.now()
    since = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    weighted = Cast(F("memory_mean_mib") * F("samples"), FloatField())
    rows = (
        DeviceRollup.objects.filter(resolution=DeviceRollup.Resolution.MINUTE, bucket__gte=since)
        .annotate(hour=TruncHour("bucket"))
        .values("node_id", "uuid", "kind", "hour")
        .annotate(
            n=Sum("samples"),
            memory_sum=Sum(weighted),
            memory_max=Max("memory_max_mib"),
            util_sum=Sum(Cast(F("utilisation_mean") * F("samples"), FloatField())),
            util_n=Sum("samples", filter=Q(utilisation_mean__isnull=False)),
            util_max=Max("utilisation_max"),
            processes_max=Max("processes_max"),
        )
        .order_by()
    )
    hourly = [
        DeviceRollup(
            node_id=r["node_id"],
            uuid=r["uuid"],
            kind=r["kind"],
            resolution=DeviceRollup.Resolution.HOUR,
            bucket=r["hour"],
            samples=r["n"],
            memory_mean_mib=(r["memory_sum"] or 0.0) / r["n"],
            memory_max_mib=r["memory_max"],
            utilisation_mean=(r["util_sum"] / r["util_n"]) if r["util_n"] else None,
            utilisation_max=r["util_max"],
            processes_max=r["processes_max"],
        )
        for r in rows
    ]
    DeviceRollup.objects.bulk_create(
        hourly,
        update_conflicts=True,
        unique_fields=["node", "uuid", "resolution", "bucket"],
        update_fields=[
            "samples",
            "memory_mean_mib",
            "memory_max_mib",
            "utilisation_mean",
            "utilisation_max",
            "processes_max",
        ],
        batch_size=2000,
    )
    return len(hourly)


@dataclass
class PruneResult:
    minutes: int
    hours: int
    events: int


def prune_agent_history(*, now: datetime | None = None) -> PruneResult:
    """Delete minute rollups older than FATIA_AGENT_MINUTES_KEPT_DAYS, hourly rollups and health events older than
    FATIA_AGENT_HOURS_KEPT_DAYS. Hours are rolled up first, so no minute leaves before its hour holds it."""
    now = now or timezone.now()
    roll_up_hours(now=now)
    minute_cutoff = now - timedelta(days=settings.FATIA_AGENT_MINUTES_KEPT_DAYS)
    hour_cutoff = now - timedelta(days=settings.FATIA_AGENT_HOURS_KEPT_DAYS)
    minutes, _ = DeviceRollup.objects.filter(
        resolution=DeviceRollup.Resolution.MINUTE, bucket__lt=minute_cutoff
    ).delete()
    hours, _ = DeviceRollup.objects.filter(resolution=DeviceRollup.Resolution.HOUR, bucket__lt=hour_cutoff).delete()
    events, _ = HealthEvent.objects.filter(at__lt=hour_cutoff).delete()
    return PruneResult(minutes=minutes, hours=hours, events=events)
