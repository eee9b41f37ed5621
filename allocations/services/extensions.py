"""Lease extensions: the same policy as a new request, applied to a longer lease.

An extension that keeps the whole lease within the tenant's auto_approve_max_lease_hours is applied at
once, as is one a tenant manager asks for (they could approve it anyway); a longer one waits for a
manager, exactly like a new request past the policy would. Rows are locked allocation first, then the
extension (services/locks.py); the lease changes only while the allocation's row is locked.

An extension that would take room a booking holds is refused, unless the requester asks the bookings' owners
(`ask_booking_owner`): it then waits PENDING for their consent first (services/extension_consents.py).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from allocations.models import Allocation, ExtensionConsent, LeaseExtension, Notification
from allocations.services.booking_guard import BookingsInTheWay, bookings_in_the_way
from allocations.services.locks import lock_allocation, lock_lease_extension
from allocations.services.notifications import notify_users, tenant_manager_ids
from allocations.services.outbox import enqueue_task
from tenants.errors import InvalidInput, InvalidTransition, NotAllowed
from tenants.selectors import can_manage_tenant
from tenants.services import record_audit_event

if TYPE_CHECKING:
    from django.contrib.auth.models import User

Status = LeaseExtension.Status
AllocationStatus = Allocation.Status


def _queue(task_name: str, extension_id: int) -> None:
    enqueue_task(f"allocations.tasks.{task_name}", extension_id)


def _lease_fields(allocation: Allocation) -> dict[str, Any]:
    expires = allocation.lease_expires_at
    return {"lease_hours": allocation.lease_hours, "lease_expires_at": expires.isoformat() if expires else None}


def _check_maximum(allocation: Allocation, hours: int) -> int:
    """The whole lease after adding `hours`; InvalidInput when it passes the tenant's maximum."""
    total = allocation.lease_hours + hours
    maximum = allocation.tenant.max_lease_hours
    if hours < 1 or total > maximum:
        raise InvalidInput(
            {"hours": [f"The whole lease may be at most {maximum} hours ({allocation.lease_hours} used so far)."]}
        )
    return total


def bookings_blocking(allocation: Allocation, hours: int, extension_id: int | None = None) -> BookingsInTheWay | None:
    """The bookings whose room `hours` more would take (services/booking_guard.py; locks the pool after the
    allocation), leaving out those whose owners agreed to extension `extension_id`."""
    if allocation.lease_expires_at is None:
        return None
    agreed: set[int] = set()
    if extension_id is not None:
        agreed = set(
            ExtensionConsent.objects.filter(
                extension_id=extension_id, status=ExtensionConsent.Status.AGREED
            ).values_list("booking_id", flat=True)
        )
    return bookings_in_the_way(
        allocation=allocation, new_end=allocation.lease_expires_at + timedelta(hours=hours), agreed=agreed
    )


def _check_hours(allocation: Allocation, hours: int, extension_id: int | None = None) -> int:
    """The whole lease after adding `hours`; InvalidInput when it passes the tenant's maximum, or when the longer
    lease would take a booking's room whose owner has not agreed."""
    total = _check_maximum(allocation, hours)
    booked = bookings_blocking(allocation, hours, extension_id)
    if booked is not None:
        raise InvalidInput({"hours": [booked.message]})
    return total


def applies_without_manager(allocation: Allocation, requester: User, total_hours: int) -> bool:
    """The lease's own policy: a manager's extension, or one within the auto-approve lease, needs nobody else."""
    return can_manage_tenant(requester, allocation.tenant_id) or (
        total_hours <= allocation.tenant.auto_approve_max_lease_hours
    )


def _apply(allocation: Allocation, hours: int) -> None:
    """Add the hours to a locked ACTIVE allocation and re-arm its expiry warning."""
    assert allocation.lease_expires_at is not None  # noqa: S101 (ACTIVE allocations have one)
    allocation.lease_hours += hours
    allocation.lease_expires_at = allocation.lease_expires_at + timedelta(hours=hours)
    allocation.expiry_warning_sent_at = None
    allocation.save(update_fields=["lease_hours", "lease_expires_at", "expiry_warning_sent_at", "updated_at"])


