"""Bookings (issue 15): ask for slices ahead of time, approved like a request, built at their start.

Rows are locked booking first, then pool, then quota (services/locks.py), so two bookings for the last room
are decided one after the other and exactly one gets it. Quota and room over the window are checked at
creation and again at approval (services/booking_window.py). At its start a booking becomes an ordinary
approved request whose lease ends with the window (`start_booking`, driven by the beat); the request is then
provisioned through the outbox like any other.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from allocations.costs import Cost, UnknownProfile, slice_cost
from allocations.models import Allocation, Booking, NodePool, Notification
from allocations.placement import empty_pool_fleet, offered_profiles, plan_slices
from allocations.queue_eta import never_fits
from allocations.selectors import quota_shortfall
from allocations.services import booking_window as window
from allocations.services.locks import lock_booking, lock_pool, lock_quota
from allocations.services.notifications import notify_users, tenant_manager_ids
from allocations.services.outbox import enqueue_task
from allocations.services.quotas import reserve_quota
from tenants.errors import InvalidInput, InvalidTransition, NotAllowed
from tenants.models import Tenant
from tenants.selectors import can_manage_tenant, can_use_tenant
from tenants.services import record_audit_event

if TYPE_CHECKING:
    from django.contrib.auth.models import User

Status = Booking.Status


def _link(booking: Booking) -> str:
    return reverse("bookings") + f"#booking-{booking.pk}"


def _what(booking: Booking) -> str:
    return (
        f"booking #{booking.pk} ({booking.count} × {booking.profile} in {booking.pool.name}, "
        f"{booking.starts_at:%Y-%m-%d %H:%M}-{booking.ends_at:%Y-%m-%d %H:%M} UTC)"
    )


def _validate(
    *, tenant: Tenant, pool: NodePool, profile: str, count: int, starts_at: datetime, ends_at: datetime, purpose: str
) -> Cost:
    now = timezone.now()
    errors: dict[str, list[str]] = {}
    if pool.is_shared:
        raise InvalidInput(
            {"pool": [f"{pool.name} shares whole GPUs by memory; bookings are for MIG pools only. Ask for a request."]}
        )
    if profile not in pool.profiles:
        errors["profile"] = [f"{profile!r} is not offered in {pool.name}. Choose one of: {', '.join(pool.profiles)}."]
    elif profile not in offered_profiles(pool):
        errors["profile"] = [f"{profile!r} cannot be placed in {pool.name} yet: no node publishes its figures."]
    if not 1 <= count <= settings.FATIA_MAX_SLICES_PER_REQUEST:
        errors["count"] = [f"Ask for between 1 and {settings.FATIA_MAX_SLICES_PER_REQUEST} slices."]
    elif "profile" not in errors:
        # As a request (services/requests.py): one no node could ever hold is refused, not said to find a full pool.
        why = never_fits(empty_pool_fleet(pool), pool_name=pool.name, pool=pool.slug, profile=profile, count=count)
        if why is not None:
            errors["count"] = [f"{why}. Try fewer slices or a smaller profile."]
    horizon = settings.FATIA_BOOKING_HORIZON_DAYS
    if starts_at <= now:
        errors["starts_at"] = ["A booking starts in the future; for slices now, make a request."]
    elif starts_at > now + timedelta(days=horizon):
        errors["starts_at"] = [f"Book at most {horizon} days ahead."]
    if ends_at <= starts_at:
        errors["ends_at"] = ["The booking must end after it starts."]
    elif window.window_hours(starts_at, ends_at) > tenant.max_lease_hours:
        errors["ends_at"] = [f"A booking may last at most {tenant.max_lease_hours} hours for {tenant.name}."]
    if not purpose.strip():
        errors["purpose"] = ["Say what the slices are for."]
    elif len(purpose) > 500:
        errors["purpose"] = ["Keep the purpose under 500 characters."]
    if errors:
        raise InvalidInput(errors)
    try:
        return slice_cost(gpu_model=pool.gpu_model, profile=profile, count=count)
    except UnknownProfile as exc:
        raise InvalidInput({"profile": [str(exc)]}) from exc


def _check_window(booking: Booking) -> None:
    """Quota and room over the booking's window, against every other booking and the running leases.
    Caller holds the pool's lock; this locks the quota row. Raises InvalidInput naming what blocks it."""
    pool = booking.pool
    quota = lock_quota(tenant_id=booking.tenant_id, pool_id=pool.pk)
    rooms = window.booked_rooms(pool, exclude_booking_id=booking.pk)
    leases = window.pool_leases(pool)
    candidate = window.BookedRoom(
        booking_id=booking.pk or 0,
        tenant_id=booking.tenant_id,
        profile=booking.profile,
        count=booking.count,
        compute_slices=booking.compute_slices,
        memory_slices=booking.memory_slices,
        starts_at=booking.starts_at,
        ends_at=booking.ends_at,
    )
    short = window.quota_conflict(quota=quota, pool=pool, candidate=candidate, rooms=rooms, leases=leases)
    if short is not None:
        raise InvalidInput({"count": [short]})
    overlapping = [r for r in rooms if r.starts_at < booking.ends_at and booking.starts_at < r.ends_at]
    full = window.capacity_conflict(
        pool=pool,
        candidate=candidate,
        rooms=overlapping,
        at=window.moments(booking.starts_at, booking.ends_at, overlapping),
        leases=leases,
    )
    if full is not None:
        raise InvalidInput({"starts_at": [full]})


