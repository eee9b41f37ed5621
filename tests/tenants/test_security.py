"""Issue 9, security: tokens cannot mint wider or longer-lived tokens, throttles answer 429 with Retry-After,
sign-in locks out after repeated failures (audited), tenant filters do not tell unknown ids from hidden ones,
and every page carries a Content-Security-Policy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.test import Client
from rest_framework.test import APIClient

from allocations import services
from tenants.models import ApiToken, AuditEvent, Tenant
from tenants.services import create_api_token
from tests.browser.conftest import PASSWORD
from tests.conftest import World

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 11, 30, 12, 0, 10, tzinfo=UTC)


def token_client(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


# --- tokens minting tokens ------------------------------------------------------------------------------


def test_an_expiring_token_cannot_mint_a_token_that_outlives_it(world: World):
    # given: a write token that expires in a day (made at NOW too: its expiry must be in the future then)
    with time_machine.travel(NOW, tick=False):
        parent, raw = create_api_token(
            user=world.alice, name="ci", scope="write", expires_at=NOW + timedelta(days=1), actor=world.alice
        )
    client = token_client(raw)
    with time_machine.travel(NOW, tick=False):
        # when: it asks for one that never expires, then for one that lives longer than itself
        implicit = client.post("/api/v1/tokens/", {"name": "child", "scope": "write"}, format="json")
        longer = client.post(
            "/api/v1/tokens/",
            {"name": "child2", "scope": "write", "expires_at": (NOW + timedelta(days=2)).isoformat()},
            format="json",
        )
    # then: the first expires with its parent; the second is refused and nothing is made
    assert implicit.status_code == 201
    assert implicit.json()["expires_at"] == "2026-12-01T12:00:10Z"
    assert longer.status_code == 400
    assert longer.json()["errors"] == {
        "expires_at": [
            "A token cannot create one that outlives it: choose an expiry no later than 2026-12-01 12:00 UTC."
        ]
    }
    assert sorted(ApiToken.objects.filter(user=world.alice).values_list("name", flat=True)) == ["child", "ci"]
    audit = AuditEvent.objects.get(verb="create_token", after__name="child")
    assert audit.after["made_with_token"] == parent.prefix


def test_a_read_token_cannot_mint_anything_and_a_session_may_mint_a_lasting_token(world: World):
    _, raw = create_api_token(user=world.alice, name="ro", scope="read", expires_at=None, actor=world.alice)
    refused = token_client(raw).post("/api/v1/tokens/", {"name": "w", "scope": "write"}, format="json")
    assert refused.status_code == 403
    session = world.client(world.alice).post("/api/v1/tokens/", {"name": "forever", "scope": "write"}, format="json")
    assert (session.status_code, session.json()["expires_at"]) == (201, None)


def test_the_service_refuses_a_write_token_from_a_read_token(world: World):
    from tenants.errors import InvalidInput

    parent, _ = create_api_token(user=world.alice, name="ro", scope="read", expires_at=None, actor=world.alice)
    with pytest.raises(InvalidInput) as excinfo:
        create_api_token(
            user=world.alice, name="w", scope="write", expires_at=None, actor=world.alice, via_token=parent
        )
    assert excinfo.value.errors == {"scope": ["A read-only token cannot create a token that writes."]}


# --- API throttles --------------------------------------------------------------------------------------


def test_a_token_and_then_its_user_are_throttled_with_retry_after(world: World, settings):
    # given: 3 calls a minute per token, 5 per user
    settings.FATIA_THROTTLE_RATES = {"user": "5/min", "token": "3/min", "anon": "100/min"}
    _, first = create_api_token(user=world.alice, name="a", scope="read", expires_at=None, actor=world.alice)
    _, second = create_api_token(user=world.alice, name="b", scope="read", expires_at=None, actor=world.alice)
    with time_machine.travel(NOW, tick=False):
        # when
        a = [token_client(first).get("/api/v1/me/").status_code for _ in range(4)]
        b = [token_client(second).get("/api/v1/me/").status_code for _ in range(2)]
        refused = token_client(second).get("/api/v1/me/")
    # then: the 4th call of token a is refused by its token's limit; every call counts against the user, refused
    # ones too, so token b has one call of the user's five left
    assert a == [200, 200, 200, 429]
    assert b == [200, 429]
    assert refused.status_code == 429
    assert refused["Retry-After"] == "50"  # the minute's window ends 50 s after 12:00:10
    assert refused.json() == {
        "code": "throttled",
        "detail": "Request was throttled. Expected available in 50 seconds.",
        "retry_after": 50,
    }


def test_anonymous_calls_are_throttled_per_address(world: World, settings):
    settings.FATIA_THROTTLE_RATES = {"user": "100/min", "token": "100/min", "anon": "2/min"}
    client = APIClient()
    with time_machine.travel(NOW, tick=False):
        codes = [client.get("/api/v1/me/").status_code for _ in range(3)]
        other = APIClient(REMOTE_ADDR="10.9.8.7").get("/api/v1/me/").status_code
    assert (codes, other) == ([401, 401, 429], 401)


# --- sign-in lockout ------------------------------------------------------------------------------------


def sign_in(username: str, password: str, address: str = "127.0.0.1") -> tuple[int, str]:
    response = Client(REMOTE_ADDR=address).post("/login/", {"username": username, "password": password})
    return response.status_code, response.content.decode()


def test_an_account_is_locked_after_repeated_failures_even_for_the_right_password(world: World, settings):
    # given
    settings.FATIA_LOGIN_FAILURES_PER_ACCOUNT = 3
    settings.FATIA_LOGIN_LOCKOUT_S = 600
    with time_machine.travel(NOW, tick=False):
        # when: three wrong passwords (from three addresses), then the right one
        failures = [sign_in("alice", "wrong", address=f"10.0.0.{n}")[0] for n in range(3)]
        status, page = sign_in("alice", PASSWORD, address="10.0.0.9")
        response = Client(REMOTE_ADDR="10.0.0.9").post("/login/", {"username": "alice", "password": PASSWORD})
    # then
    assert failures == [400, 400, 400]
    assert status == 429
    assert "Too many failed sign-ins for this account. Try again in 10 minutes." in page
    assert response["Retry-After"] == "600"
    lockouts = AuditEvent.objects.filter(verb="lock_out_login")
    assert [(e.object_id, e.after["kind"], e.tenant_id) for e in lockouts] == [("account:alice", "account", None)]
    # and after the lockout the right password works again
    with time_machine.travel(NOW + timedelta(seconds=601), tick=False):
        assert sign_in("alice", PASSWORD)[0] == 302


def test_an_address_is_locked_after_failures_across_accounts_and_the_admin_login_too(world: World, settings):
    settings.FATIA_LOGIN_FAILURES_PER_ADDRESS = 4
    settings.FATIA_LOGIN_FAILURES_PER_ACCOUNT = 100
    with time_machine.travel(NOW, tick=False):
        for name in ("a", "b", "c", "d"):
            assert sign_in(name, "guess", address="192.0.2.1")[0] == 400
        status, page = sign_in("root", PASSWORD, address="192.0.2.1")
        admin = Client(REMOTE_ADDR="192.0.2.1").post(
            "/admin/login/?next=/admin/", {"username": "root", "password": PASSWORD}
        )
        elsewhere = sign_in("root", PASSWORD, address="192.0.2.2")[0]
    assert status == 429
    assert "Too many failed sign-ins for your network address." in page
    assert admin.status_code == 200  # the admin's form again, not a redirect into the admin
    assert elsewhere == 302
    assert AuditEvent.objects.filter(verb="lock_out_login", object_id="address:192.0.2.1").count() == 1


def test_a_successful_sign_in_forgets_the_accounts_failures(world: World, settings):
    settings.FATIA_LOGIN_FAILURES_PER_ACCOUNT = 3
    with time_machine.travel(NOW, tick=False):
        sign_in("alice", "wrong")
        sign_in("alice", "wrong")
        assert sign_in("alice", PASSWORD)[0] == 302
        sign_in("alice", "wrong")
        sign_in("alice", "wrong")
        assert sign_in("alice", PASSWORD)[0] == 302
    assert not AuditEvent.objects.filter(verb="lock_out_login").exists()


# --- tenant filters -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/allocations/",
        "/api/v1/quotas/",
        "/api/v1/quota-changes/",
        "/api/v1/memberships/",
        "/api/v1/audit-events/",
    ],
)
@pytest.mark.parametrize("who", ["alice", "mallory"])
def test_a_hidden_tenant_and_a_missing_one_get_the_same_answer(world: World, url, who):
    # given: tenant B has things to hide
    services.request_allocation(
        tenant_id=world.tenant_b.pk,
        pool_id=world.pool.pk,
        profile="1g.10gb",
        count=1,
        lease_hours=1,
        purpose="b",
        actor=world.charlie,
    )
    missing = Tenant.objects.order_by("-pk").values_list("pk", flat=True)[0] + 1000
    client = world.client(getattr(world, who))
    # when
    hidden = client.get(url, {"tenant": world.tenant_b.pk})
    absent = client.get(url, {"tenant": missing})
    # then
    assert (hidden.status_code, hidden.json()) == (absent.status_code, absent.json())
    assert hidden.status_code == 200
    assert hidden.json()["count"] == 0


# --- headers --------------------------------------------------------------------------------------------


def test_pages_carry_a_content_security_policy_without_inline_scripts(world: World):
    client = Client()
    client.force_login(world.alice)
    policy = client.get("/")["Content-Security-Policy"]
    assert "script-src 'self'" in policy
    assert "frame-ancestors 'none'" in policy
    assert "'unsafe-inline'" not in policy.split("script-src", 1)[1].split(";", 1)[0]