def _link(allocation: Allocation) -> str:
    return reverse("request-detail", args=[allocation.pk])


@transaction.atomic
def request_lease_extension(
    *, allocation_id: int, hours: int, actor: User, ask_booking_owner: bool = False
) -> LeaseExtension:
    """Ask to add `hours` to an ACTIVE lease. The requester and the tenant's managers may ask.

    APPROVED at once (the lease grows now) when the whole lease stays within the tenant's
    auto_approve_max_lease_hours or the actor manages the tenant; PENDING otherwise, and the tenant's
    managers are notified (inbox now, e-mail after commit). When the longer lease would take a booking's room,
    InvalidInput, or with `ask_booking_owner` PENDING until the bookings' owners agree (they are asked first).
    Locks the allocation. Raises NotAllowed, InvalidTransition (the lease is not running) or InvalidInput (past
    the tenant's maximum lease, booked room, or another extension of this lease already waits).
    """
    allocation = lock_allocation(allocation_id=allocation_id)
    manages = can_manage_tenant(actor, allocation.tenant_id)
    if not (manages or allocation.requested_by_id == actor.pk):
        raise NotAllowed("Only the requester or a tenant manager can extend this lease.")
    if allocation.status != AllocationStatus.ACTIVE or allocation.lease_expires_at is None:
        raise InvalidTransition(current=allocation.status, target="extended")
    total = _check_maximum(allocation, hours)
    booked = bookings_blocking(allocation, hours)
    if booked is not None and not ask_booking_owner:
        raise InvalidInput({"hours": [booked.message]})
    if booked is not None:
        return _ask_booking_owners(allocation, hours, total, booked, actor)
    now = timezone.now()
    if manages or total <= allocation.tenant.auto_approve_max_lease_hours:
        before = _lease_fields(allocation)
        _apply(allocation, hours)
        extension = LeaseExtension.objects.create(
            allocation=allocation,
            hours=hours,
            status=Status.APPROVED,
            auto_approved=not manages,
            requested_by_id=actor.pk,
            decided_by_id=actor.pk if manages else None,
            decided_at=now,
            lease_hours_after=total,
        )
        record_audit_event(
            actor=actor,
            verb="extend",
            obj=allocation,
            tenant_id=allocation.tenant_id,
            before=before,
            after={**_lease_fields(allocation), "hours": hours, "extension": extension.pk},
        )
        return extension
    extension = _pending_extension(
        allocation, hours, total, actor, auto_approve_max_lease_hours=allocation.tenant.auto_approve_max_lease_hours
    )
    notify_users(
        recipient_ids=tenant_manager_ids(allocation.tenant_id),
        kind=Notification.Kind.EXTENSION_PENDING,
        text=(
            f"{actor.get_username()} asks to extend the lease of request #{allocation.pk} "
            f"({allocation.count} × {allocation.profile}, {allocation.tenant.name}) by {hours} h, "
            f"to {total} h in all."
        ),
        link=reverse("approvals"),
        actor=actor,
    )
    _queue("notify_managers_of_extension_task", extension.pk)
    return extension


def _pending_extension(allocation: Allocation, hours: int, total: int, actor: User, **audited: Any) -> LeaseExtension:
    """A PENDING extension of `hours` (the lease `total` hours after it), audited as asked for with `audited` (what
    it waits for); refused while another one waits."""
    _refuse_if_waiting(allocation)
    extension = LeaseExtension.objects.create(
        allocation=allocation, hours=hours, requested_by_id=actor.pk, lease_hours_after=total
    )
    record_audit_event(
        actor=actor,
        verb="request_extension",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        before=_lease_fields(allocation),
        after={"hours": hours, "lease_hours": total, "extension": extension.pk, **audited},
    )
    return extension


