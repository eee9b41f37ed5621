"""The queue in a real browser (issue 15): a queued request's page shows its position and estimated start, a
manager reorders it, and the page follows its admission live when a release makes room. Screenshots at 1440 and
390 px."""

from __future__ import annotations

from playwright.sync_api import expect

from allocations.services.queue import admit_queued
from tests.conftest import World
from tests.queue.helpers import ask, release, small_pool

DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}


def scroll_width(page) -> int:
    return int(page.evaluate("document.documentElement.scrollWidth"))


def test_a_queued_request_shows_its_place_and_is_admitted_live(world: World, signed_in, screenshot):
    # given: Team B holds the pool's only GPU for 2 hours; Team A's two requests wait behind it
    pool = small_pool(world)
    whole = ask(world, pool, "7g.80gb", b=True, lease_hours=2)
    first = ask(world, pool, "4g.40gb")
    second = ask(world, pool, "3g.40gb")
    # when: the manager opens the second
    page = signed_in(world.mallory)
    page.set_viewport_size(DESKTOP)
    page.goto(f"/requests/{second.pk}/")
    # then: queued, second of two, starting when Team B's lease ends
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Request #{second.pk}: 1 × 3g.40gb Queued")
    expect(page.locator("#queue-position")).to_contain_text("Position 2 of 2 in Queue pool q1's queue")
    expect(page.locator("#queue-eta")).to_contain_text("Estimated start:")
    screenshot(page, "queue-request-1440")
    page.set_viewport_size(PHONE)
    assert scroll_width(page) == 390
    screenshot(page, "queue-request-390")
    page.set_viewport_size(DESKTOP)
    # when: the manager puts it first
    page.get_by_label("Priority in Team A").fill("5")
    page.get_by_role("button", name="Set priority").click()
    # then: first of two
    expect(page.get_by_role("status").first).to_contain_text(f"Request #{second.pk} now has priority 5.")
    expect(page.locator("#queue-position")).to_contain_text("Position 1 of 2")
    # when: Team B's GPU is released and the admission pass runs
    release(world, whole)
    assert [a.pk for a in admit_queued(pool_id=pool.pk)] == [second.pk, first.pk]
    # then: the open page follows on its own: active, the queue card gone
    expect(page.get_by_role("heading", level=1)).to_have_text(
        f"Request #{second.pk}: 1 × 3g.40gb Active", timeout=30_000
    )
    expect(page.locator("#queue-card")).to_have_count(0)
    screenshot(page, "queue-request-admitted-1440")
