"""Every main page on a 390 px wide phone, for a member, a manager and a platform admin: nothing
scrolls sideways, tables read as labelled cards, and a Menu button opens the navigation, whose Admin
menu stays on the screen (issue 9). Each page is also photographed at 1440 px."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import PASSWORD
from tests.conftest import World
from tests.pages import pages_for, seed

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1440, "height": 900}


# Each body cell's data-label must name its column, as the header row does (the cards show it).
UNLABELLED_CELLS = """() => {
  const wrong = [];
  let cells = 0;
  for (const table of document.querySelectorAll("table.table")) {
    const heads = [...table.querySelectorAll("thead th")].map((th) => th.textContent.trim());
    for (const row of table.querySelectorAll("tbody tr")) {
      [...row.children].forEach((cell, i) => {
        if (cell.tagName !== "TD") return;
        cells += 1;
        if (cell.getAttribute("data-label") !== heads[i]) wrong.push(`${heads[i]}: ${cell.getAttribute("data-label")}`);
      });
    }
  }
  return { cells, wrong };
}"""


def scroll_width(page: Page) -> int:
    return int(page.evaluate("document.documentElement.scrollWidth"))


@pytest.mark.parametrize("who", ["alice", "mallory", "root"])
def test_no_main_page_scrolls_sideways_on_a_390_px_phone(world: World, signed_in, screenshot, who: str):
    # given
    ids = seed(world)
    page = signed_in(getattr(world, who))
    checked_cells = 0
    for name, url in pages_for(who, world, ids):
        # when
        page.set_viewport_size(PHONE)
        page.goto(url)
        # then
        assert (name, scroll_width(page)) == (name, 390)
        labels = page.evaluate(UNLABELLED_CELLS)
        assert (name, labels["wrong"]) == (name, [])
        checked_cells += labels["cells"]
        screenshot(page, f"pages-{who}-{name}-390")
        page.set_viewport_size(DESKTOP)
        assert (name, scroll_width(page)) == (name, 1440)
        screenshot(page, f"pages-{who}-{name}-1440")
    # every page with rows was checked: requests, placements, tokens, quota changes (and admin tables)
    assert checked_cells > 0


def test_tables_read_as_labelled_cards_on_a_phone(world: World, signed_in, screenshot):
    # given
    seed(world)
    page = signed_in(world.alice)
    page.set_viewport_size(PHONE)
    # when
    page.goto("/tokens/")
    # then: one card per token, each value beside its column's name, the header row out of sight
    row = page.locator("table.table tbody tr").first
    expect(page.locator("table.table thead")).to_have_css("position", "absolute")
    expect(row).to_have_css("display", "block")
    name, prefix = row.locator('td[data-label="Name"]'), row.locator('td[data-label="Prefix"]')
    assert page.evaluate("(cell) => getComputedStyle(cell, '::before').content", name.element_handle()) == '"Name"'
    name_box, prefix_box = name.bounding_box(), prefix.bounding_box()
    assert name_box is not None and prefix_box is not None
    assert prefix_box["y"] >= name_box["y"] + name_box["height"] - 1  # stacked, not side by side
    assert name_box["x"] + name_box["width"] <= 390
    screenshot(page, "tokens-cards-390")
    # when: a new token's secret is shown (a long unbroken string), the page still fits
    page.get_by_label("Name").fill("laptop-of-alice-for-the-nightly-benchmark-suite")
    page.get_by_role("button", name="Create token").click()
    expect(page.locator("#new-token-secret")).to_be_visible()
    assert scroll_width(page) == 390
    screenshot(page, "tokens-new-secret-390")


@pytest.mark.parametrize("who", ["alice", "mallory", "root"])
def test_the_menu_button_opens_the_navigation_and_the_admin_menu_fits(world: World, signed_in, screenshot, who: str):
    # given
    page = signed_in(getattr(world, who))
    page.set_viewport_size(PHONE)
    page.goto("/quotas/")
    button = page.get_by_role("button", name="Menu")
    nav = page.get_by_role("navigation", name="Main")
    # then: closed at first
    expect(button).to_have_attribute("aria-expanded", "false")
    expect(button).to_have_attribute("aria-controls", "site-nav")
    expect(nav.get_by_role("link", name="My requests")).to_be_hidden()
    screenshot(page, f"menu-{who}-closed-390")
    # when: opened with the keyboard
    button.focus()
    page.keyboard.press("Enter")
    # then
    expect(button).to_have_attribute("aria-expanded", "true")
    for link in ("My requests", "New request", "Quotas", "Fleet", "API tokens", "API docs"):
        expect(nav.get_by_role("link", name=link, exact=True)).to_be_visible()
    expect(nav.get_by_role("link", name="Approvals", exact=True)).to_have_count(0 if who == "alice" else 1)
    assert scroll_width(page) == 390
    if who == "root":
        # when: the Admin menu opens inside the navigation
        nav.get_by_text("Admin", exact=True).click()
        menu = nav.locator(".nav-menu__list")
        expect(menu).to_be_visible()
        box = menu.bounding_box()
        assert box is not None
        assert (box["x"] >= 0, box["x"] + box["width"] <= 390, box["y"] >= 0, box["y"] + box["height"] <= 844) == (
            True,
            True,
            True,
            True,
        )
        for link in ("Tenants", "Pools", "Set quotas", "Quota changes", "Audit log"):
            item = nav.get_by_role("link", name=link, exact=True)
            expect(item).to_be_visible()
            item_box = item.bounding_box()
            assert item_box is not None and item_box["x"] + item_box["width"] <= 390
        assert scroll_width(page) == 390
        screenshot(page, "menu-root-admin-open-390")
        # Escape closes the Admin menu first, then the navigation
        page.keyboard.press("Escape")
        expect(menu).to_be_hidden()
        expect(button).to_have_attribute("aria-expanded", "true")
    else:
        screenshot(page, f"menu-{who}-open-390")
    page.keyboard.press("Escape")
    expect(button).to_have_attribute("aria-expanded", "false")
    expect(button).to_be_focused()
    expect(nav.get_by_role("link", name="My requests")).to_be_hidden()
    # and on a wide screen there is no Menu button: the navigation is a row of links
    page.set_viewport_size(DESKTOP)
    expect(button).to_be_hidden()
    expect(nav.get_by_role("link", name="My requests")).to_be_visible()


def test_without_javascript_the_navigation_is_a_plain_list(
    world: World, browser: Browser, live_server: Any, screenshot
):
    # given: a phone with JavaScript off
    context = browser.new_context(base_url=live_server.url, viewport=PHONE, java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto("/login/")
        assert scroll_width(page) == 390
        screenshot(page, "login-390")
        page.get_by_label("Username").fill("root")
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("heading", name="My requests")).to_be_visible()
        nav = page.get_by_role("navigation", name="Main")
        # then: no Menu button; every link listed, the Admin menu a <details> that opens in place
        expect(page.get_by_role("button", name="Menu")).to_have_count(0)
        expect(nav.get_by_role("link", name="API docs")).to_be_visible()
        nav.get_by_text("Admin", exact=True).click()
        box = nav.get_by_role("link", name="Audit log").bounding_box()
        assert box is not None and box["x"] + box["width"] <= 390
        assert scroll_width(page) == 390
        screenshot(page, "menu-root-no-javascript-390")
    finally:
        context.close()
