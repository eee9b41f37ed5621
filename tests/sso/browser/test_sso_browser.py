"""Single sign-on in a real browser against a real OpenID Connect provider (oidc-provider-mock): sign in on the
provider's page, the group mapping applied, log out, and a user whose groups changed loses the membership at the
next sign-in."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tenants.models import Membership, SsoGroupMapping
from tests.conftest import World
from tests.sso.provider import Provider

WIDE = {"width": 1440, "height": 900}
NARROW = {"width": 390, "height": 844}


@pytest.fixture
def page(browser: Browser, live_server: Any) -> Iterator[Page]:
    context = browser.new_context(base_url=live_server.url, viewport=WIDE)
    context.set_default_timeout(10_000)
    yield context.new_page()
    context.close()


def shoot(page: Page, screenshot: Any, name: str) -> None:
    for label, size in (("1440", WIDE), ("390", NARROW)):
        page.set_viewport_size(size)
        screenshot(page, f"{name}-{label}")
    page.set_viewport_size(WIDE)


def sign_in_with_sso(page: Page, sub: str) -> None:
    page.goto("/login/")
    page.get_by_role("link", name="Sign in with single sign-on").click()
    # the provider's own sign-in page
    page.get_by_placeholder("sub").fill(sub)
    page.get_by_role("button", name="Authorize", exact=True).click()


def test_sign_in_through_the_provider_maps_groups_and_a_changed_group_loses_the_membership(
    world: World, sso: Provider, page: Page, screenshot: Any
):
    # given: the group gpu-team-a-managers makes its members managers of Team A
    SsoGroupMapping.objects.create(group="gpu-team-a-managers", tenant=world.tenant_a, role=Membership.Role.MANAGER)
    sso.set_user("sub-wendy", preferred_username="wendy", email="wendy@example.test", groups=["gpu-team-a-managers"])
    page.goto("/login/")
    expect(page.get_by_role("link", name="Sign in with single sign-on")).to_be_visible()
    shoot(page, screenshot, "sso-login")

    # when: wendy signs in at the provider
    sign_in_with_sso(page, "sub-wendy")

    # then: signed in, a manager of Team A
    expect(page.get_by_role("heading", name="My requests")).to_be_visible()
    expect(page.get_by_text("Signed in as wendy")).to_be_visible()
    nav = page.get_by_role("navigation", name="Main")
    expect(nav.get_by_role("link", name="Approvals")).to_be_visible()
    page.goto("/quotas/")
    expect(page.get_by_role("main")).to_contain_text("Team A")
    shoot(page, screenshot, "sso-signed-in")

    # when: wendy logs out
    page.set_viewport_size(WIDE)
    page.get_by_role("button", name="Log out").click()
    # then
    expect(page.get_by_role("heading", name="Sign in to Fatia")).to_be_visible()

    # when: the provider no longer has wendy in the group, and wendy signs in again
    sso.set_user("sub-wendy", preferred_username="wendy", email="wendy@example.test", groups=[])
    sign_in_with_sso(page, "sub-wendy")

    # then: signed in as the same user, without the membership
    expect(page.get_by_text("Signed in as wendy")).to_be_visible()
    expect(page.get_by_role("navigation", name="Main").get_by_role("link", name="Approvals")).to_have_count(0)
    assert not Membership.objects.filter(user__username="wendy").exists()
    shoot(page, screenshot, "sso-signed-in-no-tenant")


def test_an_admin_maps_a_group_on_the_single_sign_on_page(world: World, sso: Provider, page: Page, screenshot: Any):
    # given: root signs in with a password (local login is on)
    page.goto("/login/")
    page.get_by_label("Username").fill("root")
    page.get_by_label("Password").fill("correct horse battery staple")
    page.get_by_role("button", name="Sign in", exact=True).click()
    nav = page.get_by_role("navigation", name="Main")
    nav.get_by_text("Admin", exact=True).click()
    nav.get_by_role("link", name="Single sign-on").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Single sign-on")
    # when
    page.get_by_role("textbox", name="Group").fill("gpu-team-b-managers")
    page.get_by_role("combobox", name="Tenant").select_option(label="Team B")
    page.get_by_role("combobox", name="Role").select_option("manager")
    page.get_by_role("button", name="Add mapping").click()
    # then
    expect(page.get_by_role("status").first).to_have_text(
        "Done: Members of gpu-team-b-managers become managers of Team B at their next sign-in."
    )
    expect(page.get_by_role("row", name="gpu-team-b-managers")).to_contain_text("Team B")
    shoot(page, screenshot, "sso-manage")
