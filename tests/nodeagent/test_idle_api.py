"""Idle reclaim on the API and the pages: the tenant setting (managers and admins change it; 400 with field
messages; a friendly page in the browser) and "Keep it" (owner or manager), across tenants."""

from __future__ import annotations

import pytest

from allocations.models import Allocation
from allocations.services import reclaim
from tenants.models import AuditEvent, Tenant
from tests.conftest import World
from tests.dashboard.test_dashboard import client_for
from tests.nodeagent.test_idle_reclaim import NOW, idle_slices, reclaim_on

pytestmark = pytest.mark.django_db
GOOD = {"enabled": True, "idle_after_minutes": 90, "idle_grace_minutes": 30}


def url(world: World) -> str:
    return f"/api/v1/tenants/{world.tenant_a.pk}/idle-reclaim/"


def settings_of(tenant: Tenant) -> tuple[bool, int, int]:
    tenant.refresh_from_db()
    return tenant.idle_reclaim_enabled, tenant.idle_after_minutes, tenant.idle_grace_minutes


def test_a_manager_turns_idle_reclaim_on(world: World):
    # when
    response = world.client(world.mallory).put(url(world), GOOD, format="json")

    # then
    assert response.status_code == 200
    assert response.json() == GOOD
    assert settings_of(world.tenant_a) == (True, 90, 30)
    event = AuditEvent.objects.get(verb="set_idle_reclaim")
    assert (event.actor_name, event.tenant_id, event.before, event.after) == (
        "mallory",
        world.tenant_a.pk,
        {"idle_reclaim_enabled": False, "idle_after_minutes": 120, "idle_grace_minutes": 60},
        {"name": "Team A", "idle_reclaim_enabled": True, "idle_after_minutes": 90, "idle_grace_minutes": 30},
    )


def test_a_platform_admin_may_set_it_and_members_read_it(world: World):
    assert world.client(world.root).put(url(world), GOOD, format="json").status_code == 200
    response = world.client(world.alice).get(url(world))
    assert (response.status_code, response.json()) == (200, GOOD)


def test_a_member_may_not_change_it_and_nothing_changes(world: World):
    response = world.client(world.alice).put(url(world), GOOD, format="json")
    assert response.status_code == 403
    assert response.json()["detail"] == "Only the tenant's managers and platform admins can change idle reclaim."
    assert settings_of(world.tenant_a) == (False, 120, 60)
    assert not AuditEvent.objects.filter(verb="set_idle_reclaim").exists()


def test_another_tenant_gets_404_and_anonymous_401(world: World):
    assert world.client(world.charlie).put(url(world), GOOD, format="json").status_code == 404
    assert world.client(world.charlie).get(url(world)).status_code == 404
    assert world.client(None).get(url(world)).status_code == 401
    assert settings_of(world.tenant_a) == (False, 120, 60)


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        (
            {**GOOD, "idle_after_minutes": 5},
            {"idle_after_minutes": ["Ensure this value is greater than or equal to 15."]},
        ),
        (
            {**GOOD, "idle_grace_minutes": 20000},
            {"idle_grace_minutes": ["Ensure this value is less than or equal to 10080."]},
        ),
        ({"enabled": "perhaps", "idle_after_minutes": "soon"}, None),
    ],
)
def test_bad_values_are_400_with_field_messages(world: World, body, errors):
    response = world.client(world.mallory).put(url(world), body, format="json")
    assert response.status_code == 400
    if errors is not None:
        assert response.json()["errors"] == errors
    else:
        assert sorted(response.json()["errors"]) == ["enabled", "idle_after_minutes", "idle_grace_minutes"]
    assert settings_of(world.tenant_a) == (False, 120, 60)


