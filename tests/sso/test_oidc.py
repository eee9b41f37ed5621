"""OpenID Connect sign-in against a real provider (oidc-provider-mock), through the portal's own views.

The ID token checks are also tested at the backend: a token signed with a key the provider does not have, and an
expired one, are refused."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest
import time_machine
from cryptography.hazmat.primitives.asymmetric import rsa
from django.contrib.auth.models import User
from django.core.exceptions import SuspiciousOperation
from django.test import Client
from django.utils import timezone

from tenants.models import AuditEvent, Membership, SsoGroupMapping, SsoIdentity
from tenants.sso.oidc import OidcBackend
from tests.conftest import World
from tests.sso.conftest import CLIENT_ID
from tests.sso.provider import Provider, callback_path, free_port, running_provider


def sign_in(client: Client, provider: Provider, sub: str) -> Any:
    """Click "sign in with SSO", sign in as `sub` at the provider, come back: the callback's response."""
    start = client.get("/oidc/authenticate/")
    assert start.status_code == 302
    back = provider.authorize(start["Location"], sub)
    return client.get(callback_path(back))


def signed_in_username(client: Client) -> str | None:
    response = client.get("/api/v1/me/")
    return response.json()["username"] if response.status_code == 200 else None


@pytest.mark.django_db
def test_the_sign_in_request_carries_state_nonce_and_an_s256_pkce_challenge(sso: Provider):
    # given
    client = Client()
    # when
    response = client.get("/oidc/authenticate/")
    # then: off to the provider's endpoint from its discovery document
    assert response.status_code == 302
    url = urlsplit(response["Location"])
    assert f"{url.scheme}://{url.netloc}{url.path}" == f"{sso.issuer}/oauth2/authorize"
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert query["client_id"] == CLIENT_ID
    assert query["scope"] == "openid email profile groups"
    assert query["code_challenge_method"] == "S256"
    assert query["redirect_uri"] == "http://testserver/oidc/callback/"
    stored = client.session["oidc_states"][query["state"]]
    assert stored["nonce"] == query["nonce"]
    verifier = stored["code_verifier"]
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    assert query["code_challenge"] == challenge


def test_the_first_sign_in_creates_the_user_with_the_memberships_its_groups_map_to(world: World, sso: Provider):
    # given
    SsoGroupMapping.objects.create(group="gpu-team-a-managers", tenant=world.tenant_a, role=Membership.Role.MANAGER)
    SsoGroupMapping.objects.create(group="gpu-team-b", tenant=world.tenant_b, role=Membership.Role.MEMBER)
    sso.set_user(
        "sub-olivia",
        preferred_username="olivia",
        email="olivia@example.test",
        groups=["gpu-team-a-managers", "gpu-team-b", "unrelated"],
    )
    client = Client()
    # when
    response = sign_in(client, sso, "sub-olivia")
    # then
    assert response.status_code == 302
    assert response["Location"] == "/"
    assert signed_in_username(client) == "olivia"
    olivia = User.objects.get(username="olivia")
    assert olivia.email == "olivia@example.test"
    assert not olivia.has_usable_password()
    assert not olivia.is_staff
    assert SsoIdentity.objects.filter(user=olivia, issuer=sso.issuer, subject="sub-olivia").count() == 1
    assert sorted(olivia.memberships.values_list("tenant__slug", "role", "sso_managed")) == [
        ("team-a", "manager", True),
        ("team-b", "member", True),
    ]


def test_the_next_sign_in_follows_the_groups_and_an_admin_group_makes_a_platform_admin(world: World, sso: Provider):
    # given: signed in once as a manager of team A
    SsoGroupMapping.objects.create(group="gpu-team-a-managers", tenant=world.tenant_a, role=Membership.Role.MANAGER)
    sso.set_user("sub-pat", preferred_username="pat", email="pat@example.test", groups=["gpu-team-a-managers"])
    assert sign_in(Client(), sso, "sub-pat").status_code == 302
    # when: the provider now has pat in the admin group only
    sso.set_user("sub-pat", preferred_username="pat", email="pat@example.test", groups=["platform-admins"])
    client = Client()
    sign_in(client, sso, "sub-pat")
    # then
    pat = User.objects.get(username="pat")
    assert signed_in_username(client) == "pat"
    assert list(pat.memberships.all()) == []
    assert pat.is_staff
    assert list(AuditEvent.objects.filter(actor_name="sso").order_by("id").values_list("verb", "object_type")) == [
        ("create_sso_user", "user"),
        ("add_member", "membership"),
        ("grant_admin", "user"),
        ("remove_member", "membership"),
    ]


