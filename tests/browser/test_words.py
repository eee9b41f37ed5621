"""Issue 9's page items in a real browser, at 1440 px and 390 px: the inbox and the header counts, a lease
extension that goes to a manager, the claim with its namespace, the quota change review, and a token's
secret shown once."""

from __future__ import annotations

import re
from collections.abc import Callable

from playwright.sync_api import Page, expect

from allocations import services
from allocations.models import Allocation, LeaseExtension
from tenants.models import ApiToken
from tests.allocating import active_request
from tests.browser.conftest import SLOW_PAGE_MS
from tests.conftest import World

WIDTHS = {"desktop": {"width": 1440, "height": 900}, "phone": {"width": 390, "height": 844}}


def shoot(page: Page, screenshot: Callable[[Page, str], None], name: str, *, fits_phone: bool = False) -> None:
    """A screenshot at each width; with `fits_phone`, nothing may scroll sideways at 390 px."""
    for label, size in WIDTHS.items():
        page.set_viewport_size(size)
        screenshot(page, f"{name}-{label}")
    if fits_phone:
        assert page.evaluate("document.documentElement.scrollWidth") == WIDTHS["phone"]["width"], name
    page.set_viewport_size(WIDTHS["desktop"])


def active(world: World, *, lease_hours: int = 8) -> Allocation:
    return active_request(world, lease_hours=lease_hours, purpose="Serve a model")


def test_a_long_extension_goes_to_mallory_who_sees_it_counted_and_approves_it(world: World, signed_in, screenshot):
    # given: alice's active 8 h lease, with its claim and namespace
    allocation = active(world)
    alice = signed_in(world.alice)
    alice.goto(f"/requests/{allocation.pk}/")
    expect(alice.locator("#claim-namespace")).to_have_text("fatia-team-a")
    expect(alice.locator("#pod-spec")).to_contain_text("namespace: fatia-team-a")
    expect(alice.locator("#extend-help")).to_contain_text("Up to 16 more hours apply at once; more goes to a manager.")
    shoot(alice, screenshot, "request-active-namespace")
    # when: she asks for 24 h more (32 h in all, past the 24 h that apply at once)
    alice.get_by_label("Extend the lease by (hours)").fill("24")
    alice.get_by_role("button", name="Extend lease").click()
    # then
    expect(alice.get_by_role("status").first).to_contain_text("needs a manager")
    expect(alice.locator("#pending-extension")).to_contain_text("Extending the lease by 24 h (to 32 h) waits")
    shoot(alice, screenshot, "request-extension-waiting")
    # when: mallory sees it counted on Approvals and in her inbox
    mallory = signed_in(world.mallory)
    nav = mallory.get_by_role("navigation", name="Main")
    expect(nav.get_by_role("link", name="Approvals")).to_have_text("Approvals 1 waiting for you")
    expect(mallory.locator(".inbox-link")).to_have_text("Inbox 1 unread")
    nav.get_by_role("link", name="Approvals").click()
    expect(mallory.get_by_role("heading", name=f"Request #{allocation.pk}: 1 × 1g.10gb, 24 h more")).to_be_visible()
    shoot(mallory, screenshot, "approvals-extension")
    mallory.get_by_role("button", name=f"Approve extension of request #{allocation.pk}").click()
    # then
    expect(mallory.get_by_role("status").first).to_contain_text(f"The lease of request #{allocation.pk} is extended")
    expect(nav.get_by_role("link", name="Approvals")).to_have_text("Approvals")
    assert LeaseExtension.objects.get().status == "approved"
    alice.reload()
    expect(alice.locator(".inbox-link")).to_have_text("Inbox 1 unread")


