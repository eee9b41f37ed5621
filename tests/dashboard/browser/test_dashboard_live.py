"""The fleet dashboard in a real browser: slices drawn where the database placed them, other tenants'
slices anonymous, and an approval in another browser reaching an open page without a reload."""

from __future__ import annotations

import re
from datetime import timedelta

from django.utils import timezone
from playwright.sync_api import Page, expect

from allocations import services
from allocations.models import Allocation, SlicePlacement
from tests.conftest import World


def _active(world: World, actor, tenant, profile: str, count: int = 1) -> Allocation:
    allocation, _ = services.request_allocation(
        tenant_id=tenant.pk,
        pool_id=world.pool.pk,
        profile=profile,
        count=count,
        lease_hours=8,
        purpose="Project Nightingale",
        actor=actor,
    )
    services.provision_allocation(allocation_id=allocation.pk)
    allocation.refresh_from_db()
    assert allocation.status == Allocation.Status.ACTIVE
    return allocation


def assert_drawn_at_their_placements(page: Page, allocation: Allocation, owner: str) -> None:
    """Each placement of the allocation is a slot on its GPU's grid, at its start and as wide as its size."""
    placements = list(SlicePlacement.objects.filter(allocation=allocation).select_related("gpu__node"))
    assert placements
    for p in placements:
        slot = page.locator(f'[data-gpu-id="{p.gpu_id}"] button[data-placement-id="{p.pk}"]')
        expect(slot).to_have_attribute("data-start", str(p.start))
        expect(slot).to_have_attribute("data-size", str(p.size))
        expect(slot).to_have_attribute("data-owner", owner)
        expect(slot).to_contain_text(p.profile)
        expect(slot).to_contain_text(owner)
        grid = page.locator(f'[data-gpu-id="{p.gpu_id}"] .dash-grid')
        gbox, sbox = grid.bounding_box(), slot.bounding_box()
        assert gbox is not None and sbox is not None
        column = (gbox["width"] + 2) / 8  # eight memory-slot columns with 2px gaps
        assert abs((sbox["x"] - gbox["x"]) - p.start * column) < 2
        assert abs((sbox["width"] + 2) - p.size * column) < 2
        node = page.locator(f'[data-node="{p.gpu.node.name}"]')
        expect(node.locator(f'[data-gpu-id="{p.gpu_id}"]')).to_have_attribute("data-gpu-index", str(p.gpu.index))


def test_alice_sees_her_layout_and_mallorys_approval_reaches_her_open_page(
    world: World, signed_in, screenshot, settings
):
    # given: alice holds two 1g.20gb, charlie a 2g.20gb, and alice waits for a 3g.40gb
    settings.FATIA_DASHBOARD_STREAM_SECONDS = 5  # reconnects are part of the test, not a 25 s wait
    mine = _active(world, world.alice, world.tenant_a, "1g.20gb", count=2)
    theirs = _active(world, world.charlie, world.tenant_b, "1g.20gb")
    pending, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="3g.40gb",
        count=1,
        lease_hours=8,
        purpose="Fine-tune",
        actor=world.alice,
    )
    assert pending.status == Allocation.Status.PENDING
    alice = signed_in(world.alice)
    alice.get_by_role("navigation", name="Main").get_by_role("link", name="Fleet").click()
    expect(alice.get_by_role("heading", name="Fleet dashboard")).to_be_visible()
    expect(alice.locator("#dash-live")).to_have_attribute("data-state", "live")
    card = alice.locator(f"#pool-{world.pool.pk}")
    expect(card.locator('[data-stat="pending"]')).to_have_text("1")
    expect(card.locator('[data-stat="in-use"]')).to_have_text("3")
    assert_drawn_at_their_placements(alice, mine, "Team A")
    assert_drawn_at_their_placements(alice, theirs, "occupied")
    expect(alice.locator("button.slot", has_text="Team B")).to_have_count(0)
    # hovering (or focusing) a slot tells its owner, request and lease
    first = SlicePlacement.objects.filter(allocation=mine).order_by("pk").first()
    assert first is not None
    alice.locator(f'button[data-placement-id="{first.pk}"]').focus()
    expect(alice.locator(f"#slot-{first.pk}-info")).to_be_visible()
    expect(alice.locator(f"#slot-{first.pk}-info")).to_contain_text(f"Request #{mine.pk} by alice")
    screenshot(alice, "dashboard-alice")
    alice.evaluate("window.__notReloaded = true")

    # when: mallory approves the 3g.40gb in her own browser
    mallory = signed_in(world.mallory)
    mallory.goto("/approvals/")
    mallory.get_by_role("button", name=f"Approve request #{pending.pk}").click()
    expect(mallory.get_by_role("status").first).to_contain_text(f"Request #{pending.pk} is approved")

    # then: alice's open page shows it without a reload
    expect(card.locator('[data-stat="pending"]')).to_have_text("0")
    # when: the worker places it (what the provisioning task does after commit)
    services.provision_allocation(allocation_id=pending.pk)
    pending.refresh_from_db()
    # then: the new slice is drawn where the engine put it, still without a reload
    expect(alice.locator(f"#pool-{world.pool.pk}").locator('[data-stat="in-use"]')).to_have_text("4")
    assert_drawn_at_their_placements(alice, pending, "Team A")
    assert alice.evaluate("window.__notReloaded") is True
    screenshot(alice, "dashboard-alice-after-approval")

    # and charlie sees alice's slices only as occupied, with nothing about them
    charlie = signed_in(world.charlie)
    charlie.goto("/dashboard/")
    assert_drawn_at_their_placements(charlie, mine, "occupied")
    assert_drawn_at_their_placements(charlie, pending, "occupied")
    assert_drawn_at_their_placements(charlie, theirs, "Team B")
    body = charlie.content()
    for secret in ("Team A", mine.claim_name, pending.claim_name, "Project Nightingale", "Fine-tune"):
        assert secret not in body
    screenshot(charlie, "dashboard-charlie")