def test_the_owner_keeps_a_flagged_request_on_the_api(world: World):
    # given
    reclaim_on(world)
    allocation, _ = idle_slices(world)
    reclaim.reclaim_idle_allocations(now=NOW)
    detail = world.client(world.alice).get(f"/api/v1/allocations/{allocation.pk}/").json()
    assert detail["idle"]["idle_since"] == "2026-11-30T08:00:00Z"
    assert detail["idle"]["release_at"] == "2026-11-30T12:00:00Z"

    # when
    response = world.client(world.alice).post(f"/api/v1/allocations/{allocation.pk}/keep/")

    # then
    assert response.status_code == 200
    idle = response.json()["idle"]
    assert (idle["idle_since"], idle["warned_at"], idle["release_at"]) == (None, None, None)
    assert idle["snoozed_until"] is not None


def test_keep_across_tenants_and_when_not_flagged(world: World):
    # given: flagged
    reclaim_on(world)
    allocation, _ = idle_slices(world)
    reclaim.reclaim_idle_allocations(now=NOW)

    # then: charlie cannot see it; a second keep after alice's is a 409
    assert world.client(world.charlie).post(f"/api/v1/allocations/{allocation.pk}/keep/").status_code == 404
    assert Allocation.objects.get(pk=allocation.pk).idle_since is not None
    assert world.client(world.alice).post(f"/api/v1/allocations/{allocation.pk}/keep/").status_code == 200
    again = world.client(world.alice).post(f"/api/v1/allocations/{allocation.pk}/keep/")
    assert again.status_code == 409
    assert again.json()["code"] == "not_idle"


# --- pages ------------------------------------------------------------------------------------------------------


def page(world: World) -> str:
    return f"/tenants/{world.tenant_a.pk}/idle-reclaim/"


def test_the_manager_saves_the_setting_on_its_page(world: World):
    client = client_for(world.mallory)
    response = client.post(page(world), {"enabled": "on", "idle_after_minutes": "45", "idle_grace_minutes": "15"})
    assert response.status_code == 302
    assert settings_of(world.tenant_a) == (True, 45, 15)
    html = client.get(page(world)).content.decode()
    assert "Idle reclaim for Team A is on." in html
    assert "a request whose every slice is idle for 45 minutes is flagged" in html


def test_a_bad_value_on_the_page_is_shown_next_to_its_field(world: World):
    response = client_for(world.mallory).post(
        page(world), {"enabled": "on", "idle_after_minutes": "3", "idle_grace_minutes": "15"}
    )
    assert response.status_code == 400  # the same page, its form refused (tenants.forms.form_status)
    html = response.content.decode()
    assert "Ensure this value is greater than or equal to 15." in html
    assert settings_of(world.tenant_a) == (False, 120, 60)


def test_a_member_sees_the_setting_read_only_and_may_not_post(world: World):
    html = client_for(world.alice).get(page(world)).content.decode()
    assert "Only the tenant’s managers and platform admins can change this." in html
    assert 'name="idle_after_minutes" value="120"' in html
    assert "disabled" in html
    assert client_for(world.alice).post(page(world), {"enabled": "on"}).status_code == 403
    assert client_for(world.charlie).get(page(world)).status_code == 404
    assert settings_of(world.tenant_a) == (False, 120, 60)


def test_the_request_page_shows_the_idle_banner_and_keeps_it(world: World):
    # given
    reclaim_on(world)
    allocation, _ = idle_slices(world)
    reclaim.reclaim_idle_allocations(now=NOW)
    client = client_for(world.alice)

    # when
    html = client.get(f"/requests/{allocation.pk}/").content.decode()
    kept = client.post(f"/requests/{allocation.pk}/keep/", follow=True).content.decode()

    # then
    assert "every slice has had no process and no memory in use since" in html
    assert ">2026-11-30 08:00 UTC</time>" in html
    assert "It will be released at <time" in html
    assert ">2026-11-30 12:00 UTC</time> unless it is used again or kept." in html
    assert "Keep it</button>" in html
    assert f"Request #{allocation.pk} is kept: it is not flagged idle again before" in kept
    assert 'id="idle-banner"' not in kept
