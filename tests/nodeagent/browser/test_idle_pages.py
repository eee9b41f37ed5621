"""Idle reclaim, showback "used" and the node history chart in a real browser, wide and narrow: the request
page's idle banner and "Keep it", the tenant setting with a bad value, the usage table, the per-GPU chart."""

from __future__ import annotations

import pytest
import time_machine
from playwright.sync_api import Page, expect

from allocations.services import reclaim
from tests.nodeagent.test_idle_reclaim import NOW, idle_slices, reclaim_on
from tests.nodeagent.test_node_history import NOW as HISTORY_NOW
from tests.nodeagent.test_node_history import busy
from tests.nodeagent.test_showback_used import seed as seed_used

__all__ = ["busy"]
WIDTHS = [1440, 390]


def fits(page: Page, width: int) -> None:
    """Nothing makes the page scroll sideways."""
    assert page.evaluate("document.documentElement.scrollWidth") <= width


@pytest.mark.parametrize("width", WIDTHS)
def test_the_idle_banner_and_keep_it(world, signed_in, screenshot, width):
    # given: alice's request, idle since 08:00, flagged at 11:00
    reclaim_on(world)
    allocation, _ = idle_slices(world)
    reclaim.reclaim_idle_allocations(now=NOW)
    page = signed_in(world.alice)
    page.set_viewport_size({"width": width, "height": 900})

    # when
    page.goto(f"/requests/{allocation.pk}/")

    # then
    banner = page.locator("#idle-banner")
    expect(banner).to_contain_text("every slice has had no process and no memory in use since 2026-11-30 08:00 UTC")
    expect(banner).to_contain_text("It will be released at 2026-11-30 12:00 UTC unless it is used again or kept.")
    keep = banner.get_by_role("button", name="Keep it")
    expect(keep).to_be_visible()
    fits(page, width)
    screenshot(page, f"request-idle-banner-{width}")
    keep.click()
    expect(page.get_by_text(f"Request #{allocation.pk} is kept")).to_be_visible()
    expect(page.locator("#idle-banner")).to_have_count(0)


@pytest.mark.parametrize("width", WIDTHS)
def test_a_manager_sets_idle_reclaim_and_a_bad_value_is_explained(world, signed_in, screenshot, width):
    # given
    page = signed_in(world.mallory)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/quotas/")
    page.get_by_role("link", name="Team A", exact=True).click()

    # when: 10 minutes is below the 15-minute floor
    page.get_by_label("Release idle slices").check()
    page.get_by_label("Idle after (minutes)").fill("10")
    page.get_by_role("button", name="Save").click()

    # then
    expect(page.get_by_text("Ensure this value is greater than or equal to 15.")).to_be_visible()
    fits(page, width)
    screenshot(page, f"tenant-idle-reclaim-error-{width}")
    page.get_by_label("Idle after (minutes)").fill("45")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Idle reclaim for Team A is on.")).to_be_visible()
    expect(page.locator("#idle-state")).to_contain_text("idle for 45 minutes is flagged")
    screenshot(page, f"tenant-idle-reclaim-{width}")


@pytest.mark.parametrize("width", WIDTHS)
def test_the_usage_page_shows_used_beside_held(world, signed_in, screenshot, width):
    # given
    seed_used(world)
    page = signed_in(world.root)
    page.set_viewport_size({"width": width, "height": 900})

    # when
    page.goto("/dashboard/usage/?days=7")

    # then
    team_a = page.locator('#showback-table tbody tr[data-tenant="Team A"]')
    expect(team_a.locator('[data-label="Slice-hours used"]')).to_have_text("3.00")
    expect(team_a.locator('[data-label="Used share"]')).to_have_text("60 %")
    team_b = page.locator('#showback-table tbody tr[data-tenant="Team B"]')
    expect(team_b.locator('[data-label="Slice-hours used"]')).to_have_text("no data")
    fits(page, width)
    page.locator("#showback-table").scroll_into_view_if_needed()
    screenshot(page, f"dashboard-usage-used-{width}")


@pytest.mark.parametrize("width", WIDTHS)
def test_the_node_page_draws_a_history_chart_per_gpu(world, signed_in, screenshot, busy, width):
    # given: alice's slice busy 10:00-11:00 today (the chart's last 24 hours)
    page = signed_in(world.alice)
    page.set_viewport_size({"width": width, "height": 900})

    # when: the page is drawn at the seeds' moment (their fixed date must stay within the chart's last 24 hours; the
    # live server runs in this process, so the travel reaches it)
    with time_machine.travel(HISTORY_NOW, tick=True):
        page.goto(f"/dashboard/nodes/{busy.gpu.node_id}/")

    # then: one drawn chart (her GPU), described in words; the others say there is nothing
    chart = page.get_by_role("img", name=f"GPU {busy.gpu.index}, your slices")
    expect(chart).to_be_visible()
    box = chart.bounding_box()
    assert box is not None and box["width"] <= width and box["height"] > 50
    expect(page.locator(f"#history-summary-{busy.gpu.index}")).to_contain_text("SM utilisation 50 % on average")
    expect(page.locator(".history-svg")).to_have_count(1)
    fits(page, width)
    page.locator("#node-history").scroll_into_view_if_needed()
    screenshot(page, f"node-history-{width}")
