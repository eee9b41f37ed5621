"""A lease extension that would take a booking's room waits for the booking's owner to agree (issue 15).

`request_lease_extension(..., ask_booking_owner=True)` creates the PENDING extension and one consent per booking in
the way (`ask_consents`). The booking's requester or a manager of its tenant agrees or refuses:
- a refusal rejects the extension, with the reason, and cancels the other consents;
- once the longer lease no longer takes the room of a booking that has not agreed (all agreed, or the others were
  cancelled meanwhile), the lease's own policy decides: applied at once when it needed no manager, otherwise it
  waits for the tenant's managers as any long extension does. A booking that appears meanwhile is asked too.
Agreeing means the booking may find less room at its start (it then waits in the queue, or fails; docs/bookings.md).
Locks: the extension's allocation, the extension, the consent, then the pool (services/locks.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from allocations.models import Allocation, Booking, ExtensionConsent, LeaseExtension, Notification
from allocations.services.extensions import (
    applies_without_manager,
    bookings_blocking,
    cancel_consents,
)
from allocations.services.locks import lock_allocation, lock_extension_consent, lock_lease_extension
from allocations.services.notifications import notify_users, tenant_manager_ids
from allocations.services.outbox import enqueue_task
from tenants.errors import InvalidInput, InvalidTransition, NotAllowed
from tenants.selectors import can_manage_tenant
from tenants.services import record_audit_event

if TYPE_CHECKING:
    from django.contrib.auth.models import User

Status = ExtensionConsent.Status


def may_decide_consent(user: User, booking: Booking) -> bool:
    """The booking's requester, its tenant's managers and platform admins speak for a booking."""
    return booking.requested_by_id == user.pk or can_manage_tenant(user, booking.tenant_id)


def ask_consents(
    *, allocation: Allocation, extension: LeaseExtension, booking_ids: Iterable[int], actor: User
) -> list[ExtensionConsent]:
    """One PENDING consent per booking not asked yet; their owners are told (inbox now, e-mail after commit).
    The caller holds the allocation's and the extension's locks."""
    asked = set(ExtensionConsent.objects.filter(extension=extension).values_list("booking_id", flat=True))
    made = []
    for booking in Booking.objects.filter(pk__in=booking_ids).exclude(pk__in=asked).select_related("tenant"):
        consent = ExtensionConsent.objects.create(extension=extension, booking=booking)
        made.append(consent)
        recipients = {booking.requested_by_id, *tenant_manager_ids(booking.tenant_id)} - {actor.pk}
        notify_users(
            recipient_ids=sorted(recipients),
            kind=Notification.Kind.EXTENSION_PENDING,
            text=(
                f"{actor.get_username()} asks to extend request #{allocation.pk} ({allocation.count} × "
                f"{allocation.profile}, {allocation.tenant.name}) by {extension.hours} h, into the room your booking "
                f"#{booking.pk} holds from {booking.starts_at:%Y-%m-%d %H:%M} UTC. Agree or refuse."
            ),
            link=reverse("bookings") + f"#booking-{booking.pk}",
            actor=actor,
        )
        record_audit_event(
            actor=actor,
            verb="ask_booking_consent",
            obj=booking,
            tenant_id=booking.tenant_id,
            after={"extension": extension.pk, "allocation": allocation.pk, "hours": extension.hours},
        )
        enqueue_task("allocations.tasks.notify_booking_owners_of_extension_task", consent.pk)
    return made


def _locked(consent_id: int) -> tuple[Allocation, LeaseExtension, ExtensionConsent]:
    """Lock the consent's allocation, its extension, then the consent. Raises ExtensionConsent.DoesNotExist."""
    allocation_id, extension_id = (
        ExtensionConsent.objects.filter(pk=consent_id).values_list("extension__allocation_id", "extension_id").get()
    )
    allocation = lock_allocation(allocation_id=allocation_id)
    extension = lock_lease_extension(extension_id=extension_id)
    return allocation, extension, lock_extension_consent(consent_id=consent_id)