def _refuse_if_waiting(allocation: Allocation) -> None:
    # Checked under the allocation's lock, which every extension of it is created under: no race. The
    # partial unique constraint backs this up.
    waiting = LeaseExtension.objects.filter(allocation_id=allocation.pk, status=Status.PENDING).first()
    if waiting is not None:
        owners = sorted(
            waiting.consents.filter(status=ExtensionConsent.Status.PENDING).values_list("booking_id", flat=True)
        )
        whom = f"the owner of booking {', '.join(f'#{pk}' for pk in owners)}" if owners else "a manager"
        raise InvalidInput(
            {"hours": [f"An extension by {waiting.hours} h already waits for {whom}; ask again once it is decided."]}
        )


def _ask_booking_owners(
    allocation: Allocation, hours: int, total: int, booked: BookingsInTheWay, actor: User
) -> LeaseExtension:
    """A PENDING extension that first waits for the owners of the bookings in the way (one consent each)."""
    from allocations.services.extension_consents import ask_consents  # noqa: PLC0415 (that module imports this one)

    extension = _pending_extension(allocation, hours, total, actor, bookings=list(booked.booking_ids))
    ask_consents(allocation=allocation, extension=extension, booking_ids=booked.booking_ids, actor=actor)
    return extension


def apply_extension(
    allocation: Allocation,
    extension: LeaseExtension,
    actor: User,
    *,
    auto_approved: bool,
    reason: str = "",
    verdict: str = "approved",
) -> None:
    """PENDING -> APPROVED with the hours added now, audited, the requester told. Both rows locked and checked.
    `actor` decided (a manager, or the last booking owner to agree when the lease's policy needed no manager)."""
    before = _lease_fields(allocation)
    _apply(allocation, extension.hours)
    extension.status = Status.APPROVED
    extension.auto_approved = auto_approved
    extension.decided_by_id = actor.pk
    extension.decided_at = timezone.now()
    extension.decision_reason = reason.strip()
    extension.save(
        update_fields=[
            "status",
            "auto_approved",
            "decided_by",
            "decided_at",
            "decision_reason",
            "lease_hours_after",
            "updated_at",
        ]
    )
    record_audit_event(
        actor=actor,
        verb="approve_extension",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        before=before,
        after={
            **_lease_fields(allocation),
            "hours": extension.hours,
            "extension": extension.pk,
            "reason": extension.decision_reason,
        },
    )
    _tell_requester(allocation, extension, actor, verdict)


def _locked_pair(extension_id: int) -> tuple[Allocation, LeaseExtension]:
    """Lock an extension's allocation, then the extension. Raises LeaseExtension.DoesNotExist."""
    allocation_id = LeaseExtension.objects.filter(pk=extension_id).values_list("allocation_id", flat=True).get()
    allocation = lock_allocation(allocation_id=allocation_id)
    return allocation, lock_lease_extension(extension_id=extension_id)


def _decide(extension: LeaseExtension, status: str, actor: User, reason: str) -> None:
    extension.status = status
    extension.decided_by_id = actor.pk
    extension.decided_at = timezone.now()
    extension.decision_reason = reason.strip()
    extension.save(
        update_fields=["status", "decided_by", "decided_at", "decision_reason", "lease_hours_after", "updated_at"]
    )


def _tell_requester(allocation: Allocation, extension: LeaseExtension, actor: User, verdict: str) -> None:
    reason = f" Reason: {extension.decision_reason}" if extension.decision_reason else ""
    who = actor.get_username()
    notify_users(
        recipient_ids=[extension.requested_by_id],
        kind=Notification.Kind.EXTENSION_DECIDED,
        text=(f"{who} {verdict} extending the lease of request #{allocation.pk} by {extension.hours} h.{reason}"),
        link=_link(allocation),
        actor=actor,
    )
    _queue("notify_requester_of_extension_task", extension.pk)


