"""Emails about requests, lease extensions and bookings: managers hear about what waits for them, requesters about
decisions. (The in-app inbox is written by the services themselves: services/notifications.py.)

Sent from Celery tasks after the change committed, so a slow mail server never holds a row lock and a
rolled-back change never sends mail.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import User
from django.core.mail import send_mail

from allocations.models import Allocation, Booking, ExtensionConsent, LeaseExtension
from tenants.models import Membership


def _link(allocation: Allocation) -> str:
    return f"{settings.SITE_URL}/requests/{allocation.pk}/"


def _manager_emails(tenant_id: int) -> list[str]:
    return sorted(
        User.objects.filter(memberships__tenant_id=tenant_id, memberships__role=Membership.Role.MANAGER, is_active=True)
        .exclude(email="")
        .values_list("email", flat=True)
    )


def notify_managers_of_pending_request(*, allocation_id: int) -> int:
    """Tell the tenant's managers that a request waits for them. Returns the number of recipients."""
    allocation = Allocation.objects.select_related("tenant", "pool", "requested_by").get(pk=allocation_id)
    if allocation.status != Allocation.Status.PENDING:
        return 0
    recipients = _manager_emails(allocation.tenant_id)
    if not recipients:
        return 0
    send_mail(
        subject=(
            f"[Fatia] {allocation.requested_by.get_username()} asks for {allocation.count} x "
            f"{allocation.profile} in {allocation.pool.name}"
        ),
        message=(
            f"Request #{allocation.pk} for {allocation.tenant.name} waits for a manager.\n"
            f"Purpose: {allocation.purpose}\nLease: {allocation.lease_hours} h\n"
            f"Cost: {allocation.compute_slices} compute slices, {allocation.memory_slices} memory slots\n"
            f"Why it was not approved automatically: {allocation.status_message}\n\n"
            f"Approve or reject: {_link(allocation)}\n"
        ),
        from_email=settings.DEFAULT_FROM_EMAIL,
        recipient_list=recipients,
    )
    return len(recipients)


def notify_requester_of_decision(*, allocation_id: int) -> int:
    """Tell the requester that a manager approved or rejected the request."""
    allocation = Allocation.objects.select_related("pool", "requested_by").get(pk=allocation_id)
    user = allocation.requested_by
    if not user.email or allocation.auto_approved:
        return 0
    verdict = "rejected" if allocation.status == Allocation.Status.REJECTED else "approved"
    reason = f"\nReason: {allocation.decision_reason}" if allocation.decision_reason else ""
    send_mail(
        subject=f"[Fatia] Your request #{allocation.pk} ({allocation.count} x {allocation.profile}) was {verdict}",
        message=f"Request #{allocation.pk} in {allocation.pool.name} was {verdict}.{reason}\n\n{_link(allocation)}\n",
        from_email=settings.DEFAULT_FROM_EMAIL,
        recipient_list=[user.email],
    )
    return 1


def notify_managers_of_pending_extension(*, extension_id: int) -> int:
    """Tell the tenant's managers that a lease extension waits for them (not its requester). Returns the
    number of recipients."""
    extension = LeaseExtension.objects.select_related("allocation__tenant", "allocation__pool", "requested_by").get(
        pk=extension_id
    )
    allocation = extension.allocation
    if extension.status != LeaseExtension.Status.PENDING:
        return 0
    if extension.consents.filter(status=ExtensionConsent.Status.PENDING).exists():
        return 0  # the bookings' owners answer first; the managers are told once they have agreed
    recipients = [e for e in _manager_emails(allocation.tenant_id) if e != extension.requested_by.email]
    if not recipients:
        return 0
    send_mail(
        subject=(
            f"[Fatia] {extension.requested_by.get_username()} asks to extend request #{allocation.pk} "
            f"by {extension.hours} h"
        ),
        message=(
            f"The lease of request #{allocation.pk} ({allocation.count} x {allocation.profile} in "
            f"{allocation.pool.name}, {allocation.tenant.name}) would run {extension.lease_hours_after} h in all, "
            f"past the {allocation.tenant.auto_approve_max_lease_hours} h that apply without a manager.\n"
            f"Purpose: {allocation.purpose}\n\n"
            f"Approve or reject: {settings.SITE_URL}/approvals/\n"
        ),
        from_email=settings.DEFAULT_FROM_EMAIL,
        recipient_list=recipients,
    )
    return len(recipients)