def _checked(consent: ExtensionConsent, extension: LeaseExtension, allocation: Allocation, actor: User) -> None:
    if not may_decide_consent(actor, consent.booking):
        raise NotAllowed("Only the booking's requester or its tenant's managers can answer for it.")
    if consent.status != Status.PENDING:
        raise InvalidTransition(current=consent.status, target="decided")
    if extension.status != LeaseExtension.Status.PENDING or allocation.status != Allocation.Status.ACTIVE:
        raise InvalidTransition(current=extension.status, target="decided")


def _decide(consent: ExtensionConsent, status: str, actor: User, reason: str) -> None:
    consent.status = status
    consent.decided_by_id = actor.pk
    consent.decided_at = timezone.now()
    consent.decision_reason = reason.strip()
    consent.save(update_fields=["status", "decided_by", "decided_at", "decision_reason", "updated_at"])


@transaction.atomic
def agree_to_extension(*, consent_id: int, actor: User, reason: str = "") -> ExtensionConsent:
    """PENDING -> AGREED. When no booking that has not agreed stays in the way, the extension goes on under its
    lease's policy: applied now, or on to the tenant's managers. Raises NotAllowed or InvalidTransition."""
    from allocations.services.extensions import apply_extension  # noqa: PLC0415 (one module, one job each)

    allocation, extension, consent = _locked(consent_id)
    _checked(consent, extension, allocation, actor)
    _decide(consent, Status.AGREED, actor, reason)
    record_audit_event(
        actor=actor,
        verb="agree_to_extension",
        obj=consent.booking,
        tenant_id=consent.booking.tenant_id,
        after={"extension": extension.pk, "allocation": allocation.pk, "reason": consent.decision_reason},
    )
    still = bookings_blocking(allocation, extension.hours, extension.pk)
    if still is not None:
        # Another booking's owner has not answered, or a booking made meanwhile needs asking.
        ask_consents(allocation=allocation, extension=extension, booking_ids=still.booking_ids, actor=actor)
        return consent
    cancel_consents(extension_id=extension.pk)
    if applies_without_manager(allocation, extension.requested_by, extension.lease_hours_after):
        apply_extension(allocation, extension, actor, auto_approved=True, verdict="agreed to")
    else:
        notify_users(
            recipient_ids=tenant_manager_ids(allocation.tenant_id),
            kind=Notification.Kind.EXTENSION_PENDING,
            text=(
                f"The bookings' owners agree to extending request #{allocation.pk} by {extension.hours} h; "
                "it now waits for a manager."
            ),
            link=reverse("approvals"),
            actor=actor,
        )
        enqueue_task("allocations.tasks.notify_managers_of_extension_task", extension.pk)
    return consent


@transaction.atomic
def refuse_extension(*, consent_id: int, actor: User, reason: str) -> ExtensionConsent:
    """PENDING -> REFUSED with a reason: the extension is rejected and its other consents cancelled; the requester
    is told. Raises NotAllowed, InvalidInput (no reason) or InvalidTransition."""
    from allocations.services.extensions import reject_for_booking  # noqa: PLC0415

    allocation, extension, consent = _locked(consent_id)
    _checked(consent, extension, allocation, actor)
    if not reason.strip():
        raise InvalidInput({"reason": ["Say why the booking keeps its room."]})
    _decide(consent, Status.REFUSED, actor, reason)
    record_audit_event(
        actor=actor,
        verb="refuse_extension",
        obj=consent.booking,
        tenant_id=consent.booking.tenant_id,
        after={"extension": extension.pk, "allocation": allocation.pk, "reason": consent.decision_reason},
    )
    reject_for_booking(
        allocation, extension, actor, f"The owner of booking #{consent.booking_id} keeps its room: {reason.strip()}"
    )
    return consent