@transaction.atomic
def request_booking(
    *,
    tenant_id: int,
    pool_id: int,
    profile: str,
    count: int,
    starts_at: datetime,
    ends_at: datetime,
    purpose: str,
    actor: User,
) -> Booking:
    """Book `count` x `profile` in a MIG pool for [starts_at, ends_at). APPROVED at once when it fits the quota
    and room over the window and the tenant's auto-approve policy (compute slices and lease hours), else PENDING
    for a manager. Locks the pool, then the quota. Raises NotAllowed or InvalidInput (bad input, a shared pool,
    over quota or no room over the window: the message names the bookings and leases in the way)."""
    if not can_use_tenant(actor, tenant_id):
        raise NotAllowed("You are not a member of this tenant.")
    tenant = Tenant.objects.get(pk=tenant_id)
    pool = lock_pool(pool_id=pool_id)
    cost = _validate(
        tenant=tenant, pool=pool, profile=profile, count=count, starts_at=starts_at, ends_at=ends_at, purpose=purpose
    )
    booking = Booking(
        tenant=tenant,
        pool=pool,
        profile=profile,
        count=count,
        compute_slices=cost.compute_slices,
        memory_slices=cost.memory_slices,
        starts_at=starts_at,
        ends_at=ends_at,
        purpose=purpose.strip(),
        requested_by_id=actor.pk,
    )
    _check_window(booking)
    hours = window.window_hours(starts_at, ends_at)
    if cost.compute_slices <= tenant.auto_approve_max_compute_slices and hours <= tenant.auto_approve_max_lease_hours:
        booking.status = Status.APPROVED
        booking.auto_approved = True
        booking.decided_at = timezone.now()
        booking.status_message = "Approved automatically: inside quota and the tenant's auto-approve policy."
    else:
        booking.status_message = "Waiting for a manager: beyond the auto-approve policy."
    booking.save()
    record_audit_event(
        actor=actor,
        verb="book",
        obj=booking,
        tenant=tenant,
        after={
            "status": booking.status,
            "pool": pool.slug,
            "profile": profile,
            "count": count,
            "starts_at": starts_at.isoformat(),
            "ends_at": ends_at.isoformat(),
        },
    )
    if booking.status == Status.PENDING:
        notify_users(
            recipient_ids=tenant_manager_ids(tenant.pk),
            kind=Notification.Kind.REQUEST_PENDING,
            text=f"{actor.get_username()} asks for {_what(booking)} for {tenant.name}: {booking.purpose}",
            link=_link(booking),
            actor=actor,
        )
    return booking