def test_the_inbox_lists_notifications_and_marks_them_read(world: World, signed_in, screenshot):
    # given: two requests wait for mallory, a quota change of hers was decided
    for profile in ("3g.40gb", "4g.40gb"):
        services.request_allocation(
            tenant_id=world.tenant_a.pk,
            pool_id=world.pool.pk,
            profile=profile,
            count=1,
            lease_hours=8,
            purpose="Evaluate a long-context model on the full benchmark suite",
            actor=world.alice,
        )
    change, _ = services.request_quota_change(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        compute_slices_limit=28,
        memory_slices_limit=32,
        justification="growth",
        actor=world.mallory,
    )
    services.reject_quota_change(change_id=change.pk, actor=world.root, reason="budget")
    page = signed_in(world.mallory)
    # when
    page.locator(".inbox-link").click()
    # then
    expect(page.get_by_role("heading", level=1)).to_have_text("Inbox")
    expect(page.locator(".inbox__item--unread")).to_have_count(3)
    expect(page.locator(".inbox-link .count-badge")).to_have_text("3 unread")
    shoot(page, screenshot, "inbox", fits_phone=True)
    # when: one, then all
    page.locator(".inbox__item--unread").first.get_by_role("button").click()
    expect(page.locator(".inbox-link .count-badge")).to_have_text("2 unread")
    page.get_by_role("button", name="Mark all as read").click()
    # then
    expect(page.locator(".inbox__item--unread")).to_have_count(0)
    expect(page.locator(".inbox-link .count-badge")).to_have_count(0)
    expect(page.get_by_role("status").first).to_contain_text("2 notifications marked as read.")


def test_the_quota_change_review_warns_about_a_cut_below_usage(world: World, signed_in, screenshot):
    # given: Team A uses 6 compute slices; mallory asks for 4
    for _ in range(2):
        pending, _ = services.request_allocation(
            tenant_id=world.tenant_a.pk,
            pool_id=world.pool.pk,
            profile="3g.40gb",
            count=1,
            lease_hours=8,
            purpose="p",
            actor=world.alice,
        )
        services.approve_allocation(allocation_id=pending.pk, actor=world.mallory)
    services.request_quota_change(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        compute_slices_limit=4,
        memory_slices_limit=16,
        justification="Fewer GPUs next month",
        actor=world.mallory,
    )
    page = signed_in(world.root)
    # when
    page.goto("/manage/quota-changes/")
    # then
    note = page.get_by_role("note")
    expect(note).to_contain_text("Below current usage. 6 compute slices are in use; the new limit is 4.")
    shoot(page, screenshot, "quota-change-review")


def test_a_new_tokens_secret_shows_once_and_a_reload_creates_nothing(world: World, signed_in, screenshot):
    # given
    page = signed_in(world.alice)
    page.goto("/tokens/")
    page.get_by_label("Name").fill("CI")
    # when
    page.get_by_role("button", name="Create token").click()
    # then
    secret = page.locator("#new-token-secret")
    expect(secret).to_have_text(re.compile(r"^fatia_\w+_[\w-]+$"))
    shoot(page, screenshot, "token-created")
    # when
    page.reload()
    # then
    expect(page.locator("#new-token-secret")).to_have_count(0)
    assert ApiToken.objects.filter(user=world.alice).count() == 1


def test_the_timeline_reads_as_sentences(world: World, signed_in, screenshot):
    # given
    allocation = active(world)
    services.request_lease_extension(allocation_id=allocation.pk, hours=8, actor=world.alice)
    page = signed_in(world.alice)
    # when
    page.goto(f"/requests/{allocation.pk}/")
    # then
    items = page.locator(".timeline__text")
    expect(items).to_have_count(4)
    expect(items.nth(0)).to_have_text("alice asked for 1 × 1g.10gb for 8 h")
    expect(items.nth(3)).to_contain_text("alice extended the lease by 8 h to 16 h, until ")
    page.locator("#timeline-title").scroll_into_view_if_needed()
    shoot(page, screenshot, "request-timeline")


def test_redoc_loads_nothing_from_the_internet(world: World, signed_in, screenshot, live_server):
    """Issue 9: ReDoc loaded web fonts from Google (and its bundle Redocly's logo from a CDN)."""
    # given
    page = signed_in(world.alice)
    page.set_default_timeout(SLOW_PAGE_MS)  # goto and the full-page screenshot
    outside: list[str] = []
    ours = (live_server.url, f"blob:{live_server.url}", "data:")  # the page, its worker's blob, inline data
    page.on("request", lambda r: None if r.url.startswith(ours) else outside.append(r.url))
    # when
    page.goto("/api/v1/redoc/")
    # then
    expect(page.get_by_text("Fatia API").first).to_be_visible(timeout=SLOW_PAGE_MS)
    expect(page.get_by_text("/api/v1/allocations/").first).to_be_attached(timeout=SLOW_PAGE_MS)
    page.wait_for_timeout(500)  # the side menu's logo is added after the first render
    assert outside == []
    screenshot(page, "redoc-offline")
