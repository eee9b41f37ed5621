"""Sign-in by an authenticating proxy's headers: accepted only from the trusted proxy's address, with the same group
mapping as OpenID Connect."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tenants.models import Membership, SsoGroupMapping, SsoIdentity
from tests.conftest import World

PROXY_ADDRESS = "10.128.4.7"


@pytest.fixture
def proxy(settings: Any, world: World) -> World:
    settings.FATIA_AUTH_PROXY = True
    settings.FATIA_AUTH_PROXY_TRUSTED_CIDRS = ["10.128.0.0/14"]
    settings.FATIA_OIDC_ADMIN_GROUPS = ["platform-admins"]
    SsoGroupMapping.objects.create(group="gpu-team-a-managers", tenant=world.tenant_a, role=Membership.Role.MANAGER)
    return world


def me(client: Client, remote_addr: str, **headers: str) -> Any:
    return client.get("/api/v1/me/", REMOTE_ADDR=remote_addr, headers=headers)


def test_the_trusted_proxy_signs_the_named_user_in_with_their_groups_mapped(proxy: World):
    # given
    client = Client()
    # when
    response = me(
        client, PROXY_ADDRESS, **{"X-Forwarded-User": "olivia", "X-Forwarded-Groups": "gpu-team-a-managers,other"}
    )
    # then
    assert response.status_code == 200
    assert response.json()["username"] == "olivia"
    assert [(m["tenant"], m["role"]) for m in response.json()["memberships"]] == [(proxy.tenant_a.pk, "manager")]
    olivia = User.objects.get(username="olivia")
    assert SsoIdentity.objects.filter(user=olivia, issuer="proxy", subject="olivia").count() == 1
    # and the session carries on without the groups being read again
    assert me(client, PROXY_ADDRESS, **{"X-Forwarded-User": "olivia"}).json()["username"] == "olivia"
    assert olivia.memberships.count() == 1


def test_a_forged_header_from_an_untrusted_address_signs_nobody_in(proxy: World):
    # given: someone who reaches the portal directly and writes the proxy's headers
    client = Client()
    # when
    response = me(client, "203.0.113.9", **{"X-Forwarded-User": "root", "X-Forwarded-Groups": "platform-admins"})
    # then
    assert response.status_code == 401
    assert not SsoIdentity.objects.exists()
    assert User.objects.get(username="root").sso_identities.count() == 0
    assert not User.objects.filter(username="root.sso").exists()


def test_a_forwarded_for_header_does_not_make_an_address_trusted(proxy: World):
    # given
    client = Client()
    # when
    response = me(client, "203.0.113.9", **{"X-Forwarded-User": "mallory", "X-Forwarded-For": PROXY_ADDRESS})
    # then
    assert response.status_code == 401
    assert not SsoIdentity.objects.exists()


def test_the_headers_are_ignored_while_the_proxy_setting_is_off(world: World, settings: Any):
    # given: the default, FATIA_AUTH_PROXY off, even from a listed address
    settings.FATIA_AUTH_PROXY_TRUSTED_CIDRS = ["10.128.0.0/14"]
    client = Client()
    # when
    response = me(client, PROXY_ADDRESS, **{"X-Forwarded-User": "olivia"})
    # then
    assert response.status_code == 401
    assert not User.objects.filter(username="olivia").exists()


def test_a_proxy_user_named_like_a_local_account_gets_an_account_of_their_own(proxy: World):
    # given
    client = Client()
    # when
    response = me(client, PROXY_ADDRESS, **{"X-Forwarded-User": "alice"})
    # then
    assert response.json()["username"] == "alice.sso"
    assert not proxy.alice.sso_identities.exists()


def test_another_user_named_by_the_proxy_replaces_the_session_user(proxy: World):
    # given
    client = Client()
    me(client, PROXY_ADDRESS, **{"X-Forwarded-User": "olivia"})
    # when
    response = me(client, PROXY_ADDRESS, **{"X-Forwarded-User": "pat", "X-Forwarded-Groups": "platform-admins"})
    # then
    assert response.json()["username"] == "pat"
    assert response.json()["is_platform_admin"] is True
