"""Idle reclaim: active requests whose every slice stayed idle are flagged, their owner warned, and released at
the end of a grace period unless kept or used again. Also records which MIG device serves each slice, so the
agent's history can be charged to requests (showback "used", allocations/nodeagent/usage.py).

Per tenant and off by default (Tenant.idle_reclaim_enabled, idle_after_minutes, idle_grace_minutes). What counts
as idle is allocations/nodeagent/idle.py. The beat task runs `reclaim_idle_allocations` every minute; each
allocation is judged under its own row lock, so two sweeps at once warn once and release once.

States on the allocation: not flagged (idle_since NULL) -> flagged and warned (idle_since, idle_warned_at,
idle_release_at set; e-mail and inbox) -> released through release_allocation when idle_release_at has passed and
it is still idle. Any use, unknown telemetry, "Keep it" or the tenant turning reclaim off clear the flag; "Keep
it" also keeps it from being flagged again for one idle time (idle_snoozed_until).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from allocations.models import Allocation, Notification, SliceDevice, SlicePlacement
from allocations.nodeagent.idle import Idleness, IdleVerdict, SliceRef, allocation_idleness
from allocations.nodeagent.models import DeviceState
from allocations.services.locks import lock_allocation
from allocations.services.notifications import notify_users
from allocations.services.requests import release_allocation
from tenants.errors import DomainError, InvalidTransition, NotAllowed
from tenants.selectors import can_manage_tenant
from tenants.services import record_audit_event

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)
Status = Allocation.Status
IDLE_FIELDS = ["idle_since", "idle_warned_at", "idle_release_at", "idle_snoozed_until", "updated_at"]


class NotIdle(DomainError):
    status = 409
    code = "not_idle"


@dataclass
class ReclaimResult:
    """What one sweep did, by allocation id."""

    flagged: list[int] = field(default_factory=list)
    cleared: list[int] = field(default_factory=list)
    reclaimed: list[int] = field(default_factory=list)


def _verdict(allocation: Allocation, now: datetime) -> IdleVerdict:
    slices = [
        SliceRef(gpu_id, start)
        for gpu_id, start in SlicePlacement.objects.filter(allocation_id=allocation.pk).values_list("gpu_id", "start")
    ]
    activated = allocation.activated_at or now
    return allocation_idleness(slices=slices, activated_at=activated, now=now)


def _clear(allocation: Allocation, *, reason: str) -> None:
    before = {"idle_since": allocation.idle_since.isoformat() if allocation.idle_since else None}
    allocation.idle_since = allocation.idle_warned_at = allocation.idle_release_at = None
    allocation.save(update_fields=IDLE_FIELDS)
    record_audit_event(
        actor=None,
        verb="clear_idle",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        before=before,
        after={"reason": reason},
    )


def _warn(allocation: Allocation, *, idle_since: datetime, release_at: datetime) -> bool:
    """The owner's e-mail (when they have an address) and inbox message. Returns whether an e-mail went out."""
    user = allocation.requested_by
    link = reverse("request-detail", args=[allocation.pk])
    what = f"{allocation.count} × {allocation.profile} in {allocation.pool.name}"
    if user.email:
        send_mail(
            subject=f"[Fatia] Request #{allocation.pk} is idle: its slices will be released at {release_at:%H:%M} UTC",
            message=(
                f"Hello {user.get_username()},\n\n"
                f"Every slice of request #{allocation.pk} ({what}, claim {allocation.claim_name or '-'}) has had no "
                f"process and no memory in use since {idle_since:%Y-%m-%d %H:%M} UTC.\n"
                f"Your tenant {allocation.tenant.name} gives idle slices back: they will be released at "
                f"{release_at:%Y-%m-%d %H:%M} UTC unless they are used again or you keep them.\n\n"
                f"Keep them or release them now: {settings.SITE_URL}{link}\n"
            ),
            from_email=settings.DEFAULT_FROM_EMAIL,
            recipient_list=[user.email],
        )
    else:
        logger.info("allocation %s: requester has no email address; idle warning in the inbox only", allocation.pk)
    notify_users(
        recipient_ids=[user.pk],
        kind=Notification.Kind.IDLE_RECLAIM,
        text=(
            f"Request #{allocation.pk} ({what}) has been idle since {idle_since:%Y-%m-%d %H:%M} UTC and will be "
            f"released at {release_at:%Y-%m-%d %H:%M} UTC unless used or kept."
        ),
        link=link,
        actor=None,
    )
    return bool(user.email)


