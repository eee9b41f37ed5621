"""A user's path through the portal in a real browser: request slices with a live cost preview,
have a manager approve them, and see only the links that fit one's role."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from allocations import services
from allocations.models import Allocation
from tests.conftest import World


def test_alice_sees_the_live_cost_and_her_small_request_is_approved_at_once(world: World, signed_in, screenshot):
    # given
    page = signed_in(world.alice)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="New request").click()
    # when: a 1g.20gb costs one compute slice and two memory slots of an H100's 7 and 8
    page.get_by_label("MIG profile").select_option("1g.20gb")
    # then
    expect(page.locator("#cost-compute")).to_have_text("1")
    expect(page.locator("#cost-memory")).to_have_text("2")
    expect(page.locator("#cost-gpu")).to_have_text("0.25")
    # when: two of them
    page.get_by_label("Number of slices").fill("2")
    # then
    expect(page.locator("#cost-compute")).to_have_text("2")
    expect(page.locator("#cost-memory")).to_have_text("4")
    expect(page.locator("#cost-gpu")).to_have_text("0.50")
    expect(page.locator("#quota-scope")).to_have_text("Team A in H100 pool")
    expect(page.locator("#quota-compute-free")).to_have_text("14")
    expect(page.locator("#quota-memory-free")).to_have_text("16")
    expect(page.locator("#quota-gpu-free")).to_have_text("2.00")
    expect(page.locator("#after-compute")).to_have_text("12")
    expect(page.locator("#after-memory")).to_have_text("12")
    expect(page.locator("#after-gpu")).to_have_text("1.71")
    expect(page.locator("#verdict-title")).to_have_text("Approved automatically.")
    page.get_by_label("Purpose").fill("Evaluate a 7B model")
    screenshot(page, "new-request-auto-approved")
    # when
    page.get_by_role("button", name="Submit request").click()
    # then
    allocation = Allocation.objects.get()
    expect(page).to_have_url(re.compile(rf"/requests/{allocation.pk}/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Request #{allocation.pk}: 2 × 1g.20gb Approved")
    expect(page.get_by_role("status").first).to_contain_text(f"Request #{allocation.pk} is approved")
    screenshot(page, "request-approved")


def test_a_request_beyond_the_policy_goes_to_mallory_who_approves_it(world: World, signed_in, screenshot):
    # given: a 3g.40gb costs 3 compute slices, over Team A's auto-approve limit of 2
    alice = signed_in(world.alice)
    alice.goto("/requests/new/")
    alice.get_by_label("MIG profile").select_option("3g.40gb")
    expect(alice.locator("#cost-compute")).to_have_text("3")
    expect(alice.locator("#cost-memory")).to_have_text("4")
    expect(alice.locator("#cost-gpu")).to_have_text("0.50")
    expect(alice.locator("#verdict-title")).to_have_text("Goes to a manager for approval.")
    expect(alice.locator("#verdict-reason")).to_have_text(
        "It costs more than 2 compute slices, the most Team A approves automatically."
    )
    screenshot(alice, "new-request-needs-a-manager")
    alice.get_by_label("Purpose").fill("Fine-tune a 13B model")
    alice.get_by_role("button", name="Submit request").click()
    allocation = Allocation.objects.get()
    expect(alice.locator("h1 .badge")).to_have_text("Pending approval")
    # when: mallory, in her own browser context, approves it
    mallory = signed_in(world.mallory)
    mallory.get_by_role("link", name="Approvals").click()
    expect(mallory.get_by_role("heading", name=f"Request #{allocation.pk}: 1 × 3g.40gb")).to_be_visible()
    screenshot(mallory, "approvals")
    mallory.get_by_label("Note").fill("Go ahead")
    mallory.get_by_role("button", name=f"Approve request #{allocation.pk}").click()
    # then
    expect(mallory.get_by_role("status").first).to_contain_text(f"Request #{allocation.pk} is approved")
    expect(mallory.get_by_text("No request waits for you.")).to_be_visible()
    alice.reload()
    expect(alice.locator("h1 .badge")).to_have_text("Approved")
    allocation.refresh_from_db()
    assert (allocation.status, allocation.decided_by_id, allocation.decision_reason) == (
        Allocation.Status.APPROVED,
        world.mallory.pk,
        "Go ahead",
    )


def test_a_member_does_not_see_the_approvals_link_and_a_manager_does(world: World, signed_in):
    # when
    alice = signed_in(world.alice)
    mallory = signed_in(world.mallory)
    # then
    expect(alice.get_by_role("navigation", name="Main").get_by_role("link", name="Approvals")).to_have_count(0)
    expect(mallory.get_by_role("navigation", name="Main").get_by_role("link", name="Approvals")).to_have_count(1)


def test_alice_copies_the_claim_of_her_active_request(world: World, signed_in, screenshot):
    # given
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="2g.20gb",
        count=1,
        lease_hours=8,
        purpose="Serve a model",
        actor=world.alice,
    )
    services.provision_allocation(allocation_id=allocation.pk)
    allocation.refresh_from_db()
    page = signed_in(world.alice)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    screenshot(page, "home")
    page.get_by_role("link", name=f"#{allocation.pk}").click()
    # when
    page.get_by_role("button", name="Copy claim name").click()
    # then
    expect(page.locator("#claim-title ~ [data-copy-status]")).to_have_text("Copied to the clipboard.")
    assert page.evaluate("navigator.clipboard.readText()") == f"mig-alloc-{allocation.uuid}"
    expect(page.locator("#pod-spec")).to_contain_text(f"resourceClaimName: mig-alloc-{allocation.uuid}")
    expect(page.locator("h1 .badge")).to_have_text("Active")
    screenshot(page, "request-active")


def test_the_new_request_page_fits_a_phone_screen(world: World, signed_in, screenshot):
    # given
    page = signed_in(world.alice)
    page.set_viewport_size({"width": 390, "height": 844})
    # when
    page.goto("/requests/new/")
    page.get_by_label("MIG profile").select_option("7g.80gb")
    # then: nothing overflows sideways, and the preview follows the form
    expect(page.locator("#cost-gpu")).to_have_text("1.00")
    assert page.evaluate("document.documentElement.scrollWidth") == 390
    screenshot(page, "new-request-phone")
