"""The dense fleet overview in a real browser (issue 9): 1,000 nodes x 8 GPUs on one 1440 x 900
screen, a cell opens that GPU's slot view, keyboard moves between cells, nodes collapse and sort;
and the slot view keeps one-slot profiles readable."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from allocations import services
from allocations.models import Node, SlicePlacement
from tests.conftest import World
from tests.dashboard.seed import seed_fleet
from tests.dashboard.test_dashboard import active_slices

DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}

# The vertical extent of every GPU cell, after scrolling the first pool's grid to the top.
CELLS_EXTENT = """() => {
  const cells = document.querySelectorAll("a.fc");
  let top = Infinity, bottom = -Infinity, right = -Infinity, left = Infinity;
  for (const cell of cells) {
    const r = cell.getBoundingClientRect();
    top = Math.min(top, r.top); bottom = Math.max(bottom, r.bottom);
    left = Math.min(left, r.left); right = Math.max(right, r.right);
  }
  return { count: cells.length, top, bottom, left, right, viewport: window.innerHeight };
}"""


def test_1000_nodes_of_8_gpus_fit_on_one_1440_by_900_screen(world: World, signed_in, screenshot):
    # given: 1,000 nodes x 8 H100 (plus the world's 2 nodes), a third of their slots in use
    seed_fleet(root=world.root, tenant=world.tenant_a, requester=world.alice, nodes=1000)
    page = signed_in(world.root)
    page.set_viewport_size(DESKTOP)
    # when
    page.goto("/dashboard/fleet/")
    expect(page.get_by_role("heading", name="Fleet overview")).to_be_visible()
    page.locator("[data-fleet-grid]").first.evaluate("(grid) => grid.scrollIntoView({ block: 'start' })")
    extent = page.evaluate(CELLS_EXTENT)
    # then: every one of the 8,016 cells lies inside one 900 px high viewport, none off to the side
    assert extent["count"] == 8016
    assert extent["top"] >= 0
    assert extent["bottom"] <= 900, extent
    assert extent["left"] >= 0 and extent["right"] <= 1440
    assert page.evaluate("document.documentElement.scrollWidth") == 1440
    # and the big pool alone fits the first screen, under the page's header, without scrolling
    page.evaluate("window.scrollTo(0, 0)")
    big_grid = page.locator('section[aria-labelledby^="fleet-pool-"]', has_text="Big pool").locator("[data-fleet-grid]")
    box = big_grid.bounding_box()
    assert box is not None and box["y"] + box["height"] <= 900, box
    screenshot(page, "fleet-overview-1000-nodes-1440")
    page.set_viewport_size(PHONE)
    assert page.evaluate("document.documentElement.scrollWidth") == 390
    screenshot(page, "fleet-overview-1000-nodes-390")


def cell(page: Page, name: str):
    return page.locator(f'a.fc[aria-label^="{name}:"]')


def test_a_cell_opens_its_gpus_slot_view_and_escape_returns_to_it(world: World, signed_in, screenshot):
    # given: charlie's 3g.40gb and alice's 1g.10gb, seen by charlie
    theirs = active_slices(world, world.alice, world.tenant_a, profile="1g.10gb")
    mine = active_slices(world, world.charlie, world.tenant_b, profile="3g.40gb")
    placement = SlicePlacement.objects.select_related("gpu__node").get(allocation=mine)
    gpu = placement.gpu
    page = signed_in(world.charlie)
    page.set_viewport_size(DESKTOP)
    page.goto("/dashboard/fleet/")
    target = cell(page, f"{gpu.node.name} gpu-{gpu.index}")
    expect(target).to_have_count(1)
    used = sum(p.size for p in SlicePlacement.objects.filter(gpu=gpu))
    expect(target).to_have_attribute("aria-label", f"{gpu.node.name} gpu-{gpu.index}: {used} of 8 slots used")
    # when
    target.click()
    # then: a dialog with the node drawn slot by slot, that GPU marked and focused
    dialog = page.get_by_role("dialog", name=f"Slot view of {gpu.node.name} gpu-{gpu.index}")
    expect(dialog).to_be_visible()
    drawn = dialog.locator(f"#gpu-{gpu.pk}")
    expect(drawn).to_be_focused()
    expect(drawn).to_have_class("dash-gpu is-target")
    expect(dialog.locator(f'button[data-placement-id="{placement.pk}"]')).to_have_attribute("data-owner", "Team B")
    expect(dialog.locator("[data-node]")).to_have_count(1)
    expect(dialog).not_to_contain_text("Team A")
    expect(dialog.get_by_role("link", name="Open as a page")).to_have_attribute(
        "href", f"/dashboard/nodes/{gpu.node_id}/#gpu-{gpu.pk}"
    )
    screenshot(page, "fleet-overview-slot-view-dialog-1440")
    # when: Escape
    page.keyboard.press("Escape")
    # then
    expect(dialog).to_be_hidden()
    expect(target).to_be_focused()
    assert theirs.claim_name not in page.content()
    # and with JavaScript's help or not, the link itself opens the slot view as a page
    page.goto(f"/dashboard/nodes/{gpu.node_id}/#gpu-{gpu.pk}")
    expect(page.get_by_role("heading", level=1)).to_have_text(gpu.node.name)
    expect(page.locator(f"#gpu-{gpu.pk}")).to_have_css("outline-style", "solid")
    screenshot(page, "node-slot-view-1440")
    page.set_viewport_size(PHONE)
    assert page.evaluate("document.documentElement.scrollWidth") == 390
    screenshot(page, "node-slot-view-390")


def test_the_keyboard_moves_between_cells_and_collapses_nodes(world: World, signed_in, screenshot):
    # given
    page = signed_in(world.alice)
    page.set_viewport_size(DESKTOP)
    page.goto("/dashboard/fleet/")
    grid = page.locator("[data-fleet-grid]")
    # then: the pool is one tab stop, on the first node's handle
    expect(grid.locator('[tabindex="0"]')).to_have_count(1)
    handle = grid.locator("summary").first
    expect(handle).to_have_attribute("tabindex", "0")
    # when: arrows move to the first GPU, then the next
    handle.focus()
    page.keyboard.press("ArrowRight")
    expect(cell(page, "h100-node-0 gpu-0")).to_be_focused()
    page.keyboard.press("ArrowRight")
    expect(cell(page, "h100-node-0 gpu-1")).to_be_focused()
    expect(page.locator("#fleet-readout")).to_have_text("h100-node-0 gpu-1: 0 of 8 slots used")
    page.keyboard.press("End")
    expect(cell(page, "h100-node-1 gpu-7")).to_be_focused()
    expect(grid.locator('[tabindex="0"]')).to_have_count(1)
    page.keyboard.press("Home")
    expect(handle).to_be_focused()
    # when: Enter on the handle collapses the node: its GPUs are out of sight and out of the way
    page.keyboard.press("Enter")
    expect(cell(page, "h100-node-0 gpu-0")).to_be_hidden()
    page.keyboard.press("ArrowRight")
    expect(page.locator("summary").nth(1)).to_be_focused()
    screenshot(page, "fleet-overview-node-collapsed-1440")
    # when: "Collapse all nodes", then "Expand all nodes"
    page.get_by_role("button", name="Collapse all nodes").click()
    expect(page.locator("a.fc:visible")).to_have_count(0)
    expect(page.locator("summary.fc--node:visible")).to_have_count(2)
    page.get_by_role("button", name="Expand all nodes").click()
    expect(page.locator("a.fc:visible")).to_have_count(16)


def test_nodes_sort_by_free_capacity(world: World, signed_in, screenshot):
    # given: node-0 holds a whole GPU, node-1 is empty but cordoned; a third node is empty and ready
    active_slices(world, world.alice, world.tenant_a, profile="7g.80gb")
    Node.objects.filter(name="h100-node-1").update(state=Node.State.CORDONED)
    services.register_node(pool_id=world.pool.pk, name="h100-node-2", gpu_count=8, actor=world.root)
    page = signed_in(world.alice)
    page.set_viewport_size(DESKTOP)
    page.goto("/dashboard/fleet/")
    nodes = page.locator("[data-fleet-grid] > li")

    def order() -> list[str]:
        return nodes.evaluate_all("(items) => items.map((item) => item.dataset.node)")

    assert order() == ["h100-node-0", "h100-node-1", "h100-node-2"]
    # when
    page.get_by_role("link", name="Most free first").click()
    # then: ready nodes by free slots, then the cordoned one
    expect(page.get_by_role("link", name="Most free first")).to_have_attribute("aria-current", "page")
    assert order() == ["h100-node-2", "h100-node-0", "h100-node-1"]
    expect(nodes.nth(2).locator("a.fc").first).to_have_attribute(
        "aria-label", "h100-node-1 gpu-0: 0 of 8 slots used (cordoned node)"
    )
    screenshot(page, "fleet-overview-sorted-by-free-1440")
    page.set_viewport_size(PHONE)
    screenshot(page, "fleet-overview-sorted-by-free-390")


def test_one_slot_instances_show_their_whole_profile_at_1440_and_390(world: World, signed_in, screenshot):
    # given: three 1g.10gb, one memory slot each
    active_slices(world, world.alice, world.tenant_a, profile="1g.10gb", count=2)
    active_slices(world, world.charlie, world.tenant_b, profile="1g.10gb")
    page = signed_in(world.alice)
    for size, name in ((DESKTOP, "1440"), (PHONE, "390")):
        page.set_viewport_size(size)
        page.goto("/dashboard/")
        slots = page.locator('button.slot[data-size="1"]')
        expect(slots).to_have_count(3)
        for n in range(3):
            slot, profile = slots.nth(n), slots.nth(n).locator(".slot__profile")
            expect(profile).to_have_text("1g.10gb")
            # nothing of the profile is clipped: it fits its box, and its box fits the slot
            assert profile.evaluate("(el) => el.scrollWidth <= el.clientWidth + 0.5") is True
            pbox, sbox = profile.bounding_box(), slot.bounding_box()
            assert pbox is not None and sbox is not None
            assert sbox["x"] <= pbox["x"] and pbox["x"] + pbox["width"] <= sbox["x"] + sbox["width"] + 0.5
            assert pbox["y"] + pbox["height"] <= sbox["y"] + sbox["height"] + 0.5
        assert page.evaluate("document.documentElement.scrollWidth") == size["width"]
        slots.first.scroll_into_view_if_needed()
        screenshot(page, f"dashboard-one-slot-labels-{name}")
