"""Issue 9: inputs that used to crash with a 500 are a 400 (JSON on the API, a friendly page in the browser), and
every API error is JSON, with the same body shape."""

from __future__ import annotations

import json

import pytest
from django.db import OperationalError
from django.test import Client, RequestFactory

from allocations import services
from allocations.models import Allocation
from tenants.api.exception_handler import handle_api_exception
from tenants.error_views import page_not_found, server_error
from tenants.models import AuditEvent
from tests.conftest import World

pytestmark = pytest.mark.django_db


def page_client(user) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def assert_json_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["code"] == code
    assert isinstance(body["detail"], str) and body["detail"]
    return body


def make_request(world: World) -> Allocation:
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="1g.10gb",
        count=1,
        lease_hours=1,
        purpose="one",
        actor=world.alice,
    )
    return allocation


# --- ordering ---------------------------------------------------------------------------------------------


def test_ordering_quotas_by_an_output_only_field_is_a_400_naming_the_allowed_fields(world: World):
    # given: tenant_name is in the quota's JSON but is no column (a FieldError, a 500, before)
    response = world.client(world.alice).get("/api/v1/quotas/", {"ordering": "tenant_name"})
    # then
    body = assert_json_error(response, 400, "invalid")
    assert body["errors"] == {"ordering": ["Order by one of: tenant, pool, updated_at; prefix '-' to reverse."]}


def test_ordering_by_an_allowed_field_works_and_an_unknown_one_is_refused(world: World):
    first, second = make_request(world), make_request(world)
    client = world.client(world.alice)
    oldest_first = client.get("/api/v1/allocations/", {"ordering": "created_at"})
    assert [row["id"] for row in oldest_first.json()["results"]] == [first.pk, second.pk]
    assert_json_error(client.get("/api/v1/allocations/", {"ordering": "-purpose"}), 400, "invalid")


# --- pagination -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["/api/v1/allocations/", "/api/v1/quotas/", "/api/v1/audit-events/"])
@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"page": "99999999999999999999"}, "page"),
        ({"page": "0"}, "page"),
        ({"page": "-1"}, "page"),
        ({"page": "last"}, "page"),
        ({"page": "٣"}, "page"),  # an Arabic-Indic three: int() takes it, the schema does not
        ({"page_size": "false"}, "page_size"),
        ({"page_size": "0"}, "page_size"),
        ({"page_size": "501"}, "page_size"),
    ],
)
def test_a_malformed_page_or_page_size_is_a_400(world: World, url, params, field):
    response = world.client(world.mallory).get(url, params)
    body = assert_json_error(response, 400, "invalid")
    assert list(body["errors"]) == [field]


@pytest.mark.parametrize("url", ["/api/v1/allocations/", "/api/v1/quotas/"])
def test_a_page_past_the_last_is_a_404_in_json(world: World, url):
    make_request(world)
    assert_json_error(world.client(world.alice).get(url, {"page": "2"}), 404, "not_found")


# --- date filters -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["/api/v1/allocations/", "/api/v1/audit-events/"])
def test_a_date_with_an_offset_postgresql_refuses_is_turned_into_utc(world: World, url):
    # given: +16:00 is a valid ISO 8601 offset that PostgreSQL refuses (beyond +-15:59)
    make_request(world)
    client = world.client(world.mallory)
    # when
    response = client.get(url, {"created_after": "2000-01-01T00:00:00+16:00"})
    # then: everything of tenant A is newer than that
    expected = AuditEvent.objects.for_user(world.mallory).count() if "audit" in url else 1
    assert (response.status_code, response.json()["count"]) == (200, expected)


@pytest.mark.parametrize("value", ["0001-01-01T00:00:00+15:00", "9999-12-31T23:59:59-15:00", "2026-13-01T00:00"])
def test_a_date_off_the_calendar_is_a_400(world: World, value):
    response = world.client(world.mallory).get("/api/v1/allocations/", {"created_before": value})
    body = assert_json_error(response, 400, "invalid")
    assert list(body["errors"]) == ["created_before"]