def notify_booking_owners_of_extension(*, consent_id: int) -> int:
    """Ask a booking's requester and its tenant's managers (by e-mail) whether a lease may run into its room."""
    consent = ExtensionConsent.objects.select_related(
        "booking__pool", "booking__requested_by", "extension__allocation__tenant", "extension__requested_by"
    ).get(pk=consent_id)
    if consent.status != ExtensionConsent.Status.PENDING:
        return 0
    booking, extension = consent.booking, consent.extension
    allocation = extension.allocation
    asker = extension.requested_by
    recipients = sorted(
        {e for e in [booking.requested_by.email, *_manager_emails(booking.tenant_id)] if e and e != asker.email}
    )
    if not recipients:
        return 0
    send_mail(
        subject=(
            f"[Fatia] {asker.get_username()} asks to use booking #{booking.pk}'s room for {extension.hours} h more"
        ),
        message=(
            f"Request #{allocation.pk} ({allocation.count} x {allocation.profile} in {booking.pool.name}, "
            f"{allocation.tenant.name}) would run {extension.hours} h longer, into the room your booking "
            f"#{booking.pk} ({booking.count} x {booking.profile}) holds from {booking.starts_at:%Y-%m-%d %H:%M} UTC.\n"
            "If you agree, the booking may find less room at its start.\n\n"
            f"Agree or refuse: {settings.SITE_URL}/bookings/#consent-{consent.pk}\n"
        ),
        from_email=settings.DEFAULT_FROM_EMAIL,
        recipient_list=recipients,
    )
    return len(recipients)


def notify_requester_of_extension_decision(*, extension_id: int) -> int:
    """Tell the requester that a manager approved or rejected their lease extension."""
    extension = LeaseExtension.objects.select_related("allocation", "requested_by").get(pk=extension_id)
    user = extension.requested_by
    if not user.email or extension.status not in (LeaseExtension.Status.APPROVED, LeaseExtension.Status.REJECTED):
        return 0
    verdict = extension.get_status_display().lower()
    reason = f"\nReason: {extension.decision_reason}" if extension.decision_reason else ""
    send_mail(
        subject=f"[Fatia] Extending request #{extension.allocation_id} by {extension.hours} h was {verdict}",
        message=(
            f"Your lease extension of request #{extension.allocation_id} by {extension.hours} h was {verdict}.{reason}"
            f"\n\n{_link(extension.allocation)}\n"
        ),
        from_email=settings.DEFAULT_FROM_EMAIL,
        recipient_list=[user.email],
    )
    return 1


def notify_requester_of_booking_decision(*, booking_id: int) -> int:
    """Tell whoever booked that a manager approved or rejected the booking (issue 15), as for a request. A booking
    approved automatically sends nothing (the requester saw it on the spot), nor one its requester decided."""
    booking = Booking.objects.select_related("pool", "requested_by", "decided_by").get(pk=booking_id)
    user = booking.requested_by
    if not user.email or booking.decided_by_id is None or booking.decided_by_id == user.pk:
        return 0
    if booking.status not in (Booking.Status.APPROVED, Booking.Status.REJECTED):
        return 0
    verdict = "rejected" if booking.status == Booking.Status.REJECTED else "approved"
    reason = f"\nReason: {booking.decision_reason}" if booking.decision_reason else ""
    window = f"{booking.starts_at:%Y-%m-%d %H:%M} to {booking.ends_at:%Y-%m-%d %H:%M} UTC"
    send_mail(
        subject=f"[Fatia] Your booking #{booking.pk} ({booking.count} x {booking.profile}) was {verdict}",
        message=(
            f"Booking #{booking.pk} in {booking.pool.name}, {window}, was {verdict} by "
            f"{booking.decided_by.get_username() if booking.decided_by else 'a manager'}.{reason}\n\n"
            f"{settings.SITE_URL}/bookings/#booking-{booking.pk}\n"
        ),
        from_email=settings.DEFAULT_FROM_EMAIL,
        recipient_list=[user.email],
    )
    return 1