def _decide(booking: Booking, actor: User, status: str, reason: str) -> None:
    booking.status = status
    booking.decided_by_id = actor.pk
    booking.decided_at = timezone.now()
    booking.decision_reason = reason.strip()
    booking.save(
        update_fields=["status", "decided_by", "decided_at", "decision_reason", "status_message", "updated_at"]
    )
    record_audit_event(
        actor=actor,
        verb=f"{'approve' if status == Status.APPROVED else 'reject'}_booking",
        obj=booking,
        tenant_id=booking.tenant_id,
        before={"status": Status.PENDING},
        after={"status": status, "reason": booking.decision_reason},
    )
    verdict = "approved" if status == Status.APPROVED else "rejected"
    notify_users(
        recipient_ids=[booking.requested_by_id],
        kind=Notification.Kind.REQUEST_DECIDED,
        text=f"{actor.get_username()} {verdict} {_what(booking)}."
        + (f" Reason: {booking.decision_reason}" if booking.decision_reason else ""),
        link=_link(booking),
        actor=actor,
    )
    # And by e-mail after commit, like a request's decision (allocations/notifications.py).
    enqueue_task("allocations.tasks.notify_requester_of_booking_task", booking.pk)


@transaction.atomic
def approve_booking(*, booking_id: int, actor: User, reason: str = "") -> Booking:
    """PENDING -> APPROVED after checking quota and room over the window again (what was booked since counts).
    Tenant managers and platform admins. Locks the booking, the pool, then the quota. Raises NotAllowed,
    InvalidTransition or InvalidInput (no longer fits: the message names what is in the way)."""
    booking = lock_booking(booking_id=booking_id)
    if not can_manage_tenant(actor, booking.tenant_id):
        raise NotAllowed("Only the tenant's managers can approve bookings.")
    if booking.status != Status.PENDING:
        raise InvalidTransition(current=booking.status, target=Status.APPROVED)
    booking.pool = lock_pool(pool_id=booking.pool_id)
    _check_window(booking)
    booking.status_message = "Approved; its slices are made at its start."
    _decide(booking, actor, Status.APPROVED, reason)
    return booking


@transaction.atomic
def reject_booking(*, booking_id: int, actor: User, reason: str) -> Booking:
    """PENDING -> REJECTED with a reason. Tenant managers and platform admins."""
    booking = lock_booking(booking_id=booking_id)
    if not can_manage_tenant(actor, booking.tenant_id):
        raise NotAllowed("Only the tenant's managers can reject bookings.")
    if not reason.strip():
        raise InvalidInput({"reason": ["Say why the booking is rejected."]})
    if booking.status != Status.PENDING:
        raise InvalidTransition(current=booking.status, target=Status.REJECTED)
    booking.status_message = f"Rejected: {reason.strip()}"
    _decide(booking, actor, Status.REJECTED, reason)
    return booking


@transaction.atomic
def cancel_booking(*, booking_id: int, actor: User, reason: str = "") -> Booking:
    """PENDING or APPROVED -> CANCELLED: its room and quota over the window are free again. The requester and
    the tenant's managers. An ACTIVE booking is ended by releasing its request instead."""
    booking = lock_booking(booking_id=booking_id)
    if booking.requested_by_id != actor.pk and not can_manage_tenant(actor, booking.tenant_id):
        raise NotAllowed("Only the requester or a tenant manager can cancel this booking.")
    if booking.status not in Booking.HOLDING:
        raise InvalidTransition(current=booking.status, target=Status.CANCELLED)
    previous = booking.status
    booking.status = Status.CANCELLED
    booking.status_message = f"Cancelled by {actor.get_username()}. {reason.strip()}".strip()
    booking.save(update_fields=["status", "status_message", "updated_at"])
    record_audit_event(
        actor=actor,
        verb="cancel_booking",
        obj=booking,
        tenant_id=booking.tenant_id,
        before={"status": previous},
        after={"status": Status.CANCELLED, **({"reason": reason.strip()} if reason.strip() else {})},
    )
    return booking