@pytest.mark.parametrize("url", ["/api/v1/allocations/", "/api/v1/audit-events/"])
def test_an_empty_date_is_a_400_not_an_ignored_filter(world: World, url):
    # found by the schema fuzzer: `?created_after=` was answered 200 with every row, as if not given
    response = world.client(world.mallory).get(url, {"created_after": "", "created_before": "2030-01-01T00:00:00Z"})
    body = assert_json_error(response, 400, "invalid")
    assert list(body["errors"]) == ["created_after"]
    assert "ISO 8601" in body["errors"]["created_after"][0]


# --- NUL bytes --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["/dashboard/?q=a%00b", "/dashboard/pools/{pool}/nodes/?q=%00", "/?status=%00"])
def test_a_nul_byte_in_a_page_query_is_a_friendly_400_page(world: World, url):
    response = page_client(world.alice).get(url.format(pool=world.pool.pk))
    assert response.status_code == 400
    assert b"The portal could not read this request" in response.content


def test_a_nul_byte_in_a_form_field_is_a_400_and_nothing_is_written(world: World):
    # given: the new-request form's hidden idempotency key, tampered with
    form = {
        "tenant": world.tenant_a.pk,
        "pool": world.pool.pk,
        "profile": "1g.10gb",
        "count": 1,
        "lease_hours": 1,
        "purpose": "nul",
        "idempotency_key": "abc\x00def",
    }
    # when
    response = page_client(world.alice).post("/requests/new/", form)
    # then
    assert response.status_code == 400
    assert Allocation.objects.count() == 0


def test_a_nul_byte_in_an_api_query_is_a_json_400(world: World):
    response = world.client(world.alice).get("/api/v1/allocations/?profile=%00")
    assert_json_error(response, 400, "bad_request")


@pytest.mark.parametrize("key", ["a\x00b", "é" * 3, "x" * 129])
def test_an_idempotency_key_that_is_not_printable_ascii_is_a_400(world: World, key):
    body = {"pool": world.pool.pk, "profile": "1g.10gb", "count": 1, "lease_hours": 1, "purpose": "k"}
    response = world.client(world.alice).post("/api/v1/allocations/", body, format="json", HTTP_IDEMPOTENCY_KEY=key)
    assert_json_error(response, 400, "invalid")
    assert Allocation.objects.count() == 0


# --- JSON bodies ------------------------------------------------------------------------------------------


def test_deeply_nested_json_under_the_size_limit_is_a_400(world: World):
    events = AuditEvent.objects.count()
    response = world.client(world.alice).post(
        "/api/v1/allocations/", data="[" * 30_000, content_type="application/json"
    )
    body = assert_json_error(response, 400, "parse_error")
    assert body["detail"] == "JSON parse error - the document is nested too deeply."
    assert (Allocation.objects.count(), AuditEvent.objects.count()) == (0, events)


# --- every API error is JSON ------------------------------------------------------------------------------


def test_an_unknown_api_url_is_a_json_404(world: World):
    response = world.client(world.alice).get("/api/v1/no-such-thing/")
    assert_json_error(response, 404, "not_found")


def test_an_unknown_page_is_a_friendly_html_404(world: World):
    response = page_client(world.alice).get("/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
    assert b"There is nothing here" in response.content


def test_the_server_error_handler_answers_json_under_the_api_and_html_elsewhere():
    factory = RequestFactory()
    api = server_error(factory.get("/api/v1/allocations/"))
    page = server_error(factory.get("/requests/1/"))
    assert (api.status_code, api["Content-Type"]) == (500, "application/json")
    assert json.loads(api.content)["code"] == "server_error"
    assert (page.status_code, page["Content-Type"].split(";")[0]) == (500, "text/html")
    assert b"Something went wrong" in page.content
    assert json.loads(page_not_found(factory.get("/api/v1/x/")).content) == {
        "code": "not_found",
        "detail": "Not found.",
    }


def test_a_transient_database_error_is_a_503_with_retry_after():
    response = handle_api_exception(OperationalError("deadlock detected"), {})
    assert response is not None
    assert (response.status_code, response["Retry-After"], response.data["code"]) == (503, "1", "unavailable")


def test_an_anonymous_api_call_gets_a_json_401(world: World):
    response = world.client(None).get("/api/v1/allocations/")
    body = assert_json_error(response, 401, "not_authenticated")
    assert body["detail"] == "Authentication credentials were not provided."
