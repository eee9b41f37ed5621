"""Request pages update live (issue 9: "the manager approved; the requester's page still said Pending"): alice
keeps her request, and her request list, open while mallory approves in her own browser."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from allocations import services
from allocations.models import Allocation
from tests.conftest import World


def _pending(world: World) -> Allocation:
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="3g.40gb",  # 3 compute slices: over Team A's auto-approval limit of 2
        count=1,
        lease_hours=8,
        purpose="Fine-tune a 13B model",
        actor=world.alice,
    )
    assert allocation.status == Allocation.Status.PENDING
    return allocation


def _mallory_approves(world: World, signed_in, allocation: Allocation) -> None:
    mallory = signed_in(world.mallory)
    mallory.goto("/approvals/")
    mallory.get_by_role("button", name=f"Approve request #{allocation.pk}").click()
    expect(mallory.get_by_role("status").first).to_contain_text(f"Request #{allocation.pk} is approved")


def _both_widths(page: Page, screenshot, name: str) -> None:
    for width in (1440, 390):
        page.set_viewport_size({"width": width, "height": 900})
        screenshot(page, f"{name}-{width}")
    page.set_viewport_size({"width": 1280, "height": 900})


def test_alices_open_request_shows_mallorys_approval_and_its_slices_without_a_reload(
    world: World, signed_in, screenshot, settings
):
    # given: alice has her pending request open
    settings.FATIA_DASHBOARD_STREAM_SECONDS = 5  # reconnects are part of the test, not a 25 s wait
    allocation = _pending(world)
    alice = signed_in(world.alice)
    alice.goto(f"/requests/{allocation.pk}/")
    expect(alice.locator("html")).to_have_attribute("data-live", "on")
    badge = alice.locator('[data-live-region="header"] .badge')
    expect(badge).to_have_text("Pending approval")
    timeline = alice.locator('[data-live-region="timeline"] .timeline__item')
    expect(timeline).to_have_count(1)
    alice.evaluate("window.__notReloaded = true")
    _both_widths(alice, screenshot, "request-live-pending")

    # when: mallory approves it in her own browser
    _mallory_approves(world, signed_in, allocation)

    # then: alice's page says so, and its timeline has the approval by mallory
    expect(badge).to_have_text("Approved")
    expect(timeline).to_have_count(2)
    expect(timeline.nth(1)).to_contain_text("mallory")
    expect(alice.locator("#live-status")).to_have_text("Approved")
    _both_widths(alice, screenshot, "request-live-approved")

    # when: the worker places it (what the provisioning task does after commit)
    services.provision_allocation(allocation_id=allocation.pk)
    allocation.refresh_from_db()

    # then: active, with its claim and its placement, still the same page
    expect(badge).to_have_text("Active")
    expect(alice.locator("#status-message")).to_have_text(allocation.status_message)
    expect(alice.locator("#claim-name")).to_have_text(allocation.claim_name)
    placement = allocation.placements.select_related("gpu__node").get()
    rows = alice.locator('[data-live-region="placements"] tbody tr')
    expect(rows).to_have_count(1)
    expect(rows.first.locator("td").first).to_have_text(placement.gpu.node.name)
    assert alice.evaluate("window.__notReloaded") is True
    _both_widths(alice, screenshot, "request-live-active")


def test_alices_request_list_follows_the_approval_without_a_reload(world: World, signed_in, screenshot, settings):
    # given: alice's list shows her request as pending
    settings.FATIA_DASHBOARD_STREAM_SECONDS = 5
    allocation = _pending(world)
    alice = signed_in(world.alice)  # lands on "My requests"
    expect(alice.locator("html")).to_have_attribute("data-live", "on")
    row = alice.locator('[data-live-region="requests"] tbody tr', has_text=f"#{allocation.pk}")
    expect(row.locator(".badge")).to_have_text("Pending approval")
    pending_count = alice.locator('[data-live-region="filters"] a[href="?status=pending"] .count')
    approved_count = alice.locator('[data-live-region="filters"] a[href="?status=approved"] .count')
    expect(pending_count).to_have_text("1")
    expect(approved_count).to_have_text("0")
    alice.evaluate("window.__notReloaded = true")

    # when
    _mallory_approves(world, signed_in, allocation)

    # then
    expect(row.locator(".badge")).to_have_text("Approved")
    expect(pending_count).to_have_text("0")
    expect(approved_count).to_have_text("1")
    assert alice.evaluate("window.__notReloaded") is True
    _both_widths(alice, screenshot, "requests-live-approved")


def test_charlies_open_list_does_not_refetch_when_team_a_is_approved(world: World, signed_in, settings):
    # given: charlie (Team B) has his list open
    settings.FATIA_DASHBOARD_STREAM_SECONDS = 5
    allocation = _pending(world)
    charlie = signed_in(world.charlie)
    expect(charlie.locator("html")).to_have_attribute("data-live", "on")
    charlie.evaluate("window.__updates = 0; document.addEventListener('fatia:live-updated', () => window.__updates++)")
    fetched: list[str] = []
    charlie.on("request", lambda request: fetched.append(request.url) if request.resource_type == "fetch" else None)

    # when: Team A's request is approved and placed
    _mallory_approves(world, signed_in, allocation)
    services.provision_allocation(allocation_id=allocation.pk)
    # and then one of Team B's own requests changes, which his page must follow
    own, _ = services.request_allocation(
        tenant_id=world.tenant_b.pk,
        pool_id=world.pool.pk,
        profile="1g.10gb",
        count=1,
        lease_hours=8,
        purpose="notebook",
        actor=world.charlie,
    )

    # then: his page refetched once, for his own request only
    expect(charlie.locator('[data-live-region="requests"] tbody tr', has_text=f"#{own.pk}")).to_have_count(1)
    assert charlie.evaluate("window.__updates") == 1
    assert fetched == [charlie.url]
