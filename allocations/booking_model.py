"""Bookings (issue 15, "reservations"): slices asked for ahead of time, for a window with a start and an end.

Kept out of models.py so the booking code stays in one place; models.py imports this module at its end so
Django finds the model in the `allocations` app.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.db import models
from django.db.models import Q

from tenants.models import Tenant, managed_tenant_ids_subquery, member_tenant_ids

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User


class BookingQuerySet(models.QuerySet["Booking"]):
    def for_user(self, user: User | AnonymousUser) -> BookingQuerySet:
        """Bookings of the tenants the user belongs to (all of them for staff)."""
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        return self.filter(tenant_id__in=member_tenant_ids(user))

    def managed_by(self, user: User | AnonymousUser) -> BookingQuerySet:
        """Bookings the user may approve or reject: their managed tenants' (all for staff)."""
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        return self.filter(tenant_id__in=managed_tenant_ids_subquery(user))

    def holding_room(self) -> BookingQuerySet:
        """Bookings whose window is promised but not yet built: they hold quota and room over their window.
        ACTIVE ones hold it through their allocation instead (counted as a lease)."""
        return self.filter(status__in=Booking.HOLDING)


class Booking(models.Model):
    """`count` MIG slices of `profile` in `pool` for the window [starts_at, ends_at).

    PENDING -> APPROVED -> ACTIVE (its allocation made and provisioned at starts_at) -> ENDED (the allocation's
    lease ran out at ends_at, or it was released); PENDING -> REJECTED; PENDING or APPROVED -> CANCELLED;
    APPROVED -> FAILED when there was no room at the start. PENDING and APPROVED bookings hold the tenant's quota
    and the pool's room over their window (services/booking_window.py checks every new one against them).
    Only MIG pools: time-sliced and MPS pools are refused (their room is memory, not slots).
    """

    class Status(models.TextChoices):
        PENDING = "pending", "Pending approval"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        CANCELLED = "cancelled", "Cancelled"
        ACTIVE = "active", "Active"
        ENDED = "ended", "Ended"
        FAILED = "failed", "Failed"

    HOLDING = (Status.PENDING, Status.APPROVED)

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="bookings")
    pool = models.ForeignKey("allocations.NodePool", on_delete=models.PROTECT, related_name="bookings")
    profile = models.CharField(max_length=32)
    count = models.PositiveIntegerField()
    compute_slices = models.PositiveIntegerField()
    memory_slices = models.PositiveIntegerField()
    starts_at = models.DateTimeField(db_index=True)
    ends_at = models.DateTimeField()
    purpose = models.CharField(max_length=500)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING, db_index=True)
    auto_approved = models.BooleanField(default=False)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = models.TextField(blank=True)
    status_message = models.TextField(blank=True)
    allocation = models.OneToOneField(
        "allocations.Allocation", null=True, blank=True, on_delete=models.PROTECT, related_name="booking"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = BookingQuerySet.as_manager()

    class Meta:
        ordering = ["starts_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(ends_at__gt=models.F("starts_at")),
                name="booking_ends_after_start",
                violation_error_message="A booking must end after it starts.",
            ),
            models.CheckConstraint(
                condition=Q(count__gte=1),
                name="booking_count_positive",
                violation_error_message="Count must be at least 1.",
            ),
        ]

    def __str__(self) -> str:
        return f"Booking #{self.pk}: {self.count}x {self.profile} in {self.pool_id} for {self.tenant}"


class ExtensionConsentQuerySet(models.QuerySet["ExtensionConsent"]):
    def asked_of(self, user: User | AnonymousUser) -> ExtensionConsentQuerySet:
        """Consents the user may give or refuse: asked of bookings they made or whose tenant they manage (all for
        staff)."""
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        return self.filter(Q(booking__requested_by=user) | Q(booking__tenant_id__in=managed_tenant_ids_subquery(user)))

    def for_user(self, user: User | AnonymousUser) -> ExtensionConsentQuerySet:
        """Consents the user can see: asked of their tenants' bookings, or for their tenants' leases."""
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        tenants = member_tenant_ids(user)
        return self.filter(Q(booking__tenant_id__in=tenants) | Q(extension__allocation__tenant_id__in=tenants))


class ExtensionConsent(models.Model):
    """A lease extension that would take room a booking holds waits for that booking's owner to agree (issue 15).

    One row per booking in the way (services/extension_consents.py). PENDING -> AGREED or REFUSED by the booking's
    requester or its tenant's managers; a refusal rejects the extension, and the extension is applied once every
    consent is AGREED and the lease's own policy allows it. Agreeing means the booking may find less room at its
    start. Locked after the extension's allocation and the extension, never before.
    """

    class Status(models.TextChoices):
        PENDING = "pending", "Waiting for the booking's owner"
        AGREED = "agreed", "Agreed"
        REFUSED = "refused", "Refused"
        CANCELLED = "cancelled", "Cancelled (the extension was decided otherwise)"

    extension = models.ForeignKey("allocations.LeaseExtension", on_delete=models.CASCADE, related_name="consents")
    booking = models.ForeignKey(Booking, on_delete=models.CASCADE, related_name="extension_consents")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ExtensionConsentQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["extension", "booking"], name="extension_consent_unique_booking"),
        ]

    def __str__(self) -> str:
        return f"Consent of booking #{self.booking_id} to extension #{self.extension_id}: {self.status}"
