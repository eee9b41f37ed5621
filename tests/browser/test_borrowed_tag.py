"""The dashboard's "borrowed" tag (issue 15) on a borrowed slice: whole, never cut to "BORRO...", on a one-slot 1g
and a two-slot 2g instance, on a 390 px phone and at 1440 px; a screen reader hears "borrowed" either way."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

from tests.cohorts.helpers import cohort_pool
from tests.conftest import World
from tests.queue.helpers import ask

# Each borrowed slot's tag: the text shown, whether it is cut, and the words a screen reader takes from the slot.
TAGS = """() => [...document.querySelectorAll(".slot--borrowed")].map((slot) => {
  const tag = slot.querySelector(".slot__borrowed");
  const shown = [...tag.children].filter((c) => getComputedStyle(c).display !== "none" && c.offsetWidth > 1);
  return {
    size: slot.dataset.size,
    shown: shown.map((c) => c.textContent).join(""),
    cut: shown.some((c) => c.scrollWidth > c.clientWidth) || tag.scrollWidth > tag.clientWidth
      || tag.getBoundingClientRect().right > slot.getBoundingClientRect().right,
    heard: tag.textContent.includes("borrowed"),
  };
})"""


@pytest.mark.parametrize("width", [390, 1440])
def test_the_borrowed_tag_fits_one_and_two_slot_instances(world: World, signed_in, screenshot, width: int):
    # given: Team B (charlie) runs a 1g.10gb and a 2g.20gb borrowed from the cohort, beyond its zero guarantee
    pool, _ = cohort_pool(world)
    borrowed = [ask(world, pool, profile, b=True) for profile in ("1g.10gb", "2g.20gb")]
    assert all(a.is_borrowed for a in borrowed)
    page: Page = signed_in(world.charlie)
    page.set_viewport_size({"width": width, "height": 900})
    # when
    page.goto(f"/dashboard/?pool={pool.pk}")
    # then
    tags = page.evaluate(TAGS)
    screenshot(page, f"dashboard-borrowed-{width}")
    assert sorted(t["size"] for t in tags) == ["1", "2"]
    assert [t for t in tags if t["cut"] or not t["heard"]] == []
    assert {t["shown"] for t in tags} <= {"borrowed", "brw"}
    # and the pool's card says how much of Team B's use is borrowed
    card = page.locator(f"#pool-{pool.pk} .dash-usage").inner_text()
    assert "Team B: 2 slices (3 compute, 3 of them borrowed from the cohort)" in card
