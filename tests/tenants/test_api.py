"""Every non-allocation endpoint with the three users plus the platform admin."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from allocations import services
from allocations.models import NodePool, Quota, QuotaChangeRequest
from tenants.models import ApiToken, AuditEvent, Membership, Tenant
from tenants.services import create_api_token
from tests.conftest import World


def test_tenants_list_shows_only_my_tenants(world: World):
    assert [t["slug"] for t in world.client(world.alice).get("/api/v1/tenants/").json()["results"]] == ["team-a"]
    assert [t["slug"] for t in world.client(world.charlie).get("/api/v1/tenants/").json()["results"]] == ["team-b"]
    assert [t["slug"] for t in world.client(world.root).get("/api/v1/tenants/").json()["results"]] == [
        "team-a",
        "team-b",
    ]


def test_charlie_gets_404_for_another_tenant(world: World):
    assert world.client(world.charlie).get(f"/api/v1/tenants/{world.tenant_a.pk}/").status_code == 404


def test_only_admins_create_and_edit_tenants(world: World):
    # given
    payload = {"name": "Team C", "slug": "team-c"}
    # when
    denied = world.client(world.mallory).post("/api/v1/tenants/", payload, format="json")
    created = world.client(world.root).post("/api/v1/tenants/", payload, format="json")
    bad = world.client(world.root).post("/api/v1/tenants/", {"name": "X", "slug": "Not A Slug"}, format="json")
    edited = world.client(world.root).patch(
        f"/api/v1/tenants/{world.tenant_a.pk}/",
        {"max_lease_hours": 48, "auto_approve_max_lease_hours": 12},
        format="json",
    )
    denied_edit = world.client(world.mallory).patch(
        f"/api/v1/tenants/{world.tenant_a.pk}/", {"max_lease_hours": 1000}, format="json"
    )
    # then
    assert denied.status_code == 403
    assert created.status_code == 201
    assert bad.status_code == 400
    assert list(bad.json()["errors"]) == ["slug"]
    assert edited.status_code == 200
    assert denied_edit.status_code == 403
    assert list(Tenant.objects.order_by("slug").values_list("slug", "max_lease_hours")) == [
        ("team-a", 48),
        ("team-b", 168),
        ("team-c", 168),
    ]


def test_no_tenant_slug_makes_its_namespace_the_portals_own(world: World, settings):
    # given: the portal runs as fatia-system:fatia-portal (the default), its node agents in fatia-agents
    settings.FATIA_KUBE_PORTAL_SERVICE_ACCOUNT = "fatia-system:fatia-portal"
    settings.FATIA_AGENT_SERVICE_ACCOUNT = "fatia-agents:fatia-agent"
    # when: root creates tenants whose portal-made namespaces (fatia-<slug>) would be those
    # then: 400 on the slug: its members could run pods there as the portal's or the agent's service account
    for slug in ("system", "agents"):
        response = world.client(world.root).post("/api/v1/tenants/", {"name": "S", "slug": slug}, format="json")
        assert response.status_code == 400, response.content
        assert "where the portal's credentials are" in response.json()["errors"]["slug"][0]
    assert not Tenant.objects.filter(slug__in=["system", "agents"]).exists()


def test_a_policy_that_contradicts_itself_is_a_field_error(world: World):
    response = world.client(world.root).patch(
        f"/api/v1/tenants/{world.tenant_a.pk}/", {"max_lease_hours": 10}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["errors"] == {"detail": ["The auto-approve lease bound cannot exceed the maximum lease."]}
    world.tenant_a.refresh_from_db()
    assert world.tenant_a.max_lease_hours == 168


def test_memberships_are_managed_by_admins_only(world: World):
    # given
    payload = {"tenant": world.tenant_b.pk, "username": "alice", "role": "member"}
    # when
    denied = world.client(world.mallory).post("/api/v1/memberships/", payload, format="json")
    added = world.client(world.root).post("/api/v1/memberships/", payload, format="json")
    duplicate = world.client(world.root).post("/api/v1/memberships/", payload, format="json")
    unknown = world.client(world.root).post("/api/v1/memberships/", {**payload, "username": "nobody"}, format="json")
    # then: mallory manages team A, not team B, so team B is unknown to her
    assert denied.status_code == 400
    assert denied.json()["errors"] == {"tenant": [f"Unknown tenant {world.tenant_b.pk}."]}
    assert added.status_code == 201
    assert duplicate.status_code == 400
    assert duplicate.json()["errors"] == {"username": ["This user is already a member of this tenant."]}
    assert unknown.json()["errors"] == {"username": ["No user named 'nobody'."]}
    assert Membership.objects.filter(user=world.alice).count() == 2


def test_members_see_their_tenants_members_only(world: World):
    usernames = [m["username"] for m in world.client(world.alice).get("/api/v1/memberships/").json()["results"]]
    assert usernames == ["alice", "mallory"]
    membership = Membership.objects.get(user=world.alice)
    assert world.client(world.charlie).get(f"/api/v1/memberships/{membership.pk}/").status_code == 404
    assert world.client(world.mallory).delete(f"/api/v1/memberships/{membership.pk}/").status_code == 403
    assert Membership.objects.filter(pk=membership.pk).exists()


def test_pools_are_readable_by_everyone_and_created_by_admins(world: World):
    listed = world.client(world.charlie).get("/api/v1/pools/").json()["results"]
    assert [p["slug"] for p in listed] == ["h100"]
    assert [p["name"] for p in listed[0]["profile_catalog"]][:3] == ["1g.10gb", "1g.10gb+me", "1g.20gb"]
    payload = {"name": "H200", "slug": "h200", "gpu_model": "NVIDIA H200", "profiles": ["1g.18gb", "7g.141gb"]}
    assert world.client(world.mallory).post("/api/v1/pools/", payload, format="json").status_code == 403
    wrong = world.client(world.root).post("/api/v1/pools/", {**payload, "profiles": ["1g.10gb"]}, format="json")
    assert wrong.status_code == 400
    assert wrong.json()["errors"]["profiles"][0].startswith("Not a MIG profile of NVIDIA H200: 1g.10gb.")
    created = world.client(world.root).post("/api/v1/pools/", payload, format="json")
    assert created.status_code == 201
    assert created.json()["profiles"] == ["1g.18gb", "7g.141gb"]
    assert NodePool.objects.count() == 2


def test_quota_balances_are_per_tenant_with_gpu_equivalents(world: World):
    services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="1g.20gb",
        count=2,
        lease_hours=1,
        purpose="x",
        actor=world.alice,
    )
    rows = world.client(world.alice).get("/api/v1/quotas/").json()["results"]
    assert len(rows) == 1
    row = rows[0]
    assert (row["tenant_name"], row["compute_slices_used"], row["memory_slices_used"]) == ("Team A", 2, 4)
    assert (row["compute_slices_free"], row["memory_slices_free"]) == (12, 12)
    assert (row["gpu_equivalents_limit"], row["gpu_equivalents_used"], row["gpu_equivalents_free"]) == (2.0, 0.5, 1.714)
    quota_b = Quota.objects.get(tenant=world.tenant_b)
    assert world.client(world.alice).get(f"/api/v1/quotas/{quota_b.pk}/").status_code == 404


def test_only_admins_set_quotas(world: World):
    payload = {
        "tenant": world.tenant_a.pk,
        "pool": world.pool.pk,
        "compute_slices_limit": 70,
        "memory_slices_limit": 80,
        "profile_caps": {"7g.80gb": 2},
    }
    assert world.client(world.mallory).post("/api/v1/quotas/", payload, format="json").status_code == 403
    response = world.client(world.root).post("/api/v1/quotas/", payload, format="json")
    assert response.status_code == 200
    assert response.json()["profile_caps"] == {"7g.80gb": 2}
    bad = world.client(world.root).post("/api/v1/quotas/", {**payload, "profile_caps": {"1g.18gb": 1}}, format="json")
    assert bad.status_code == 400
    assert bad.json()["errors"] == {"profile_caps": ["'1g.18gb' is not offered in H100 pool."]}
    quota = Quota.objects.get(tenant=world.tenant_a, pool=world.pool)
    assert (quota.compute_slices_limit, quota.profile_caps) == (70, {"7g.80gb": 2})


def test_a_quota_names_its_pool_by_id_or_slug(world: World):
    payload = {"tenant": world.tenant_a.pk, "compute_slices_limit": 21, "memory_slices_limit": 24}
    root = world.client(world.root)
    # by slug, and by id as a number or as text
    for pool, compute in (("h100", 21), (str(world.pool.pk), 22), (world.pool.pk, 23)):
        response = root.post(
            "/api/v1/quotas/", {**payload, "pool": pool, "compute_slices_limit": compute}, format="json"
        )
        assert (response.status_code, response.json()["compute_slices_limit"]) == (200, compute), response.content
    # neither: a 400 on the field that names both forms, and nothing changes
    before = list(Quota.objects.order_by("pk").values_list("pk", "compute_slices_limit"))
    unknown = root.post("/api/v1/quotas/", {**payload, "pool": "no-such-pool"}, format="json")
    assert (unknown.status_code, unknown.json()["errors"]) == (
        400,
        {"pool": ["No pool with the id or slug 'no-such-pool': give a pool's id or its slug."]},
    )
    for bad in (True, "", 0, -1, None, ["h100"], "x" * 51):
        response = root.post("/api/v1/quotas/", {**payload, "pool": bad}, format="json")
        assert response.status_code == 400 and list(response.json()["errors"]) == ["pool"], (bad, response.content)
    assert root.post("/api/v1/quotas/", {**payload, "pool": 2**70}, format="json").status_code == 400
    assert root.post("/api/v1/quotas/", {**payload, "pool": "\u00b2"}, format="json").status_code == 400
    for text in ("h1\x0000", "\ud800"):  # what PostgreSQL cannot take is refused before it is asked
        response = root.post("/api/v1/quotas/", json.dumps({**payload, "pool": text}), content_type="application/json")
        assert response.status_code == 400 and list(response.json()["errors"]) == ["pool"], response.content
    assert list(Quota.objects.order_by("pk").values_list("pk", "compute_slices_limit")) == before


def test_a_quota_names_its_tenant_by_id_or_slug(world: World):
    payload = {"pool": "h100", "compute_slices_limit": 21, "memory_slices_limit": 24}
    root = world.client(world.root)
    # by slug, and by id as a number or as text
    for tenant, compute in (("team-a", 21), (str(world.tenant_a.pk), 22), (world.tenant_a.pk, 23)):
        response = root.post(
            "/api/v1/quotas/", {**payload, "tenant": tenant, "compute_slices_limit": compute}, format="json"
        )
        assert (response.status_code, response.json()["compute_slices_limit"]) == (200, compute), response.content
        assert response.json()["tenant"] == world.tenant_a.pk
    # neither: a 400 on the field that names both forms, and nothing changes
    before = list(Quota.objects.order_by("pk").values_list("pk", "compute_slices_limit"))
    unknown = root.post("/api/v1/quotas/", {**payload, "tenant": "no-such-team"}, format="json")
    assert (unknown.status_code, unknown.json()["errors"]) == (
        400,
        {"tenant": ["No tenant with the id or slug 'no-such-team': give a tenant's id or its slug."]},
    )
    for bad in (True, "", 0, -1, None, ["team-a"], "x" * 51, 2**70, "\u00b2"):
        response = root.post("/api/v1/quotas/", {**payload, "tenant": bad}, format="json")
        assert response.status_code == 400 and list(response.json()["errors"]) == ["tenant"], (bad, response.content)
    for text in ("team\x00a", "\ud800"):
        body = json.dumps({**payload, "tenant": text})
        response = root.post("/api/v1/quotas/", body, content_type="application/json")
        assert response.status_code == 400 and list(response.json()["errors"]) == ["tenant"], response.content
    assert list(Quota.objects.order_by("pk").values_list("pk", "compute_slices_limit")) == before


def test_quota_change_flow_over_the_api(world: World):
    payload = {
        "tenant": world.tenant_a.pk,
        "pool": world.pool.pk,
        "compute_slices_limit": 28,
        "memory_slices_limit": 32,
        "justification": "new team members",
    }
    assert world.client(world.alice).post("/api/v1/quota-changes/", payload, format="json").status_code == 403
    assert world.client(world.charlie).post("/api/v1/quota-changes/", payload, format="json").status_code == 400
    created = world.client(world.mallory).post("/api/v1/quota-changes/", payload, format="json")
    assert created.status_code == 201
    change_id = created.json()["id"]
    assert world.client(world.charlie).get(f"/api/v1/quota-changes/{change_id}/").status_code == 404
    assert world.client(world.mallory).post(f"/api/v1/quota-changes/{change_id}/approve/").status_code == 403
    approved = world.client(world.root).post(f"/api/v1/quota-changes/{change_id}/approve/", {"reason": "ok"})
    assert approved.json()["status"] == "approved"
    assert (
        world.client(world.root).post(f"/api/v1/quota-changes/{change_id}/reject/", {"reason": "no"}).status_code == 409
    )
    quota = Quota.objects.get(tenant=world.tenant_a, pool=world.pool)
    assert (quota.compute_slices_limit, quota.memory_slices_limit) == (28, 32)
    assert QuotaChangeRequest.objects.get().decided_by == world.root


def test_audit_log_is_read_only_and_scoped(world: World):
    client_root = world.client(world.root)
    total = AuditEvent.objects.count()
    assert client_root.get("/api/v1/audit-events/", {"page_size": 500}).json()["count"] == total
    assert world.client(world.alice).get("/api/v1/audit-events/").json()["count"] == 0
    mallory_sees = world.client(world.mallory).get("/api/v1/audit-events/").json()["results"]
    assert {e["tenant"] for e in mallory_sees} == {world.tenant_a.pk}
    event = AuditEvent.objects.first()
    assert event is not None
    for method in ("put", "patch", "delete"):
        assert getattr(client_root, method)(f"/api/v1/audit-events/{event.pk}/", {}, format="json").status_code == 405
    assert client_root.post("/api/v1/audit-events/", {}, format="json").status_code == 405
    assert AuditEvent.objects.count() == total
    filtered = client_root.get("/api/v1/audit-events/", {"verb": "set_quota", "tenant": world.tenant_b.pk}).json()
    assert [(e["verb"], e["actor_name"]) for e in filtered["results"]] == [("set_quota", "root")]


def test_tokens_are_shown_once_stored_hashed_scoped_and_revocable(world: World):
    # given
    client = world.client(world.alice)
    # when
    created = client.post("/api/v1/tokens/", {"name": "ci", "scope": "read"}, format="json").json()
    raw = created["token"]
    token = ApiToken.objects.get(pk=created["id"])
    # then: only a digest is stored
    assert raw.startswith(f"fatia_{token.prefix}_")
    assert raw not in token.digest
    assert "token" not in client.get(f"/api/v1/tokens/{token.pk}/").json()
    # a read token reads, cannot write
    reader = world.client(None)
    reader.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert reader.get("/api/v1/allocations/").status_code == 200
    denied = reader.post("/api/v1/allocations/", {"pool": world.pool.pk}, format="json")
    assert denied.status_code == 403
    assert denied.json()["detail"] == "This API token is read-only; create a token with the write scope."
    # revoked tokens stop working
    assert client.delete(f"/api/v1/tokens/{token.pk}/").status_code == 204
    assert reader.get("/api/v1/allocations/").status_code == 401
    # charlie cannot see or revoke alice's token
    assert world.client(world.charlie).delete(f"/api/v1/tokens/{token.pk}/").status_code == 404


def test_expired_and_garbage_tokens_are_refused(world: World):
    token, raw = create_api_token(
        user=world.alice, name="old", scope="write", expires_at=timezone.now() + timedelta(seconds=1), actor=world.alice
    )
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    client = world.client(None)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get("/api/v1/me/").json() == {
        "code": "authentication_failed",
        "detail": "This API token has expired.",
    }
    client.credentials(HTTP_AUTHORIZATION="Bearer fatia_nope_nope")
    assert client.get("/api/v1/me/").status_code == 401
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw[:-1]}x")
    assert client.get("/api/v1/me/").json() == {"code": "authentication_failed", "detail": "Invalid API token."}


def test_a_write_token_skips_csrf_but_a_session_needs_it(world: World):
    from rest_framework.test import APIClient

    # given
    _, raw = create_api_token(user=world.alice, name="w", scope="write", expires_at=None, actor=world.alice)
    payload = {"pool": world.pool.pk, "profile": "1g.10gb", "count": 1, "lease_hours": 1, "purpose": "csrf"}
    # when
    with_token = APIClient(enforce_csrf_checks=True)
    with_token.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    session = APIClient(enforce_csrf_checks=True)
    session.force_login(world.alice)
    # then
    assert with_token.post("/api/v1/allocations/", payload, format="json").status_code == 201
    refused = session.post("/api/v1/allocations/", payload, format="json")
    assert refused.status_code == 403
    assert refused.json()["detail"].startswith("CSRF Failed")


def test_me_describes_the_user(world: World):
    assert world.client(world.mallory).get("/api/v1/me/").json() == {
        "username": "mallory",
        "is_platform_admin": False,
        "memberships": [
            {
                "id": Membership.objects.get(user=world.mallory).pk,
                "tenant": world.tenant_a.pk,
                "username": "mallory",
                "role": "manager",
                "created_at": Membership.objects.get(user=world.mallory).created_at.isoformat().replace("+00:00", "Z"),
            }
        ],
    }


@pytest.mark.parametrize("path", ["/api/v1/schema/", "/api/v1/docs/", "/api/v1/redoc/"])
def test_the_openapi_schema_and_docs_are_served(world: World, path: str):
    response = world.client(world.alice).get(path)
    assert response.status_code == 200


def test_the_schema_describes_the_allocation_actions(world: World):
    schema = world.client(world.alice).get("/api/v1/schema/", {"format": "json"}).json()
    assert schema["openapi"].startswith("3.")
    for action in ("approve", "reject", "release", "extend"):
        assert f"/api/v1/allocations/{{id}}/{action}/" in schema["paths"]
    params = schema["paths"]["/api/v1/allocations/"]["post"]["parameters"]
    assert [p["name"] for p in params] == ["Idempotency-Key"]
    # and: how a request's hold ended (issue 14), read-only
    fields = schema["components"]["schemas"]["Allocation"]["properties"]
    assert fields["hold_outcome"]["readOnly"] is fields["hold_ended_at"]["readOnly"] is True
    assert "How its hold ended" in fields["hold_outcome"]["description"]
