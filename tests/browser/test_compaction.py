"""The compaction page in a real browser, at 1440 px and 390 px (issue 14): reached from the pool list, it shows
which request moves from which slot to which and what that frees; Apply starts the plan, which the page then lists.
Nothing scrolls sideways on a phone."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from allocations.models import MovePlan
from tests.compaction.world import small_pool
from tests.conftest import World

WIDTHS = {"1440": {"width": 1440, "height": 900}, "390": {"width": 390, "height": 844}}


def shoot(page: Page, screenshot, name: str) -> None:
    for width, size in WIDTHS.items():
        page.set_viewport_size(size)
        screenshot(page, f"{name}-{width}")
        assert (name, width, page.evaluate("document.documentElement.scrollWidth")) == (name, width, size["width"])
    page.set_viewport_size(WIDTHS["1440"])


def test_an_admin_previews_and_applies_a_compaction(world: World, signed_in, screenshot):
    # given: GPU 0 holds only a movable 1g.10gb, GPU 1 a busy one
    small = small_pool(world)
    lone = small.active("1g.10gb", gpu=0, start=0, movable=True)
    small.active("1g.10gb", gpu=1, start=0)
    page = signed_in(world.root)
    nav = page.get_by_role("navigation", name="Main")

    # when: from the pool list
    nav.get_by_text("Admin", exact=True).click()
    nav.get_by_role("link", name="Pools", exact=True).click()
    page.locator(f"a[href='/manage/pools/{small.pool.pk}/compaction/']").click()

    # then: the preview
    expect(page.get_by_role("heading", level=1)).to_have_text("Compaction of Small pool")
    expect(page.locator("#compaction-summary")).to_contain_text("1 move; whole GPUs free: 1 → 2")
    row = page.locator("#compaction-preview tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text(f"#{lone.pk}")
    expect(row).to_contain_text("small-node-0/gpu-0:0")
    shoot(page, screenshot, "compaction-preview")

    # when: applied
    page.get_by_role("button", name="Apply this compaction").click()

    # then: started, listed with its step
    plan = MovePlan.objects.get()
    expect(page.get_by_text(f"Compaction #{plan.pk} started: 1 move(s)", exact=False)).to_be_visible()
    expect(page.locator("#compaction-plans tbody tr")).to_contain_text("Applying")
    expect(page.locator("#compaction-refusal")).to_contain_text("being applied")
    shoot(page, screenshot, "compaction-applying")