def test_a_provider_account_never_takes_over_a_local_account_with_the_same_name_and_email(world: World, sso: Provider):
    # given: the provider vouches for "alice" with alice's e-mail address
    sso.set_user("sub-evil", preferred_username="alice", email=world.alice.email, groups=[])
    client = Client()
    # when
    sign_in(client, sso, "sub-evil")
    # then: a new account, not alice's
    assert signed_in_username(client) == "alice.sso"
    assert not SsoIdentity.objects.filter(user=world.alice).exists()
    assert list(world.alice.memberships.values_list("tenant__slug", "role")) == [("team-a", "member")]


def test_a_provider_that_is_down_gives_a_friendly_page_not_a_500(db: Any, settings: Any):
    # given: nothing listens on the issuer's port
    settings.FATIA_OIDC_ISSUER = f"http://127.0.0.1:{free_port()}"
    settings.FATIA_OIDC_CLIENT_ID = CLIENT_ID
    settings.FATIA_OIDC_TIMEOUT_S = 2
    # when
    response = Client().get("/oidc/authenticate/")
    # then
    assert response.status_code == 503
    assert "Single sign-on is unavailable" in response.content.decode()


def test_a_callback_without_a_sign_in_in_progress_signs_nobody_in(db: Any, sso: Provider):
    # given
    client = Client()
    # when: a code and state that this browser never asked for
    response = client.get("/oidc/callback/?code=abc&state=forged")
    # then
    assert response.status_code == 302
    assert response["Location"] == "/login/"
    assert signed_in_username(client) is None


def test_a_state_that_this_session_did_not_start_is_refused_with_a_message(db: Any, sso: Provider):
    # given: a sign-in in progress, and a callback for some other state
    sso.set_user("sub-quinn", preferred_username="quinn", email="quinn@example.test")
    client = Client()
    start = client.get("/oidc/authenticate/")
    back = sso.authorize(start["Location"], "sub-quinn")
    code = parse_qs(urlsplit(back).query)["code"][0]
    # when
    response = client.get(f"/oidc/callback/?code={code}&state=not-mine", follow=True)
    # then
    assert response.status_code == 200
    assert "Single sign-on did not sign you in" in response.content.decode()
    assert signed_in_username(client) is None
    assert not User.objects.filter(username="quinn").exists()


def test_password_sign_in_refuses_a_code_in_its_query_string(world: World, sso: Provider):
    # given: ?code=&state= on the login page must not make the backends call the provider
    client = Client()
    # when
    response = client.post("/login/?code=x&state=y", {"username": "alice", "password": "correct horse battery staple"})
    # then: an ordinary password sign-in
    assert response.status_code == 302
    assert signed_in_username(client) == "alice"


# --- the ID token checks, at the backend ---------------------------------------------------------------------------


def _backend() -> OidcBackend:
    backend = OidcBackend()
    backend.use_endpoints()
    return backend


def test_the_backend_accepts_a_token_the_provider_signed(db: Any, sso: Provider):
    # given
    token = sso.id_token(client_id=CLIENT_ID, sub="sub-rita", nonce="n-1")
    # when
    claims = _backend().verify_token(token, nonce="n-1")
    # then
    assert claims["sub"] == "sub-rita"
    assert claims["iss"] == sso.issuer
    assert claims["aud"] == [CLIENT_ID]


