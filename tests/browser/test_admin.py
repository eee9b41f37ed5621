"""A platform admin's pages in a real browser: reachable from the Admin menu, and they render."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.conftest import World


def test_an_admin_reaches_every_admin_page_from_the_admin_menu(world: World, signed_in, screenshot):
    # given
    page = signed_in(world.root)
    nav = page.get_by_role("navigation", name="Main")
    for link, heading, shot in [
        ("Tenants", "Tenants", "admin-tenants"),
        ("Pools", "Pools", "admin-pools"),
        ("Set quotas", "Set quotas", "admin-quotas"),
        ("Quota changes", "Quota changes", "admin-quota-changes"),
        ("Audit log", "Audit log", "admin-audit-log"),
    ]:
        # when
        nav.get_by_text("Admin", exact=True).click()
        nav.get_by_role("link", name=link, exact=True).click()
        # then
        expect(page.get_by_role("heading", level=1)).to_have_text(heading)
        screenshot(page, shot)


def test_an_admin_creates_a_pool_choosing_profiles_of_its_gpu_model(world: World, signed_in):
    # given
    page = signed_in(world.root)
    page.goto("/manage/pools/")
    page.get_by_label("Name").fill("H200 pool")
    page.get_by_label("Slug").fill("h200")
    # when: only the chosen model's profiles are offered
    page.get_by_label("GPU model").select_option("NVIDIA H200")
    expect(page.get_by_role("group", name="Profiles of NVIDIA H100 80GB HBM3")).to_be_hidden()
    profiles = page.get_by_role("group", name="Profiles of NVIDIA H200")
    profiles.get_by_label("1g.18gb", exact=True).check()
    profiles.get_by_label("7g.141gb", exact=True).check()
    page.get_by_role("button", name="Create pool").click()
    # then
    expect(page.get_by_role("status").first).to_have_text("Done: Pool H200 pool is created with 2 profiles.")
    row = page.get_by_role("row", name="H200 pool")
    expect(row).to_contain_text("1g.18gb")
    expect(row).to_contain_text("7g.141gb")
