"""Sharing GPUs without MIG in a real browser, at 1440 and 390 px (issue 13): the request form warns before submit
in a time-sliced pool and prices the share in GiB and percent of a GPU; the request page says what is not
isolated; the dashboard draws a shared GPU as a memory bar split by tenant."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from allocations import services
from tests.sharing.conftest import Shared, shared  # noqa: F401 - fixture

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1440, "height": 900}


def scroll_width(page: Page) -> int:
    return int(page.evaluate("document.documentElement.scrollWidth"))


def shots(page: Page, screenshot, name: str) -> None:
    for size, suffix in ((DESKTOP, "1440"), (PHONE, "390")):
        page.set_viewport_size(size)
        assert scroll_width(page) == size["width"], name
        screenshot(page, f"{name}-{suffix}")
    page.set_viewport_size(DESKTOP)


def test_a_share_request_warns_before_submit_and_shows_its_cost_in_gib(
    shared: Shared,  # noqa: F811
    signed_in,
    screenshot,
) -> None:
    world = shared.world
    page = signed_in(world.alice)
    page.goto("/requests/new/")
    # MIG pool first: no warning, the profile field shows
    page.get_by_label("Pool").select_option(label="H100 pool")
    expect(page.locator("#isolation-warning")).to_be_hidden()
    expect(page.get_by_label("MIG profile")).to_be_visible()
    # when: the time-sliced pool is chosen
    page.get_by_label("Pool").select_option(label="L4 shared")
    page.get_by_label("GPU memory per share (GiB)").fill("4")
    page.get_by_label("Number of slices").fill("2")
    page.get_by_label("Purpose").fill("Small-model inference")
    # then
    expect(page.locator("#isolation-warning")).to_contain_text("a crash or a memory hog hurts every tenant on the GPU")
    expect(page.get_by_label("MIG profile")).to_be_hidden()
    expect(page.get_by_label("Active threads per share (%)")).to_be_hidden()
    expect(page.locator("#cost-memory")).to_have_text("8")
    expect(page.locator("#cost-compute")).to_have_text("36")
    expect(page.locator(".unit-memory").first).to_have_text("GiB")
    expect(page.locator("#verdict-title")).to_have_text("Approved automatically.")
    shots(page, screenshot, "shared-request-form")
    # and the MPS pool asks for a thread share
    page.get_by_label("Pool").select_option(label="L40S MPS")
    expect(page.get_by_label("Active threads per share (%)")).to_be_visible()
    expect(page.locator("#isolation-warning")).to_contain_text("one fault domain")
    page.get_by_label("Pool").select_option(label="L4 shared")
    # when submitted
    page.get_by_role("button", name="Submit request").click()
    # then the request page says what the pool does not isolate
    expect(page.locator("h1")).to_contain_text("2 × 4 GiB share")
    expect(page.locator("#share-isolation")).to_contain_text("No isolation")
    shots(page, screenshot, "shared-request-page")


def test_the_dashboard_draws_a_shared_gpu_as_a_memory_bar_split_by_tenant(
    shared: Shared,  # noqa: F811
    signed_in,
    screenshot,
) -> None:
    world = shared.world
    for tenant, user, mib in ((world.tenant_a, world.alice, 6144), (world.tenant_b, world.charlie, 4096)):
        allocation, _ = services.request_allocation(
            tenant_id=tenant.pk,
            pool_id=shared.l4.pk,
            profile="",
            memory_mib=mib,
            count=1,
            lease_hours=3,
            purpose="bar",
            actor=user,
        )
        if allocation.status == "pending":
            services.approve_allocation(allocation_id=allocation.pk, actor=world.root)
        services.provision_allocation(allocation_id=allocation.pk)
    page = signed_in(world.alice)
    node = shared.l4.nodes.order_by("name").first()
    assert node is not None
    page.goto(f"/dashboard/nodes/{node.pk}/")
    expect(page.locator(".dash-sharing")).to_contain_text("Time-sliced")
    gpu = page.locator(".dash-gpu").first
    expect(gpu.locator("[data-owner='Team A']")).to_contain_text("6 GiB")
    expect(gpu.locator("[data-owner='occupied']")).to_contain_text("4 GiB")
    expect(gpu.locator(".slot--free")).to_have_count(23 - 6 - 4)
    shots(page, screenshot, "shared-gpu-memory-bar")