def _fail(booking: Booking, message: str) -> Booking:
    previous = booking.status
    booking.status = Status.FAILED
    booking.status_message = message
    booking.save(update_fields=["status", "status_message", "updated_at"])
    record_audit_event(
        actor=None,
        verb="fail_booking",
        obj=booking,
        tenant_id=booking.tenant_id,
        before={"status": previous},
        after={"status": Status.FAILED, "reason": message},
    )
    notify_users(
        recipient_ids=[booking.requested_by_id],
        kind=Notification.Kind.REQUEST_DECIDED,
        text=f"Your {_what(booking)} could not start: {message}",
        link=_link(booking),
        actor=None,
    )
    return booking


def _expired_leases_still_held(pool: NodePool, now: datetime) -> bool:
    """Leases past their end whose slices are not gone yet: the expiry beat frees them within a minute."""
    return Allocation.objects.holding_quota().filter(pool=pool, lease_expires_at__lte=now).exists()


@transaction.atomic
def start_booking(*, booking_id: int) -> Booking:
    """APPROVED -> ACTIVE at its start: an approved request for the booking's slices, its lease ending with the
    window, is made and provisioned (outbox). Or -> FAILED, its owner told, when the room or the quota is not
    there (a node died, the quota was lowered); while leases past their end still hold slots it waits for the
    next beat, up to FATIA_BOOKING_START_GRACE_S. Idempotent: anything but a due APPROVED booking is left alone.
    Locks the booking, the pool, then the quota."""
    booking = lock_booking(booking_id=booking_id)
    now = timezone.now()
    if booking.status != Status.APPROVED or booking.starts_at > now:
        return booking
    if booking.ends_at <= now:
        return _fail(booking, "Its window passed before it could start.")
    pool = lock_pool(pool_id=booking.pool_id)
    # Only the other bookings running now need room now; this one goes first (it was promised its room).
    if plan_slices(pool=pool, profile=booking.profile, count=booking.count) is None:
        grace = timedelta(seconds=settings.FATIA_BOOKING_START_GRACE_S)
        if _expired_leases_still_held(pool, now) and now < booking.starts_at + grace:
            return booking
        return _fail(
            booking,
            f"No room in {pool.name} for {booking.count} x {booking.profile} at its start (a node may be down or "
            "cordoned). Nothing was charged; book again or make a request.",
        )
    allocation = Allocation(
        tenant_id=booking.tenant_id,
        pool=pool,
        requested_by_id=booking.requested_by_id,
        profile=booking.profile,
        count=booking.count,
        lease_hours=window.window_hours(now, booking.ends_at),
        # Set before provisioning, which keeps it: the lease ends with the window, not a whole hour later.
        lease_expires_at=booking.ends_at,
        purpose=f"Booking #{booking.pk}: {booking.purpose}"[:500],
        compute_slices=booking.compute_slices,
        memory_slices=booking.memory_slices,
        status=Allocation.Status.APPROVED,
        auto_approved=booking.auto_approved,
        decided_by_id=booking.decided_by_id,
        decided_at=now,
        status_message=f"Approved with booking #{booking.pk}; waiting for the cluster.",
    )
    quota = lock_quota(tenant_id=booking.tenant_id, pool_id=pool.pk)
    short = quota_shortfall(quota=quota, allocation=allocation)
    if short is not None:
        return _fail(booking, f"The tenant's quota has no room for it now: {short}")
    reserve_quota(quota=quota, allocation=allocation)
    allocation.save()
    record_audit_event(
        actor=None,
        verb="request",
        obj=allocation,
        tenant_id=booking.tenant_id,
        after={"status": allocation.status, "booking": booking.pk, "lease_expires_at": booking.ends_at.isoformat()},
    )
    booking.status = Status.ACTIVE
    booking.allocation = allocation
    booking.status_message = f"Started: request #{allocation.pk} holds its slices until the window ends."
    booking.save(update_fields=["status", "allocation", "status_message", "updated_at"])
    record_audit_event(
        actor=None,
        verb="start_booking",
        obj=booking,
        tenant_id=booking.tenant_id,
        before={"status": Status.APPROVED},
        after={"status": Status.ACTIVE, "allocation": allocation.pk},
    )
    enqueue_task("allocations.tasks.provision_allocation_task", allocation.pk)
    return booking


