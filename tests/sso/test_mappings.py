"""Group -> tenant/role mappings: the API (/api/v1/sso-group-mappings/, platform admins only), the /manage/sso/
page, and how a sign-in applies them (tenants/sso/services.py)."""

from __future__ import annotations

from typing import Any

from django.db.models import Q
from django.test import Client

from tenants import services
from tenants.models import ApiToken, AuditEvent, Membership, SsoGroupMapping
from tenants.sso.services import sign_in_sso_user
from tests.conftest import World

URL = "/api/v1/sso-group-mappings/"


def test_an_admin_maps_a_group_changes_its_role_and_removes_it_audited(world: World):
    # given
    client = world.client(world.root)
    # when
    created = client.post(URL, {"group": "gpu-team-a-managers", "tenant": world.tenant_a.pk, "role": "manager"})
    changed = client.patch(f"{URL}{created.json()['id']}/", {"role": "member"}, format="json")
    listed = client.get(URL)
    removed = client.delete(f"{URL}{created.json()['id']}/")
    # then
    assert created.status_code == 201
    assert {k: created.json()[k] for k in ("group", "tenant", "tenant_slug", "role")} == {
        "group": "gpu-team-a-managers",
        "tenant": world.tenant_a.pk,
        "tenant_slug": "team-a",
        "role": "manager",
    }
    assert changed.json()["role"] == "member"
    assert [m["group"] for m in listed.json()["results"]] == ["gpu-team-a-managers"]
    assert removed.status_code == 204
    assert not SsoGroupMapping.objects.exists()
    assert list(
        AuditEvent.objects.filter(object_type="ssogroupmapping")
        .order_by("id")
        .values_list("actor_name", "verb", "tenant")
    ) == [
        ("root", "create", world.tenant_a.pk),
        ("root", "update", world.tenant_a.pk),
        ("root", "delete", world.tenant_a.pk),
    ]


def test_bad_input_is_a_400_naming_each_field(world: World):
    # given
    client = world.client(world.root)
    SsoGroupMapping.objects.create(group="dup", tenant=world.tenant_a, role="member")
    # when
    missing = client.post(URL, {}, format="json")
    bad_role = client.post(URL, {"group": "g", "tenant": world.tenant_a.pk, "role": "owner"}, format="json")
    unknown_tenant = client.post(URL, {"group": "g", "tenant": 999999, "role": "member"}, format="json")
    blank_group = client.post(URL, {"group": "   ", "tenant": world.tenant_a.pk, "role": "member"}, format="json")
    duplicate = client.post(URL, {"group": "dup", "tenant": world.tenant_a.pk, "role": "manager"}, format="json")
    # then
    assert missing.status_code == 400
    assert sorted(missing.json()["errors"]) == ["group", "role", "tenant"]
    assert bad_role.status_code == 400 and list(bad_role.json()["errors"]) == ["role"]
    assert unknown_tenant.status_code == 400
    assert unknown_tenant.json()["errors"] == {"tenant": ["Unknown tenant 999999."]}
    assert blank_group.status_code == 400 and list(blank_group.json()["errors"]) == ["group"]
    assert duplicate.status_code == 400
    assert duplicate.json()["errors"] == {"group": ["Group 'dup' already maps to Team A; change its role instead."]}
    assert SsoGroupMapping.objects.count() == 1


def test_a_tenant_manager_may_neither_read_nor_change_mappings_and_nothing_changes(world: World):
    # given
    mapping = SsoGroupMapping.objects.create(group="g", tenant=world.tenant_a, role="member")
    client = world.client(world.mallory)
    # when
    responses = [
        client.get(URL),
        client.post(URL, {"group": "x", "tenant": world.tenant_a.pk, "role": "manager"}, format="json"),
        client.patch(f"{URL}{mapping.pk}/", {"role": "manager"}, format="json"),
        client.delete(f"{URL}{mapping.pk}/"),
    ]
    # then
    assert [r.status_code for r in responses] == [403, 403, 403, 403]
    assert list(SsoGroupMapping.objects.values_list("group", "role")) == [("g", "member")]
    assert not AuditEvent.objects.filter(object_type="ssogroupmapping").exists()


def test_anonymous_callers_are_refused(world: World):
    # when
    response = world.client(None).get(URL)
    # then
    assert response.status_code == 401


def test_a_read_only_token_of_an_admin_cannot_write(world: World):
    # given
    _, secret = services.create_api_token(
        user=world.root, name="ro", scope=ApiToken.Scope.READ, expires_at=None, actor=world.root
    )
    client = Client()
    # when
    response = client.post(
        URL,
        {"group": "x", "tenant": world.tenant_a.pk, "role": "member"},
        content_type="application/json",
        headers={"Authorization": f"Bearer {secret}"},
    )
    # then
    assert response.status_code == 403
    assert not SsoGroupMapping.objects.exists()