def test_root_filters_the_nodes_with_the_keyboard(world: World, signed_in, screenshot):
    # given
    allocation = _active(world, world.charlie, world.tenant_b, "2g.20gb")
    node = SlicePlacement.objects.select_related("gpu__node").get(allocation=allocation).gpu.node
    root = signed_in(world.root)
    root.goto("/dashboard/")
    expect(root.locator("[data-node]")).to_have_count(2)
    # when: search by the claim, submitting with Enter
    search = root.get_by_label("Node or claim name")
    search.fill(allocation.claim_name)
    search.press("Enter")
    # then
    expect(root.locator("[data-node]")).to_have_count(1)
    expect(root.locator("[data-node]")).to_have_attribute("data-node", node.name)
    assert_drawn_at_their_placements(root, allocation, "Team B")
    # the slot takes keyboard focus and shows its details
    root.locator("button.slot").first.focus()
    expect(root.locator(".slot__info").first).to_be_visible()
    expect(root.locator(".slot__info").first).to_contain_text(allocation.claim_name)
    screenshot(root, "dashboard-root-search")


def test_root_reads_the_showback_and_downloads_it(world: World, signed_in, screenshot):
    # given: Team A has held a 2g.20gb (2/7 of a GPU) for 30 hours, Team B a 1g.10gb (1/7) for 50
    now = timezone.now()
    for allocation, hours in (
        (_active(world, world.alice, world.tenant_a, "2g.20gb"), 30),
        (_active(world, world.charlie, world.tenant_b, "1g.10gb"), 50),
    ):
        # Test setup only: as if it had been activated that long ago.
        Allocation.objects.filter(pk=allocation.pk).update(activated_at=now - timedelta(hours=hours))
    root = signed_in(world.root)
    root.goto("/dashboard/")
    # when
    root.get_by_role("link", name="Usage over time (showback)").click()
    # then
    expect(root.get_by_role("heading", name="Usage (showback)")).to_be_visible()
    expect(root.locator("#showback-table tbody tr")).to_have_count(2)
    rows = root.locator("#showback-table tbody tr")
    # GPU-equivalent-hours, slice-hours held and used, used share, GPUs over their time-sliced share now (issue 13)
    expect(rows.nth(0)).to_have_attribute("data-tenant", "Team A")
    expect(rows.nth(0).locator("td")).to_have_text(["8.57", "30.00", "no data", "no data", "0"])
    expect(rows.nth(1)).to_have_attribute("data-tenant", "Team B")
    expect(rows.nth(1).locator("td")).to_have_text(["7.14", "50.00", "no data", "no data", "0"])
    with root.expect_download() as download:
        root.get_by_role("link", name="Download CSV").click()
    assert download.value.suggested_filename == "fatia-showback-14d.csv"
    screenshot(root, "dashboard-usage")


def test_the_showback_chart_has_axes_and_its_numbers_as_a_table(world: World, signed_in, screenshot):
    """Issue 9: the chart had no axes and was hidden from screen readers."""
    # given: Team B has held a 1g.10gb (1/7 of a GPU) for 50 hours
    allocation = _active(world, world.charlie, world.tenant_b, "1g.10gb")
    Allocation.objects.filter(pk=allocation.pk).update(activated_at=timezone.now() - timedelta(hours=50))
    charlie = signed_in(world.charlie)
    for width in (1440, 390):
        charlie.set_viewport_size({"width": width, "height": 900})
        charlie.goto("/dashboard/usage/?days=7")
        # then: the chart is an image named by its title and described by its axes' caption
        chart = charlie.get_by_role("img", name="GPU-equivalent-hours per day")
        expect(chart).to_be_visible()
        expect(chart).to_have_accessible_description(re.compile(r"^Day \(UTC\), \d{4}-\d\d-\d\d to \d{4}-\d\d-\d\d; "))
        expect(charlie.locator(".usage-plot__y-title")).to_have_text("GPU-equivalent-hours")
        expect(charlie.locator(".usage-plot__tick")).to_have_text(["0", "1", "2", "3", "4"])
        ticks = charlie.locator(".usage-plot__tick")
        top, bottom = ticks.nth(4).bounding_box(), ticks.nth(0).bounding_box()
        assert top is not None and bottom is not None and top["y"] < bottom["y"]
        days = charlie.locator(".usage-plot__day")
        expect(days).to_have_count(7)
        expect(days.last).to_be_visible()
        assert charlie.evaluate("document.documentElement.scrollWidth") == width
        # when: the table alternative is opened
        charlie.get_by_text("Show the chart’s numbers as a table").click()
        # then: a real table, a row per day, reachable by role and name
        table = charlie.get_by_role("table", name="GPU-equivalent-hours per day and tenant")
        expect(table).to_be_visible()
        expect(table.get_by_role("row")).to_have_count(1 + 7)
        expect(table.get_by_role("columnheader")).to_have_text(["Day (UTC)", "Team B", "All shown tenants"])
        assert charlie.evaluate("document.documentElement.scrollWidth") == width
        screenshot(charlie, f"usage-chart-and-table-{width}")
