"""Reads for the booking pages (issue 15): a user's bookings, the ones a manager decides, a pool's week."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import TYPE_CHECKING

from django.db.models import QuerySet
from django.utils import timezone

from allocations.models import Booking, ExtensionConsent, NodePool

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# Bookings that no longer take any room are greyed out in the calendar but still shown.
LIVE = (Booking.Status.PENDING, Booking.Status.APPROVED, Booking.Status.ACTIVE)


def bookings_for_user(user: User) -> QuerySet[Booking]:
    return Booking.objects.for_user(user).select_related("tenant", "pool", "requested_by").order_by("-starts_at", "-pk")


def bookings_to_decide(user: User) -> QuerySet[Booking]:
    return (
        Booking.objects.managed_by(user)
        .filter(status=Booking.Status.PENDING)
        .select_related("tenant", "pool", "requested_by")
        .order_by("starts_at", "pk")
    )


def consents_to_decide(user: User) -> QuerySet[ExtensionConsent]:
    """Lease extensions waiting for the user's answer because they would take room their tenants' bookings hold."""
    return (
        ExtensionConsent.objects.asked_of(user)
        .filter(status=ExtensionConsent.Status.PENDING)
        .select_related("booking", "extension__allocation__tenant", "extension__requested_by")
        .order_by("booking__starts_at", "pk")
    )


def booking_form_pools() -> QuerySet[NodePool]:
    return NodePool.objects.filter(kind=NodePool.Kind.MIG).order_by("name")


@dataclass(frozen=True, slots=True)
class CalendarEntry:
    booking: Booking
    # The part of the booking inside this day, in hours from midnight (for the bar's position and length).
    from_hour: float
    to_hour: float

    @property
    def live(self) -> bool:
        return self.booking.status in LIVE

    @property
    def label(self) -> str:
        """The hours of the booking inside this day: "09:00-17:00", "from 22:00", "until 06:00", "all day"."""
        start = f"{int(self.from_hour):02d}:{round(self.from_hour % 1 * 60):02d}"
        end = f"{int(self.to_hour):02d}:{round(self.to_hour % 1 * 60):02d}"
        if self.from_hour == 0 and self.to_hour == 24:
            return "all day"
        if self.to_hour == 24:
            return f"from {start}"
        if self.from_hour == 0:
            return f"until {end}"
        return f"{start}–{end}"


@dataclass(frozen=True, slots=True)
class CalendarDay:
    day: date
    entries: list[CalendarEntry]

    @property
    def is_today(self) -> bool:
        return self.day == timezone.now().date()


@dataclass(frozen=True, slots=True)
class CalendarWeek:
    pool: NodePool
    monday: date
    days: list[CalendarDay]

    @property
    def previous(self) -> date:
        return self.monday - timedelta(days=7)

    @property
    def next(self) -> date:
        return self.monday + timedelta(days=7)


def monday_of(day: date) -> date:
    return day - timedelta(days=day.weekday())


def pool_week(pool: NodePool, monday: date) -> CalendarWeek:
    """The pool's bookings that touch the week starting `monday` (UTC), split into days."""
    start = datetime.combine(monday, time.min, tzinfo=timezone.get_current_timezone())
    end = start + timedelta(days=7)
    rows = list(
        Booking.objects.filter(pool=pool, starts_at__lt=end, ends_at__gt=start)
        .select_related("tenant", "requested_by")
        .order_by("starts_at", "pk")
    )
    days = []
    for n in range(7):
        day_start = start + timedelta(days=n)
        day_end = day_start + timedelta(days=1)
        entries = [
            CalendarEntry(
                booking=b,
                from_hour=(max(b.starts_at, day_start) - day_start).total_seconds() / 3600,
                to_hour=(min(b.ends_at, day_end) - day_start).total_seconds() / 3600,
            )
            for b in rows
            if b.starts_at < day_end and b.ends_at > day_start
        ]
        days.append(CalendarDay(day=day_start.date(), entries=entries))
    return CalendarWeek(pool=pool, monday=monday, days=days)
