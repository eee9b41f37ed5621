"""A request whose hold has ended, in a real browser (issue 14): its page's "Hold" line says how long it was held and
how the hold ended, and reads on a phone. Screenshots at 1440 and 390 px (test-output/screenshots/)."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import F
from django.utils import timezone
from playwright.sync_api import expect

from allocations.models import Allocation
from allocations.services.queue import admit_queued
from tenants.models import AuditEvent
from tests.admission.helpers import holding_pool
from tests.browser.conftest import SCREENSHOTS
from tests.conftest import World
from tests.queue.helpers import ask

DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}
Status = Allocation.Status


def test_the_hold_line_of_a_request_placed_at_its_deadline(world: World, signed_in, screenshot):
    # given: a 1g.10gb held 12 minutes ago in a holding pool, its bound passed, placed forced by the admission pass
    pool = holding_pool(world)
    held = ask(world, pool, "1g.10gb")
    assert (held.status, held.held) == (Status.QUEUED, True)
    earlier = timedelta(minutes=12)  # given (the clock): asked, held and queued 12 minutes ago, its bound now passed
    AuditEvent.objects.filter(object_type="allocation", object_id=str(held.pk)).update(
        created_at=F("created_at") - earlier
    )
    Allocation.objects.filter(pk=held.pk).update(
        created_at=F("created_at") - earlier,
        queued_at=F("queued_at") - earlier,
        decided_at=F("decided_at") - earlier,
        held_until=timezone.now() - timedelta(seconds=1),
    )
    assert [a.pk for a in admit_queued(pool_id=pool.pk)] == [held.pk]
    # when: Alice opens it
    page = signed_in(world.alice)
    page.set_viewport_size(DESKTOP)
    page.goto(f"/requests/{held.pk}/")
    # then: the Hold line says how long and how it ended, in the summary, next to its label
    line = page.locator("#hold-ended")
    expect(line).to_have_text("Held for 12 min, placed at the deadline.")
    expect(page.locator(".facts div", has=line).locator("dt")).to_have_text("Hold")
    screenshot(page, "hold-line-1440")
    # and: the timeline tells the hold's story in words: held though it fit, then placed at its time limit
    timeline = page.locator("section[aria-labelledby=timeline-title]")
    expect(timeline).to_contain_text("It fits, but every place it fits now would break up room that larger requests")
    expect(timeline).to_contain_text("It waits in the pool's queue by the pool's choice, its quota held")
    expect(timeline).to_contain_text("Admitted from the queue after 12 min: its hold had reached its time limit")
    expect(timeline).not_to_contain_text("system: hold")
    expect(timeline).not_to_contain_text("No free layout fits it yet")
    page.locator("section", has=line).screenshot(path=str(SCREENSHOTS / "hold-line-summary-1440.png"))
    # and: on a phone nothing scrolls sideways and the line is on the screen's width
    page.set_viewport_size(PHONE)
    assert int(page.evaluate("document.documentElement.scrollWidth")) == 390
    box = line.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
    screenshot(page, "hold-line-390")
    page.locator("section", has=line).screenshot(path=str(SCREENSHOTS / "hold-line-summary-390.png"))
    timeline.screenshot(path=str(SCREENSHOTS / "hold-line-timeline-390.png"))