@transaction.atomic
def approve_lease_extension(*, extension_id: int, actor: User, reason: str = "") -> LeaseExtension:
    """PENDING -> APPROVED: add the hours to the lease now. Tenant managers and platform admins only.

    Locks the allocation, then the extension. The tenant's maximum lease is checked again against the
    lease as it is now. Notifies the requester. Raises NotAllowed, InvalidTransition (decided already,
    or the lease ended) or InvalidInput."""
    allocation, extension = _locked_pair(extension_id)
    if not can_manage_tenant(actor, allocation.tenant_id):
        raise NotAllowed("Only the tenant's managers can approve lease extensions.")
    if extension.status != Status.PENDING:
        raise InvalidTransition(current=extension.status, target=Status.APPROVED)
    if allocation.status != AllocationStatus.ACTIVE or allocation.lease_expires_at is None:
        raise InvalidTransition(current=allocation.status, target="extended")
    asked = list(
        ExtensionConsent.objects.filter(extension_id=extension.pk, status=ExtensionConsent.Status.PENDING)
        .order_by("booking_id")
        .values_list("booking_id", flat=True)
    )
    if asked:
        names = ", ".join(f"#{pk}" for pk in asked)
        raise InvalidInput({"non_field_errors": [f"This extension still waits for the owner of booking {names}."]})
    extension.lease_hours_after = _check_hours(allocation, extension.hours, extension.pk)
    apply_extension(allocation, extension, actor, auto_approved=False, reason=reason)
    return extension


@transaction.atomic
def reject_lease_extension(*, extension_id: int, actor: User, reason: str) -> LeaseExtension:
    """PENDING -> REJECTED with a reason; the lease stays as it is. Tenant managers and platform admins only.

    Locks the allocation, then the extension. Notifies the requester. Raises NotAllowed, InvalidInput
    (no reason) or InvalidTransition."""
    allocation, extension = _locked_pair(extension_id)
    if not can_manage_tenant(actor, allocation.tenant_id):
        raise NotAllowed("Only the tenant's managers can reject lease extensions.")
    if not reason.strip():
        raise InvalidInput({"reason": ["Say why the extension is rejected."]})
    if extension.status != Status.PENDING:
        raise InvalidTransition(current=extension.status, target=Status.REJECTED)
    _reject(allocation, extension, actor, reason, told="rejected")
    return extension


def reject_for_booking(allocation: Allocation, extension: LeaseExtension, actor: User, reason: str) -> None:
    """PENDING -> REJECTED because a booking's owner refused (services/extension_consents.py); rows locked."""
    _reject(allocation, extension, actor, reason, told="refused")


def _reject(allocation: Allocation, extension: LeaseExtension, actor: User, reason: str, *, told: str) -> None:
    """PENDING -> REJECTED, its consent questions called off, audited, the requester told; rows locked."""
    _decide(extension, Status.REJECTED, actor, reason)
    cancel_consents(extension_id=extension.pk)
    record_audit_event(
        actor=actor,
        verb="reject_extension",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        before={"lease_hours": allocation.lease_hours},
        after={"hours": extension.hours, "extension": extension.pk, "reason": extension.decision_reason},
    )
    _tell_requester(allocation, extension, actor, told)


def cancel_consents(*, extension_id: int) -> int:
    """PENDING consents of an extension decided otherwise -> CANCELLED (they are locked after it)."""
    now = timezone.now()
    return ExtensionConsent.objects.filter(extension_id=extension_id, status=ExtensionConsent.Status.PENDING).update(
        status=ExtensionConsent.Status.CANCELLED, decided_at=now, updated_at=now
    )


def cancel_pending_extensions(*, allocation: Allocation) -> int:
    """PENDING -> CANCELLED for the extensions of a lease that is ending, and their consents. The caller holds the
    allocation's lock (so these rows are locked after it, in the usual order). Returns how many were cancelled."""
    now = timezone.now()
    ExtensionConsent.objects.filter(
        extension__allocation_id=allocation.pk, status=ExtensionConsent.Status.PENDING
    ).update(status=ExtensionConsent.Status.CANCELLED, decided_at=now, updated_at=now)
    return LeaseExtension.objects.filter(allocation_id=allocation.pk, status=Status.PENDING).update(
        status=Status.CANCELLED, decided_at=now, updated_at=now
    )
