"""Lease expiry and the warning (e-mail and inbox) before it. Both run from Celery beat."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from allocations.models import Allocation, Notification
from allocations.services.extensions import cancel_pending_extensions
from allocations.services.locks import lock_allocation
from allocations.services.notifications import notify_users
from allocations.services.outbox import enqueue_task
from tenants.services import record_audit_event

logger = logging.getLogger(__name__)
Status = Allocation.Status


def warning_window(lease_hours: int) -> timedelta:
    """How long before expiry the owner is warned: FATIA_LEASE_WARNING_HOURS, but never more than a
    quarter of the lease, so a two-hour lease is not warned about the moment it starts."""
    return min(timedelta(hours=settings.FATIA_LEASE_WARNING_HOURS), timedelta(hours=lease_hours) / 4)


def expire_due_leases(*, now: datetime | None = None) -> list[int]:
    """Start the release of every active allocation whose lease has ended. Returns their ids."""
    now = now or timezone.now()
    due = list(
        Allocation.objects.filter(status=Status.ACTIVE, lease_expires_at__lte=now)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    return [pk for pk in due if expire_allocation(allocation_id=pk, now=now)]


@transaction.atomic
def expire_allocation(*, allocation_id: int, now: datetime) -> bool:
    """ACTIVE (lease ended) -> RELEASING, ending in EXPIRED. False when someone else got there first."""
    allocation = lock_allocation(allocation_id=allocation_id)
    if allocation.status != Status.ACTIVE or allocation.lease_expires_at is None or allocation.lease_expires_at > now:
        return False
    allocation.status = Status.RELEASING
    allocation.end_state = Status.EXPIRED
    allocation.status_message = "The lease ended; releasing the slices."
    allocation.save(update_fields=["status", "end_state", "status_message", "updated_at"])
    cancel_pending_extensions(allocation=allocation)
    record_audit_event(
        actor=None,
        verb="expire",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        before={"status": Status.ACTIVE},
        after={"status": Status.RELEASING, "lease_expires_at": allocation.lease_expires_at.isoformat()},
    )
    enqueue_task("allocations.tasks.teardown_allocation_task", allocation.pk)
    return True


def warn_expiring_leases(*, now: datetime | None = None) -> list[int]:
    """Email the requester of each active allocation entering its warning window, once per lease."""
    now = now or timezone.now()
    horizon = now + timedelta(hours=settings.FATIA_LEASE_WARNING_HOURS)
    candidates = list(
        Allocation.objects.filter(
            status=Status.ACTIVE,
            expiry_warning_sent_at__isnull=True,
            lease_expires_at__gt=now,
            lease_expires_at__lte=horizon,
        )
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    return [pk for pk in candidates if warn_lease_expiry(allocation_id=pk, now=now)]


@transaction.atomic
def warn_lease_expiry(*, allocation_id: int, now: datetime) -> bool:
    """Send the warning (e-mail and inbox) and mark it sent in one transaction: if sending fails, the next
    run retries."""
    allocation = lock_allocation(allocation_id=allocation_id)
    expires = allocation.lease_expires_at
    if (
        allocation.status != Status.ACTIVE
        or allocation.expiry_warning_sent_at is not None
        or expires is None
        or expires - now > warning_window(allocation.lease_hours)
    ):
        return False
    user = allocation.requested_by
    minutes = int((expires - now).total_seconds() // 60)
    if user.email:
        send_mail(
            subject=(
                f"[Fatia] Your {allocation.count} x {allocation.profile} lease ends in "
                f"{minutes // 60} h {minutes % 60} min"
            ),
            message=(
                f"Hello {user.get_username()},\n\n"
                f"Request #{allocation.pk} ({allocation.count} x {allocation.profile} in pool {allocation.pool.name}, "
                f"claim {allocation.claim_name or '-'}) ends at {expires:%Y-%m-%d %H:%M} UTC.\n"
                f"Extend or release it: {settings.SITE_URL}/requests/{allocation.pk}/\n"
            ),
            from_email=settings.DEFAULT_FROM_EMAIL,
            recipient_list=[user.email],
        )
    else:
        logger.info("allocation %s: requester has no email address; warning recorded only", allocation.pk)
    notify_users(
        recipient_ids=[user.pk],
        kind=Notification.Kind.LEASE_EXPIRING,
        text=(
            f"The lease of request #{allocation.pk} ({allocation.count} × {allocation.profile} in "
            f"{allocation.pool.name}) ends at {expires:%Y-%m-%d %H:%M} UTC. Extend or release it."
        ),
        link=reverse("request-detail", args=[allocation.pk]),
        actor=None,
    )
    allocation.expiry_warning_sent_at = now
    allocation.save(update_fields=["expiry_warning_sent_at", "updated_at"])
    record_audit_event(
        actor=None,
        verb="warn_expiry",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        after={"lease_expires_at": expires.isoformat(), "email": bool(user.email)},
    )
    return True
