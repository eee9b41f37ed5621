"""Bookings in a real browser (issue 15), at 1440 and 390 px: the form refuses a booking with no room over its
window next to the field, naming the booking in the way; the admin's week calendar shows the pool's bookings."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from playwright.sync_api import Page, expect

from allocations.booking_selectors import monday_of
from allocations.models import Booking
from tests.bookings.helpers import book, small_pool
from tests.conftest import World

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1440, "height": 900}


def scroll_width(page: Page) -> int:
    return int(page.evaluate("document.documentElement.scrollWidth"))


def test_the_form_shows_why_a_booking_does_not_fit(world: World, signed_in, screenshot) -> None:
    # given: Team B has booked the tiny pool's only GPU tomorrow 09:00-17:00
    small = small_pool(world, gpus=1)
    tomorrow = (timezone.now() + timedelta(days=1)).replace(hour=9, minute=0, second=0, microsecond=0)
    taken = Booking.objects.get(pk=book(world, small.pool, profile="7g.80gb", start=30, end=31, actor=world.charlie).pk)
    Booking.objects.filter(pk=taken.pk).update(starts_at=tomorrow, ends_at=tomorrow + timedelta(hours=8))
    page = signed_in(world.alice)
    page.goto("/bookings/new/")
    # when: Alice asks for a slice in that window
    page.get_by_label("Pool").select_option(label="tiny pool")
    page.get_by_label("MIG profile").select_option("1g.10gb")
    page.get_by_label("Number of slices").fill("1")
    page.get_by_label("Starts (UTC)").fill(f"{tomorrow:%Y-%m-%dT10:00}")
    page.get_by_label("Ends (UTC)").fill(f"{tomorrow:%Y-%m-%dT12:00}")
    page.get_by_label("Purpose").fill("a workshop")
    page.get_by_role("button", name="Book").click()
    # then: the page says which booking is in the way, next to the start field, and nothing was booked
    field = page.locator(".field--invalid")
    expect(field).to_contain_text(f"No room in tiny pool for 1 x 1g.10gb at {tomorrow:%Y-%m-%d} 10:00 UTC")
    expect(field).to_contain_text(f"booking #{taken.pk}")
    assert Booking.objects.count() == 1
    for size, name in ((DESKTOP, "booking-form-error-1440"), (PHONE, "booking-form-error-390")):
        page.set_viewport_size(size)
        assert scroll_width(page) == size["width"]
        screenshot(page, name)


def test_the_admin_calendar_shows_a_week_of_bookings(world: World, signed_in, screenshot) -> None:
    # given: next week, a workshop on Monday, a two-day run from Tuesday (pending) and a cancelled one on Wednesday
    week = monday_of(timezone.now().date()) + timedelta(days=7)
    monday = timezone.now().replace(year=week.year, month=week.month, day=week.day, hour=0, minute=0, second=0)
    monday = monday.replace(microsecond=0)
    first = book(world, world.pool, profile="1g.10gb", count=4, start=24 * 8, end=24 * 8 + 1)
    second = book(world, world.pool, profile="3g.40gb", start=24 * 9, end=24 * 9 + 1, actor=world.charlie)
    third = book(world, world.pool, profile="2g.20gb", start=24 * 10, end=24 * 10 + 1)
    for booking, start, hours in ((first, 9, 8), (second, 24 + 13, 30), (third, 48 + 10, 2)):
        Booking.objects.filter(pk=booking.pk).update(
            starts_at=monday + timedelta(hours=start), ends_at=monday + timedelta(hours=start + hours)
        )
    Booking.objects.filter(pk=third.pk).update(status=Booking.Status.CANCELLED)
    page = signed_in(world.root)
    # when
    page.goto(f"/manage/bookings/?pool={world.pool.pk}&week={week:%Y-%m-%d}")
    # then
    expect(page.get_by_role("heading", name="Booking calendar: H100 pool")).to_be_visible()
    calendar = page.get_by_role("table", name=f"Bookings in H100 pool, week of {week:%Y-%m-%d}")
    expect(calendar.locator(".calendar__booking")).not_to_have_count(0)
    expect(calendar).to_contain_text("4 × 1g.10gb")
    expect(calendar).to_contain_text(f"#{second.pk} · Team B")
    for size, name in ((DESKTOP, "booking-calendar-1440"), (PHONE, "booking-calendar-390")):
        page.set_viewport_size(size)
        assert scroll_width(page) == size["width"]
        screenshot(page, name)
    # and a member may not see it
    member = signed_in(world.alice)
    assert member.goto("/manage/bookings/").status == 403
