"""Every state change of the node-agent area: credentials, ingest, freshness, rollups and retention.

Lock order (the fleet's, ``allocations/services/locks.py``): a node's pool, then the node, then its AgentStatus row.
Ingest locks only AgentStatus rows (several in node order when the drain worker applies a batch,
``telemetry.py``), so one node's reports apply one at a time and never wait on placement.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, FloatField, Max, Q, Sum
from django.db.models.functions import Cast, TruncHour
from django.utils import timezone

from allocations.models import Node
from allocations.nodeagent import shared_credentials
from allocations.nodeagent.models import AgentCredential, AgentStatus, DeviceRollup, HealthEvent
from allocations.nodeagent.telemetry import IngestResult, Report, apply_reports
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
    # Other processes notice within FATIA_AGENT_CREDENTIAL_CACHE_S (authentication.py); this one at once. With the
    # telemetry queue, every web process at once: the entry they share goes when this commits (shared_credentials.py).
    _forget_credentials()
    transaction.on_commit(partial(shared_credentials.forget, credential.digest))
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


def note_agent_credential_used(*, credential_id: int, now: datetime) -> None:
    """Queued ingest's touch: the shared accept script says when a minute has passed for this credential."""
    AgentCredential.objects.filter(pk=credential_id).update(last_used_at=now)


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


def record_telemetry(
    *, credential: AgentCredential, payload: dict[str, Any], now: datetime | None = None
) -> IngestResult:
    """Apply a batch of telemetry samples (validated by the API's validator) at once, as the web process does when
    no queue is configured (``telemetry.apply_reports``: idempotent by boot id and sequence, one transaction).
    Raises WrongNode (403)."""
    node = _check_node(credential, payload["node"])
    result = apply_reports([Report(node_id=node.pk, payload=payload, accepted_at=now or timezone.now())])[0]
    assert result is not None  # noqa: S101 -- the credential's node exists: its row was just read
    return result


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