def test_the_manage_page_adds_a_mapping_and_shows_field_errors(world: World):
    # given
    client = Client()
    client.force_login(world.root)
    # when
    bad = client.post("/manage/sso/", {"group": "", "tenant": world.tenant_a.pk, "role": "member"})
    good = client.post("/manage/sso/", {"group": "gpu-b", "tenant": world.tenant_b.pk, "role": "manager"}, follow=True)
    # then
    assert bad.status_code == 400
    assert "This field is required." in bad.content.decode()
    assert good.status_code == 200
    assert "Members of gpu-b become managers of Team B at their next sign-in." in good.content.decode()
    assert list(SsoGroupMapping.objects.values_list("group", "tenant__slug", "role")) == [
        ("gpu-b", "team-b", "manager")
    ]


def test_the_manage_page_is_for_platform_admins_only(world: World):
    # given
    client = Client()
    client.force_login(world.mallory)
    # when
    response = client.post("/manage/sso/", {"group": "g", "tenant": world.tenant_a.pk, "role": "manager"})
    # then
    assert response.status_code == 403
    assert not SsoGroupMapping.objects.exists()


# --- applying the mappings at sign-in --------------------------------------------------------------------------------


def _sign_in(sub: str, groups: list[str]) -> Any:
    return sign_in_sso_user(issuer="https://idp.example.test", subject=sub, username=sub, email="", groups=groups)


def test_memberships_added_by_hand_are_left_alone(world: World):
    # given: sam was added to team B by hand, and team A's group maps to team B as manager too
    SsoGroupMapping.objects.create(group="gpu-a", tenant=world.tenant_a, role="member")
    SsoGroupMapping.objects.create(group="gpu-b-managers", tenant=world.tenant_b, role="manager")
    sam = _sign_in("sam", [])
    services.add_member(tenant_id=world.tenant_b.pk, username="sam", role="member", actor=world.root)
    # when
    _sign_in("sam", ["gpu-a", "gpu-b-managers"])
    _sign_in("sam", [])
    # then: the SSO membership came and went; the hand-made one stayed as it was
    assert list(sam.memberships.values_list("tenant__slug", "role", "sso_managed")) == [("team-b", "member", False)]


def test_the_highest_role_wins_when_several_groups_map_to_one_tenant(world: World):
    # given
    SsoGroupMapping.objects.create(group="gpu-a", tenant=world.tenant_a, role="member")
    SsoGroupMapping.objects.create(group="gpu-a-managers", tenant=world.tenant_a, role="manager")
    # when
    user = _sign_in("tess", ["gpu-a", "gpu-a-managers"])
    # then
    assert list(user.memberships.values_list("tenant__slug", "role")) == [("team-a", Membership.Role.MANAGER)]


def test_a_role_change_in_the_mapping_applies_at_the_next_sign_in(world: World):
    # given
    mapping = SsoGroupMapping.objects.create(group="gpu-a", tenant=world.tenant_a, role="member")
    user = _sign_in("uma", ["gpu-a"])
    mapping.role = "manager"
    mapping.save(update_fields=["role"])
    # when
    _sign_in("uma", ["gpu-a"])
    # then
    assert list(user.memberships.values_list("role", flat=True)) == ["manager"]
    assert AuditEvent.objects.filter(actor_name="sso", verb="change_role").count() == 1


def test_an_admin_made_by_hand_stays_an_admin_without_the_group(world: World, settings: Any):
    # given: vic signs in once, then an admin makes vic staff by hand
    settings.FATIA_OIDC_ADMIN_GROUPS = ["platform-admins"]
    vic = _sign_in("vic", [])
    vic.is_staff = True
    vic.save(update_fields=["is_staff"])
    # when
    _sign_in("vic", [])
    # then
    vic.refresh_from_db()
    assert vic.is_staff


def test_the_audit_log_tells_what_single_sign_on_did_in_sentences(world: World, settings: Any):
    from tenants.audit_text import describe_event

    # given
    settings.FATIA_OIDC_ADMIN_GROUPS = ["platform-admins"]
    client = world.client(world.root)
    client.post(URL, {"group": "gpu-a", "tenant": world.tenant_a.pk, "role": "manager"}, format="json")
    # when
    _sign_in("yara", ["gpu-a", "platform-admins"])
    _sign_in("yara", [])
    # then
    events = AuditEvent.objects.filter(Q(actor_name="sso") | Q(object_type="ssogroupmapping")).order_by("id")
    assert [describe_event(e) for e in events] == [
        "root mapped group gpu-a to manager in team-a",
        "sso created user yara at their first sign-in",
        "sso made yara a platform admin",
        "sso added yara as manager",
        "sso took platform admin away from yara",
        "sso removed yara from the tenant",
    ]


def test_the_tenant_page_says_which_memberships_came_from_single_sign_on(world: World):
    # given
    SsoGroupMapping.objects.create(group="gpu-a", tenant=world.tenant_a, role="member")
    _sign_in("zoe", ["gpu-a"])
    client = Client()
    client.force_login(world.root)
    # when
    page = client.get(f"/manage/tenants/{world.tenant_a.pk}/").content.decode()
    # then: zoe's row says so, alice's (added by hand) does not
    assert page.count("from single sign-on groups") == 1
    assert page.index("zoe") < page.index("from single sign-on groups")