@transaction.atomic
def judge_idle_allocation(*, allocation_id: int, now: datetime | None = None) -> str:
    """Bring one allocation's idle flag up to date and release it when its grace period is over.

    Returns what happened: "flagged", "cleared", "reclaimed", or "unchanged". Locks the allocation (then
    release_allocation locks its quota). Idempotent: a second call at the same moment changes nothing."""
    now = now or timezone.now()
    allocation = lock_allocation(allocation_id=allocation_id)
    flagged_since = allocation.idle_since
    if allocation.status != Status.ACTIVE:
        return "unchanged"
    tenant = allocation.tenant
    if not tenant.idle_reclaim_enabled:
        if flagged_since is not None:
            _clear(allocation, reason="idle reclaim is off for the tenant")
            return "cleared"
        return "unchanged"
    verdict = _verdict(allocation, now)
    idle_since = verdict.idle_since if verdict.state == Idleness.IDLE else None
    long_idle = idle_since is not None and now - idle_since >= timedelta(minutes=tenant.idle_after_minutes)
    if flagged_since is not None:
        if verdict.state != Idleness.IDLE:
            _clear(allocation, reason="in use again" if verdict.state == Idleness.BUSY else verdict.reason)
            return "cleared"
        if not long_idle:
            # Idle now, but the run that was flagged broke (a telemetry gap): start over.
            _clear(allocation, reason="the idle time was interrupted")
            return "cleared"
        release_at = allocation.idle_release_at
        if release_at is None or now < release_at:
            return "unchanged"
        record_audit_event(
            actor=None,
            verb="reclaim_idle",
            obj=allocation,
            tenant_id=allocation.tenant_id,
            after={"idle_since": flagged_since.isoformat(), "release_at": release_at.isoformat()},
        )
        release_allocation(
            allocation_id=allocation.pk,
            actor=None,
            reason=f"Idle since {flagged_since:%Y-%m-%d %H:%M} UTC: released by the tenant's idle reclaim.",
        )
        return "reclaimed"
    snoozed = allocation.idle_snoozed_until is not None and now < allocation.idle_snoozed_until
    if idle_since is None or not long_idle or snoozed:
        return "unchanged"
    release_at = now + timedelta(minutes=tenant.idle_grace_minutes)
    allocation.idle_since, allocation.idle_warned_at, allocation.idle_release_at = idle_since, now, release_at
    allocation.save(update_fields=IDLE_FIELDS)
    record_audit_event(
        actor=None,
        verb="flag_idle",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        after={"idle_since": idle_since.isoformat(), "idle_after_minutes": tenant.idle_after_minutes},
    )
    emailed = _warn(allocation, idle_since=idle_since, release_at=release_at)
    record_audit_event(
        actor=None,
        verb="warn_idle",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        after={"release_at": release_at.isoformat(), "email": emailed},
    )
    return "flagged"


def reclaim_idle_allocations(*, now: datetime | None = None) -> ReclaimResult:
    """The beat task's sweep: judge every active allocation of a tenant with idle reclaim on, and every flagged
    one (to clear flags when a tenant turns it off). One transaction per allocation."""
    now = now or timezone.now()
    candidates = Allocation.objects.filter(
        Q(tenant__idle_reclaim_enabled=True) | Q(idle_since__isnull=False), status=Status.ACTIVE
    ).values_list("pk", flat=True)
    result = ReclaimResult()
    outcomes = {"flagged": result.flagged, "cleared": result.cleared, "reclaimed": result.reclaimed}
    for pk in sorted(candidates):
        outcome = judge_idle_allocation(allocation_id=pk, now=now)
        if outcome in outcomes:
            outcomes[outcome].append(pk)
    return result


@transaction.atomic
def keep_idle_allocation(*, allocation_id: int, actor: User) -> Allocation:
    """ "Keep it": clear the idle flag and do not flag the allocation again for one idle time of its tenant.

    The requester and the tenant's managers (and platform admins) may. Locks the allocation. Raises NotAllowed,
    InvalidTransition (not active) or NotIdle (not flagged: nothing to keep)."""
    allocation = lock_allocation(allocation_id=allocation_id)
    if allocation.requested_by_id != actor.pk and not can_manage_tenant(actor, allocation.tenant_id):
        raise NotAllowed("Only the requester or a tenant manager can keep this.")
    if allocation.status != Status.ACTIVE:
        raise InvalidTransition(current=allocation.status, target="kept")
    if allocation.idle_since is None:
        raise NotIdle(f"Request #{allocation.pk} is not flagged idle; there is nothing to keep.")
    now = timezone.now()
    before = {"idle_since": allocation.idle_since.isoformat()}
    allocation.idle_since = allocation.idle_warned_at = allocation.idle_release_at = None
    allocation.idle_snoozed_until = now + timedelta(minutes=allocation.tenant.idle_after_minutes)
    allocation.save(update_fields=IDLE_FIELDS)
    record_audit_event(
        actor=actor,
        verb="keep_idle",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        before=before,
        after={"snoozed_until": allocation.idle_snoozed_until.isoformat()},
    )
    return allocation


def record_slice_devices(*, now: datetime | None = None) -> int:
    """Remember which MIG device (by its agent-reported UUID) serves each slice of every active allocation: the
    device the agent reports at the slice's GPU and first memory slot. Rows are never changed, only added (one
    per allocation and device), so this is safe to run concurrently and as often as wanted. Returns how many
    slices have a reported device now."""
    now = now or timezone.now()
    placements = list(
        SlicePlacement.objects.filter(allocation__status=Status.ACTIVE).values_list("allocation_id", "gpu_id", "start")
    )
    if not placements:
        return 0
    states = DeviceState.objects.filter(
        kind=DeviceState.Kind.MIG, gpu_id__in={gpu_id for _, gpu_id, _ in placements}
    ).values_list("gpu_id", "start", "node_id", "uuid")
    by_slot = {(gpu_id, start): (node_id, uuid) for gpu_id, start, node_id, uuid in states}
    rows = [
        SliceDevice(
            allocation_id=allocation_id,
            node_id=by_slot[(gpu_id, start)][0],
            uuid=by_slot[(gpu_id, start)][1],
            gpu_id=gpu_id,
            start=start,
            first_seen_at=now,
        )
        for allocation_id, gpu_id, start in placements
        if (gpu_id, start) in by_slot
    ]
    SliceDevice.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)