@transaction.atomic
def settle_booking(*, booking_id: int) -> Booking:
    """ACTIVE -> ENDED once its request is over (lease ended or released), or -> FAILED (owner told) when its
    request failed. Idempotent. Locks the booking."""
    booking = lock_booking(booking_id=booking_id)
    allocation = booking.allocation
    if booking.status != Status.ACTIVE or allocation is None or allocation.status not in Allocation.TERMINAL:
        return booking
    if allocation.status == Allocation.Status.FAILED:
        return _fail(booking, f"Its request #{allocation.pk} failed: {allocation.status_message}")
    booking.status = Status.ENDED
    booking.status_message = f"Ended: request #{allocation.pk} is {allocation.get_status_display().lower()}."
    booking.save(update_fields=["status", "status_message", "updated_at"])
    record_audit_event(
        actor=None,
        verb="end_booking",
        obj=booking,
        tenant_id=booking.tenant_id,
        before={"status": Status.ACTIVE},
        after={"status": Status.ENDED, "allocation_status": allocation.status},
    )
    return booking


def run_due_bookings(*, now: datetime | None = None) -> dict[str, Any]:
    """The beat's pass: start every APPROVED booking whose start has come, settle every ACTIVE one whose request
    is over. Each booking in its own transaction (one failure does not hold up the others)."""
    moment = now or timezone.now()
    due = list(
        Booking.objects.filter(status=Status.APPROVED, starts_at__lte=moment)
        .order_by("starts_at", "pk")
        .values_list("pk", flat=True)
    )
    started = [start_booking(booking_id=pk).status for pk in due]
    over = list(
        Booking.objects.filter(status=Status.ACTIVE, allocation__status__in=Allocation.TERMINAL).values_list(
            "pk", flat=True
        )
    )
    settled = [settle_booking(booking_id=pk).status for pk in over]
    undecided = Booking.objects.filter(status=Status.PENDING, ends_at__lte=moment).values_list("pk", flat=True)
    lapsed = [lapse_booking(booking_id=pk).status for pk in list(undecided)]
    return {
        "started": started.count(Status.ACTIVE),
        "failed": started.count(Status.FAILED),
        "settled": len(settled),
        "lapsed": lapsed.count(Status.CANCELLED),
    }


@transaction.atomic
def lapse_booking(*, booking_id: int) -> Booking:
    """PENDING -> CANCELLED once its window is over undecided (it stops holding room in every check); the
    requester is told. Idempotent. Locks the booking."""
    booking = lock_booking(booking_id=booking_id)
    if booking.status != Status.PENDING or booking.ends_at > timezone.now():
        return booking
    booking.status = Status.CANCELLED
    booking.status_message = "Cancelled: no manager decided it before its window ended."
    booking.save(update_fields=["status", "status_message", "updated_at"])
    record_audit_event(
        actor=None,
        verb="cancel_booking",
        obj=booking,
        tenant_id=booking.tenant_id,
        before={"status": Status.PENDING},
        after={"status": Status.CANCELLED, "reason": "undecided"},
    )
    notify_users(
        recipient_ids=[booking.requested_by_id],
        kind=Notification.Kind.REQUEST_DECIDED,
        text=f"Your {_what(booking)} was never decided and has lapsed.",
        link=_link(booking),
        actor=None,
    )
    return booking
