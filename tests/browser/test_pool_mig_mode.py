"""A pool's MIG mode in a real browser (issue 12, static MIG), at 1440 and 390 px: set on the pools page, refused
with a field message while the pool holds live requests, shown on the fleet discovery page."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from allocations import services
from allocations.models import NodePool
from tests.conftest import World

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1440, "height": 900}


def scroll_width(page: Page) -> int:
    return int(page.evaluate("document.documentElement.scrollWidth"))


def test_an_admin_switches_a_pool_to_static_agent_mode(world: World, signed_in, screenshot) -> None:
    # given
    page = signed_in(world.root)
    page.goto("/manage/pools/")
    mode = page.get_by_label("MIG mode of H100 pool")
    expect(mode).to_have_value("dynamic")
    # when
    mode.select_option("static-agent")
    page.locator("form", has=mode).get_by_role("button", name="Save selector and mode").click()
    # then
    expect(page.get_by_role("status").first).to_contain_text("MIG mode: Static, node agent.")
    expect(page.get_by_label("MIG mode of H100 pool")).to_have_value("static-agent")
    assert NodePool.objects.get(pk=world.pool.pk).mig_mode == "static-agent"
    for size, name in ((DESKTOP, "pools-mig-mode-1440"), (PHONE, "pools-mig-mode-390")):
        page.set_viewport_size(size)
        assert scroll_width(page) == size["width"]
        screenshot(page, name)
    # and the fleet page says so
    page.set_viewport_size(DESKTOP)
    page.goto("/manage/fleet/")
    expect(page.get_by_role("region", name="H100 pool")).to_contain_text("MIG mode: static-agent")


def test_a_pool_with_live_requests_keeps_its_mode_and_the_page_says_why(world: World, signed_in, screenshot) -> None:
    # given: Team A holds a slice in the pool
    services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="1g.10gb",
        count=1,
        lease_hours=4,
        purpose="a notebook",
        actor=world.alice,
    )
    page = signed_in(world.root)
    page.goto("/manage/pools/")
    mode = page.get_by_label("MIG mode of H100 pool")
    # when
    mode.select_option("static-manager")
    page.locator("form", has=mode).get_by_role("button", name="Save selector and mode").click()
    # then
    expect(page.get_by_text("their slices would be stranded by a MIG mode change")).to_be_visible()
    assert NodePool.objects.get(pk=world.pool.pk).mig_mode == "dynamic"
    page.set_viewport_size(PHONE)
    assert scroll_width(page) == 390
    screenshot(page, "pools-mig-mode-refused-390")


def test_the_dashboard_draws_a_static_gpus_free_precreated_instances(world: World, signed_in, screenshot) -> None:
    # given: a static-agent pool whose GPUs publish pre-created devices (as fleet discovery records them)
    from allocations.models import Gpu

    services.update_node_pool(pool_id=world.pool.pk, mig_mode="static-agent", actor=world.root)
    Gpu.objects.filter(node__pool=world.pool).update(
        static_instances=[
            {"profile": "3g.40gb", "start": 0, "size": 4, "uuid": "MIG-a", "device": "gpu-0-mig-3g40gb-9-0"},
            {"profile": "1g.10gb", "start": 6, "size": 1, "uuid": "MIG-b", "device": "gpu-0-mig-1g10gb-19-6"},
        ]
    )
    page = signed_in(world.alice)
    # when
    page.goto("/dashboard/")
    # then: on each GPU the 3g.40gb spans slots 0-3, the 1g.10gb slot 6, and slots 4, 5 and 7 are free
    gpu = page.locator('[data-node="h100-node-0"] [data-gpu-index="0"]')
    big = gpu.locator('[data-precreated="3g.40gb"]')
    expect(big.locator(".slot__profile")).to_have_text("3g.40gb")
    expect(big.locator(".slot__owner")).to_have_text("free")
    grid, box = gpu.locator(".dash-grid").bounding_box(), big.bounding_box()
    assert grid is not None and box is not None
    column = (grid["width"] + 2) / 8
    assert abs((box["width"] + 2) - 4 * column) < 2
    expect(gpu.locator('[data-precreated="1g.10gb"]')).to_have_attribute("data-start", "6")
    expect(gpu.locator("[data-free-slot]")).to_have_count(3)
    for size, name in ((DESKTOP, "dashboard-precreated-1440"), (PHONE, "dashboard-precreated-390")):
        page.set_viewport_size(size)
        assert scroll_width(page) == size["width"]
        screenshot(page, name)


def test_a_static_pools_card_says_what_is_free_now_and_after_a_layout_change(
    world: World, signed_in, screenshot
) -> None:
    # given: every GPU of a static-agent pool publishes a free 3g.40gb at slot 0 and a free 1g.10gb at slot 6
    from allocations.models import Gpu

    services.update_node_pool(pool_id=world.pool.pk, mig_mode="static-agent", actor=world.root)
    Gpu.objects.filter(node__pool=world.pool).update(
        static_instances=[
            {"profile": "3g.40gb", "start": 0, "size": 4, "uuid": "MIG-a", "device": "gpu-0-mig-3g40gb-9-0"},
            {"profile": "1g.10gb", "start": 6, "size": 1, "uuid": "MIG-b", "device": "gpu-0-mig-1g10gb-19-6"},
        ]
    )
    page = signed_in(world.alice)
    # when
    page.goto("/dashboard/")
    # then: 16 free 1g.10gb now; 7 per GPU once the free instances are reshaped (nothing is held)
    card = page.get_by_role("article", name="H100 pool")
    table = card.locator("table.dash-fits--static")
    expect(table.get_by_role("columnheader", name="After a layout change")).to_be_visible()
    row = table.locator('tr[data-profile="1g.10gb"]')
    expect(row.locator("td").nth(0)).to_have_text("16")
    expect(row.locator("td").nth(1)).to_have_text(str(16 * 7))
    expect(table.locator('tr[data-profile="7g.80gb"] td').nth(0)).to_have_text("0")
    expect(card).to_contain_text("Static MIG: “free now” counts pre-created MIG instances nobody holds")
    for size, name in ((DESKTOP, "dashboard-static-fits-1440"), (PHONE, "dashboard-static-fits-390")):
        page.set_viewport_size(size)
        assert scroll_width(page) == size["width"]
        table.scroll_into_view_if_needed()
        screenshot(page, name)
