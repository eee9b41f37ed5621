"""FATIA_LOCAL_LOGIN=False: the sign-in page offers only single sign-on, passwords are refused everywhere, API tokens
keep working."""

from __future__ import annotations

from typing import Any

from django.test import Client

from tenants import services
from tenants.models import ApiToken
from tests.conftest import World
from tests.sso.provider import Provider

PASSWORD = "correct horse battery staple"


def test_with_local_login_off_the_sign_in_page_shows_only_the_sso_button(world: World, sso: Provider, settings: Any):
    # given
    settings.FATIA_LOCAL_LOGIN = False
    # when
    page = Client().get("/login/").content.decode()
    # then
    assert 'href="/oidc/authenticate/"' in page
    assert "Sign in with single sign-on" in page
    assert 'name="password"' not in page


def test_with_local_login_on_the_page_offers_both(world: World, sso: Provider):
    # when
    page = Client().get("/login/").content.decode()
    # then
    assert 'href="/oidc/authenticate/"' in page
    assert 'name="password"' in page


def test_with_local_login_off_a_correct_password_is_refused_with_a_message(world: World, sso: Provider, settings: Any):
    # given
    settings.FATIA_LOCAL_LOGIN = False
    client = Client()
    # when
    response = client.post("/login/", {"username": "alice", "password": PASSWORD})
    # then
    assert response.status_code == 400
    assert "Password sign-in is turned off here: use single sign-on." in response.content.decode()
    assert client.get("/api/v1/me/").status_code == 401


def test_with_local_login_off_the_admin_site_refuses_passwords_too(world: World, sso: Provider, settings: Any):
    # given
    settings.FATIA_LOCAL_LOGIN = False
    client = Client()
    # when
    client.post("/admin/login/", {"username": "root", "password": PASSWORD})
    # then
    assert client.get("/api/v1/me/").status_code == 401


def test_with_local_login_off_api_tokens_keep_working(world: World, sso: Provider, settings: Any):
    # given
    settings.FATIA_LOCAL_LOGIN = False
    _, secret = services.create_api_token(
        user=world.alice, name="ci", scope=ApiToken.Scope.READ, expires_at=None, actor=world.alice
    )
    # when
    response = Client().get("/api/v1/me/", headers={"Authorization": f"Bearer {secret}"})
    # then
    assert response.status_code == 200
    assert response.json()["username"] == "alice"


def test_without_an_issuer_there_is_no_sso_button(world: World):
    # when
    page = Client().get("/login/").content.decode()
    response = Client().get("/oidc/authenticate/")
    # then
    assert "/oidc/authenticate/" not in page
    assert response.status_code == 404


def test_the_deploy_check_warns_about_a_plain_http_issuer(settings: Any):
    from tenants.checks import oidc_issuer_https_check

    # given
    settings.FATIA_OIDC_ISSUER = "http://sso.example.test/realms/company"
    # when
    warnings = oidc_issuer_https_check(None)
    settings.FATIA_OIDC_ISSUER = "https://sso.example.test/realms/company"
    # then
    assert [w.id for w in warnings] == ["fatia.W002"]
    assert oidc_issuer_https_check(None) == []