def test_a_token_signed_with_a_key_the_provider_does_not_have_is_refused(db: Any, sso: Provider):
    # given: the provider's own token, re-signed with our key (under the provider's key id, if it names one)
    genuine = sso.id_token(client_id=CLIENT_ID, sub="sub-rita", nonce="n-2")
    header = jwt.get_unverified_header(genuine)
    claims = jwt.decode(genuine, options={"verify_signature": False})
    claims["sub"] = "sub-root"
    forged = jwt.encode(
        claims,
        rsa.generate_private_key(public_exponent=65537, key_size=2048),
        algorithm="RS256",
        headers={"kid": header["kid"]} if "kid" in header else None,
    )
    # when / then
    with pytest.raises(SuspiciousOperation, match="Signature verification failed"):
        _backend().verify_token(forged, nonce="n-2")


def test_an_expired_token_is_refused(db: Any, sso: Provider):
    # given: a real token, read two hours later (the provider's tokens live one hour)
    token = sso.id_token(client_id=CLIENT_ID, sub="sub-rita", nonce="n-3")
    backend = _backend()
    # when / then
    with time_machine.travel(timezone.now() + timedelta(hours=2)), pytest.raises(SuspiciousOperation, match="expired"):
        backend.verify_token(token, nonce="n-3")


def test_a_token_issued_to_another_client_is_refused(db: Any, sso: Provider):
    # given
    token = sso.id_token(client_id="some-other-app", sub="sub-rita", nonce="n-4")
    # when / then
    with pytest.raises(SuspiciousOperation, match="Audience doesn't match"):
        _backend().verify_token(token, nonce="n-4")


def test_a_token_for_another_sign_in_is_refused(db: Any, sso: Provider):
    # given
    token = sso.id_token(client_id=CLIENT_ID, sub="sub-rita", nonce="n-5")
    # when / then
    with pytest.raises(SuspiciousOperation, match="nonce"):
        _backend().verify_token(token, nonce="another")


def test_an_unsigned_token_is_refused(db: Any, sso: Provider):
    # given
    genuine = sso.id_token(client_id=CLIENT_ID, sub="sub-rita", nonce="n-6")
    claims = jwt.decode(genuine, options={"verify_signature": False})
    unsigned = (
        base64.urlsafe_b64encode(json.dumps({"alg": "none", "typ": "JWT"}).encode()).rstrip(b"=").decode()
        + "."
        + base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
        + "."
    )
    # when / then
    with pytest.raises(SuspiciousOperation, match="algorithm 'none'"):
        _backend().verify_token(unsigned, nonce="n-6")


def test_the_discovery_document_is_fetched_once_and_cached(db: Any, settings: Any):
    # given: a provider of its own, asked once
    with running_provider() as provider:
        settings.FATIA_OIDC_ISSUER = provider.issuer
        settings.FATIA_OIDC_CLIENT_ID = CLIENT_ID
        first = Client().get("/oidc/authenticate/")
    # when: the provider is gone
    second = Client().get("/oidc/authenticate/")
    # then: the endpoints still come from the cache
    assert first.status_code == 302
    assert second.status_code == 302
    assert second["Location"].startswith(f"{provider.issuer}/oauth2/authorize?")


def test_a_provider_that_goes_down_during_the_sign_in_gives_a_friendly_page(db: Any, settings: Any):
    # given: a sign-in under way at a provider that then stops
    with running_provider() as provider:
        settings.FATIA_OIDC_ISSUER = provider.issuer
        settings.FATIA_OIDC_CLIENT_ID = CLIENT_ID
        provider.set_user("sub-xena", preferred_username="xena", email="xena@example.test")
        client = Client()
        back = provider.authorize(client.get("/oidc/authenticate/")["Location"], "sub-xena")
    # when: the browser comes back; the code cannot be exchanged
    response = client.get(callback_path(back))
    # then
    assert response.status_code == 503
    assert "Single sign-on is unavailable" in response.content.decode()
    assert not User.objects.filter(username="xena").exists()


def test_a_code_the_provider_refuses_signs_nobody_in_with_a_message(db: Any, sso: Provider):
    # given: a sign-in under way, and a made-up code for its state
    client = Client()
    start = client.get("/oidc/authenticate/")
    state = parse_qs(urlsplit(start["Location"]).query)["state"][0]
    # when
    response = client.get(f"/oidc/callback/?code=made-up&state={state}", follow=True)
    # then
    assert response.redirect_chain == [("/login/", 302)]
    assert "Single sign-on did not sign you in" in response.content.decode()
    assert signed_in_username(client) is None
