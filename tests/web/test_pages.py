"""The browser pages through Django's test client: who sees what, and what each button changes.

alice is a member of Team A, mallory its manager, charlie a member of Team B, root a platform admin.
"""

from __future__ import annotations

import re

import pytest
from django.test import Client

from allocations import services
from allocations.models import Allocation, NodePool, Quota, QuotaChangeRequest
from tenants.models import ApiToken, AuditEvent, Membership, Tenant
from tenants.services import create_api_token
from tests.conftest import World

Status = Allocation.Status


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def request_slices(world: World, actor, *, profile: str = "1g.10gb", count: int = 1, lease_hours: int = 8):
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile=profile,
        count=count,
        lease_hours=lease_hours,
        purpose="fine-tune llama",
        actor=actor,
    )
    return allocation


def new_request_data(world: World, **overrides):
    data = {
        "tenant": str(world.tenant_a.pk),
        "pool": str(world.pool.pk),
        "profile": "1g.20gb",
        "count": "2",
        "lease_hours": "8",
        "purpose": "evaluate a 7B model",
        "idempotency_key": "form-1",
    }
    data.update(overrides)
    return data


def audit_verbs(allocation: Allocation) -> list[str]:
    return list(
        AuditEvent.objects.filter(object_type="allocation", object_id=str(allocation.pk))
        .order_by("id")
        .values_list("verb", flat=True)
    )


# --- Sign-in and navigation ---------------------------------------------------------------------------


def test_anonymous_visitors_are_sent_to_the_login_page(world: World):
    # when
    response = Client().get("/")
    # then
    assert response.status_code == 302
    assert response["Location"] == "/login/?next=/"


def test_the_login_page_signs_alice_in_and_lands_on_her_requests(world: World):
    # given
    client = Client()
    assert client.get("/login/").status_code == 200
    # when
    response = client.post("/login/", {"username": "alice", "password": "correct horse battery staple"})
    # then
    assert response.status_code == 302
    assert response["Location"] == "/"


def test_logging_out_is_a_post_that_ends_the_session(world: World):
    # given
    client = client_for(world.alice)
    # when
    response = client.post("/logout/")
    # then
    assert response.status_code == 302
    assert response["Location"] == "/login/"
    assert client.get("/").status_code == 302


def test_a_member_does_not_see_the_approvals_or_admin_links(world: World):
    # when
    html = client_for(world.alice).get("/").content.decode()
    # then
    assert 'href="/approvals/"' not in html
    assert 'href="/manage/tenants/"' not in html
    assert 'href="/quotas/"' in html
    assert 'href="/api/v1/docs/"' in html


def test_a_manager_sees_the_approvals_link_and_an_admin_the_admin_links(world: World):
    # when
    mallory_html = client_for(world.mallory).get("/").content.decode()
    root_html = client_for(world.root).get("/").content.decode()
    # then
    assert 'href="/approvals/"' in mallory_html
    assert 'href="/manage/tenants/"' not in mallory_html
    for url in ("/manage/tenants/", "/manage/pools/", "/manage/quota-changes/", "/manage/audit/"):
        assert f'href="{url}"' in root_html


# --- Home ---------------------------------------------------------------------------------------------


def test_the_home_page_lists_the_tenants_requests_and_quota_balances(world: World):
    # given
    mine = request_slices(world, world.alice, profile="1g.20gb", count=2)
    # when
    response = client_for(world.alice).get("/")
    # then
    assert response.status_code == 200
    assert response.context["allocations"] == [mine]
    [balance] = response.context["balances"]
    assert (balance.tenant_name, balance.compute_used, balance.memory_used) == ("Team A", 2, 4)
    assert (balance.compute_free, balance.memory_free, balance.gpu_equivalents_free) == (12, 12, 1.714)
    html = response.content.decode()
    assert f'href="/requests/{mine.pk}/"' in html
    assert '<span class="badge badge--approved">Approved</span>' in html


def test_the_home_page_does_not_show_other_tenants_requests(world: World):
    # given
    services.request_allocation(
        tenant_id=world.tenant_b.pk,
        pool_id=world.pool.pk,
        profile="1g.10gb",
        count=1,
        lease_hours=8,
        purpose="team b work",
        actor=world.charlie,
    )
    # when
    response = client_for(world.alice).get("/")
    # then
    assert response.context["allocations"] == []


def test_the_home_page_filters_requests_by_status(world: World):
    # given
    approved = request_slices(world, world.alice, profile="1g.10gb")
    pending = request_slices(world, world.alice, profile="3g.40gb")
    client = client_for(world.alice)
    # when
    only_pending = client.get("/", {"status": "pending"})
    only_approved = client.get("/", {"status": "approved"})
    # then
    assert only_pending.context["allocations"] == [pending]
    assert only_approved.context["allocations"] == [approved]
    counts = {f.value: f.count for f in only_pending.context["status_filters"]}
    assert (counts["pending"], counts["approved"], counts["active"]) == (1, 1, 0)


# --- New request --------------------------------------------------------------------------------------


def test_the_new_request_page_embeds_what_the_live_cost_preview_needs(world: World):
    # given
    request_slices(world, world.alice, profile="1g.20gb", count=1)
    # when
    response = client_for(world.alice).get("/requests/new/")
    # then
    assert response.status_code == 200
    data = response.context["form_data"]
    [tenant] = data["tenants"]
    assert tenant == {
        "id": world.tenant_a.pk,
        "name": "Team A",
        "max_lease_hours": 168,
        "auto_approve_max_compute_slices": 2,
        "auto_approve_max_lease_hours": 24,
        "quotas": {
            str(world.pool.pk): {
                "compute_limit": 14,
                "memory_limit": 16,
                "compute_used": 1,
                "memory_used": 2,
                "profile_caps": {},
                "held": {"1g.20gb": 1},
            }
        },
    }
    [pool] = data["pools"]
    assert (pool["name"], pool["compute_slices"], pool["memory_slices"]) == ("H100 pool", 7, 8)
    assert [(p["name"], p["compute_slices"], p["memory_slices"]) for p in pool["profiles"]] == [
        ("1g.10gb", 1, 1),
        ("1g.10gb+me", 1, 1),
        ("1g.20gb", 1, 2),
        ("2g.20gb", 2, 2),
        ("3g.40gb", 3, 4),
        ("4g.40gb", 4, 4),
        ("7g.80gb", 7, 8),
    ]
    assert '<script id="request-form-data" type="application/json">' in response.content.decode()


def test_a_single_tenant_member_gets_the_tenant_as_a_hidden_field(world: World):
    # when
    html = client_for(world.alice).get("/requests/new/").content.decode()
    # then
    assert f'<input type="hidden" name="tenant" value="{world.tenant_a.pk}" id="id_tenant">' in html


def test_submitting_a_small_request_approves_it_and_opens_its_page(world: World):
    # when
    response = client_for(world.alice).post("/requests/new/", new_request_data(world))
    # then
    allocation = Allocation.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/requests/{allocation.pk}/"
    assert (allocation.status, allocation.profile, allocation.count) == (Status.APPROVED, "1g.20gb", 2)
    assert (allocation.compute_slices, allocation.memory_slices) == (2, 4)
    assert audit_verbs(allocation) == ["request", "auto_approve"]


def test_a_request_beyond_the_auto_approve_policy_waits_for_a_manager(world: World):
    # when
    response = client_for(world.alice).post("/requests/new/", new_request_data(world, profile="3g.40gb", count="1"))
    # then
    allocation = Allocation.objects.get()
    assert response["Location"] == f"/requests/{allocation.pk}/"
    assert allocation.status == Status.PENDING


def test_service_errors_appear_next_to_their_fields_and_nothing_is_created(world: World):
    # when
    response = client_for(world.alice).post(
        "/requests/new/", new_request_data(world, lease_hours="1000", purpose="   x   ", profile="1g.10gb+me")
    )
    # then
    assert response.status_code == 400
    assert response.context["form"].errors == {
        "lease_hours": ["The lease must be between 1 and 168 hours for Team A."],
    }
    assert 'aria-invalid="true"' in response.content.decode()
    assert Allocation.objects.count() == 0


def test_submitting_the_same_form_twice_creates_one_request(world: World):
    # given
    client = client_for(world.alice)
    client.post("/requests/new/", new_request_data(world))
    # when
    response = client.post("/requests/new/", new_request_data(world))
    # then
    allocation = Allocation.objects.get()
    assert response["Location"] == f"/requests/{allocation.pk}/"


def test_charlie_cannot_request_slices_for_alices_tenant(world: World):
    # given
    events_before = AuditEvent.objects.count()
    # when
    response = client_for(world.charlie).post("/requests/new/", new_request_data(world))
    # then
    assert response.status_code == 400
    assert response.context["form"].errors == {
        "tenant": ["Select a valid choice. That choice is not one of the available choices."]
    }
    assert Allocation.objects.count() == 0
    assert AuditEvent.objects.count() == events_before


# --- Request detail and its buttons -------------------------------------------------------------------


def test_the_detail_page_shows_the_claim_pod_spec_placements_and_timeline(world: World):
    # given
    allocation = request_slices(world, world.alice, profile="1g.20gb", count=2)
    services.provision_allocation(allocation_id=allocation.pk)
    allocation.refresh_from_db()
    # when
    response = client_for(world.alice).get(f"/requests/{allocation.pk}/")
    # then
    assert response.status_code == 200
    html = response.content.decode()
    assert f"resourceClaimName: {allocation.claim_name}" in html
    assert f'<code id="claim-name" class="code-inline">mig-alloc-{allocation.uuid}</code>' in html
    assert len(response.context["placements"]) == 2
    assert [e.verb for e in response.context["timeline"]] == ["request", "auto_approve", "activate"]
    actions = response.context["actions"]
    assert (actions.can_release, actions.can_extend, actions.can_decide) == (True, True, False)
    assert '<span class="badge badge--active">Active</span>' in html


def test_charlie_gets_404_on_alices_request(world: World):
    # given
    allocation = request_slices(world, world.alice)
    # when
    response = client_for(world.charlie).get(f"/requests/{allocation.pk}/")
    # then
    assert response.status_code == 404


def test_a_missing_request_is_404_too(world: World):
    # when
    response = client_for(world.alice).get("/requests/999999/")
    # then
    assert response.status_code == 404


def test_mallory_approves_a_pending_request_from_the_approvals_page(world: World):
    # given
    allocation = request_slices(world, world.alice, profile="3g.40gb")
    # when
    response = client_for(world.mallory).post(
        f"/requests/{allocation.pk}/approve/", {"reason": "go ahead", "next": "/approvals/"}
    )
    # then
    assert response.status_code == 302
    assert response["Location"] == "/approvals/"
    allocation.refresh_from_db()
    assert (allocation.status, allocation.decision_reason) == (Status.APPROVED, "go ahead")
    assert audit_verbs(allocation) == ["request", "approve"]


def test_a_next_url_off_the_site_is_ignored(world: World):
    # given
    allocation = request_slices(world, world.alice, profile="3g.40gb")
    # when
    response = client_for(world.mallory).post(
        f"/requests/{allocation.pk}/approve/", {"next": "https://evil.example/phish"}
    )
    # then
    assert response["Location"] == f"/requests/{allocation.pk}/"


@pytest.mark.parametrize("action", ["approve", "reject"])
def test_a_member_cannot_decide_and_nothing_changes(world: World, action: str):
    # given
    allocation = request_slices(world, world.alice, profile="3g.40gb")
    events_before = AuditEvent.objects.count()
    # when
    response = client_for(world.alice).post(f"/requests/{allocation.pk}/{action}/", {"reason": "mine"})
    # then
    assert response.status_code == 403
    allocation.refresh_from_db()
    assert allocation.status == Status.PENDING
    assert AuditEvent.objects.count() == events_before


@pytest.mark.parametrize("action", ["approve", "reject", "release", "extend"])
def test_charlie_gets_404_posting_to_alices_request_and_nothing_changes(world: World, action: str):
    # given
    allocation = request_slices(world, world.alice, profile="3g.40gb")
    events_before = AuditEvent.objects.count()
    # when
    response = client_for(world.charlie).post(f"/requests/{allocation.pk}/{action}/", {"reason": "x", "hours": "1"})
    # then
    assert response.status_code == 404
    allocation.refresh_from_db()
    assert allocation.status == Status.PENDING
    assert AuditEvent.objects.count() == events_before


def test_the_buttons_only_accept_post(world: World):
    # given
    allocation = request_slices(world, world.alice, profile="3g.40gb")
    # when
    response = client_for(world.mallory).get(f"/requests/{allocation.pk}/approve/")
    # then
    assert response.status_code == 405
    allocation.refresh_from_db()
    assert allocation.status == Status.PENDING


def test_mallory_rejects_with_a_reason(world: World):
    # given
    allocation = request_slices(world, world.alice, profile="3g.40gb")
    # when
    response = client_for(world.mallory).post(f"/requests/{allocation.pk}/reject/", {"reason": "too big"})
    # then
    assert response["Location"] == f"/requests/{allocation.pk}/"
    allocation.refresh_from_db()
    assert (allocation.status, allocation.decision_reason) == (Status.REJECTED, "too big")


def test_rejecting_without_a_reason_says_why_and_changes_nothing(world: World):
    # given
    allocation = request_slices(world, world.alice, profile="3g.40gb")
    events_before = AuditEvent.objects.count()
    client = client_for(world.mallory)
    # when
    response = client.post(f"/requests/{allocation.pk}/reject/", {"reason": ""}, follow=True)
    # then
    assert [str(m) for m in response.context["messages"]] == [
        f"Request #{allocation.pk}: Say why the request is rejected."
    ]
    allocation.refresh_from_db()
    assert allocation.status == Status.PENDING
    assert AuditEvent.objects.count() == events_before


def test_approving_past_the_quota_shows_the_shortfall_and_changes_nothing(world: World):
    # given: 14 compute slices; two 7g.80gb take them all
    first = request_slices(world, world.alice, profile="7g.80gb")
    second = request_slices(world, world.alice, profile="7g.80gb")
    request_slices(world, world.alice, profile="1g.10gb")
    services.approve_allocation(allocation_id=first.pk, actor=world.mallory)
    events_before = AuditEvent.objects.count()
    # when
    response = client_for(world.mallory).post(f"/requests/{second.pk}/approve/", follow=True)
    # then
    assert [str(m) for m in response.context["messages"]] == [
        f"Request #{second.pk}: Needs 7 compute slices; 6 of 14 are free."
    ]
    second.refresh_from_db()
    assert second.status == Status.PENDING
    assert AuditEvent.objects.count() == events_before


def test_alice_releases_her_active_request(world: World):
    # given
    allocation = request_slices(world, world.alice)
    services.provision_allocation(allocation_id=allocation.pk)
    # when
    response = client_for(world.alice).post(f"/requests/{allocation.pk}/release/")
    # then
    assert response["Location"] == f"/requests/{allocation.pk}/"
    allocation.refresh_from_db()
    assert allocation.status == Status.RELEASING
    assert audit_verbs(allocation)[-1] == "release"


def test_alice_extends_her_active_lease(world: World):
    # given
    allocation = request_slices(world, world.alice, lease_hours=8)
    services.provision_allocation(allocation_id=allocation.pk)
    # when
    client_for(world.alice).post(f"/requests/{allocation.pk}/extend/", {"hours": "4"})
    # then
    allocation.refresh_from_db()
    assert allocation.lease_hours == 12


def test_extending_past_the_tenants_maximum_says_why_and_changes_nothing(world: World):
    # given
    allocation = request_slices(world, world.alice, lease_hours=8)
    services.provision_allocation(allocation_id=allocation.pk)
    events_before = AuditEvent.objects.count()
    # when
    response = client_for(world.alice).post(f"/requests/{allocation.pk}/extend/", {"hours": "500"}, follow=True)
    # then
    assert [str(m) for m in response.context["messages"]] == [
        f"Request #{allocation.pk}: The whole lease may be at most 168 hours (8 used so far)."
    ]
    allocation.refresh_from_db()
    assert allocation.lease_hours == 8
    assert AuditEvent.objects.count() == events_before


# --- Approvals ----------------------------------------------------------------------------------------


def test_the_approvals_page_lists_pending_requests_with_cost_and_remaining_quota(world: World):
    # given
    request_slices(world, world.alice, profile="1g.10gb")
    pending = request_slices(world, world.alice, profile="3g.40gb")
    # when
    response = client_for(world.mallory).get("/approvals/")
    # then
    assert response.status_code == 200
    [row] = response.context["rows"]
    assert row.allocation == pending
    assert (row.balance.compute_free, row.balance.memory_free) == (13, 15)
    assert round(row.gpu_equivalents, 3) == 0.5
    assert row.shortfall is None


def test_members_get_403_on_the_approvals_page(world: World):
    # when
    response = client_for(world.alice).get("/approvals/")
    # then
    assert response.status_code == 403


# --- Quotas -------------------------------------------------------------------------------------------


def test_the_quotas_page_shows_balances_and_no_change_form_to_members(world: World):
    # when
    response = client_for(world.alice).get("/quotas/")
    # then
    assert response.status_code == 200
    assert [(b.tenant_name, b.compute_limit, b.memory_limit) for b in response.context["balances"]] == [
        ("Team A", 14, 16)
    ]
    assert response.context["form"] is None


def test_a_manager_asks_for_a_quota_change(world: World):
    # when
    response = client_for(world.mallory).post(
        "/quotas/",
        {
            "tenant": str(world.tenant_a.pk),
            "pool": str(world.pool.pk),
            "compute_slices_limit": "21",
            "memory_slices_limit": "24",
            "profile_caps": "7g.80gb=1, 1g.10gb=8",
            "justification": "new training project",
        },
    )
    # then
    assert response.status_code == 302
    change = QuotaChangeRequest.objects.get()
    assert (change.tenant_id, change.compute_slices_limit, change.memory_slices_limit) == (world.tenant_a.pk, 21, 24)
    assert change.profile_caps == {"7g.80gb": 1, "1g.10gb": 8}
    assert change.status == QuotaChangeRequest.Status.PENDING


def test_unreadable_profile_caps_are_a_field_error(world: World):
    # when
    response = client_for(world.mallory).post(
        "/quotas/",
        {
            "tenant": str(world.tenant_a.pk),
            "pool": str(world.pool.pk),
            "compute_slices_limit": "21",
            "memory_slices_limit": "24",
            "profile_caps": "lots of 7g",
            "justification": "new training project",
        },
    )
    # then
    assert response.context["form"].errors == {
        "profile_caps": ["Cannot read 'lots of 7g': write profile=count, e.g. 1g.10gb=4."]
    }
    assert QuotaChangeRequest.objects.count() == 0


def test_a_member_asking_for_a_quota_change_gets_403_and_nothing_changes(world: World):
    # given
    events_before = AuditEvent.objects.count()
    # when
    response = client_for(world.alice).post(
        "/quotas/",
        {
            "tenant": str(world.tenant_a.pk),
            "pool": str(world.pool.pk),
            "compute_slices_limit": "100",
            "memory_slices_limit": "100",
            "justification": "more",
        },
    )
    # then
    assert response.status_code == 403
    assert QuotaChangeRequest.objects.count() == 0
    assert AuditEvent.objects.count() == events_before


# --- Every page ---------------------------------------------------------------------------------------

# The pages every signed-in user may open (managers also /approvals/, admins the ADMIN_PAGES below).
MEMBER_PAGES = ["/", "/requests/new/", "/quotas/", "/dashboard/", "/dashboard/usage/", "/tokens/", "/inbox/"]


@pytest.mark.parametrize("url", MEMBER_PAGES)
@pytest.mark.parametrize("username", ["alice", "mallory", "charlie", "root"])
def test_member_pages_render_for_everyone_signed_in(world: World, url: str, username: str):
    # when
    response = client_for(getattr(world, username)).get(url)
    # then
    assert response.status_code == 200


@pytest.mark.parametrize("url", [*MEMBER_PAGES, "/approvals/"])
def test_every_page_sends_anonymous_visitors_to_the_login_page(world: World, url: str):
    # when
    response = Client().get(url)
    # then
    assert (response.status_code, response["Location"]) == (302, f"/login/?next={url}")


# --- Admin pages --------------------------------------------------------------------------------------

ADMIN_PAGES = [
    "/manage/tenants/",
    "/manage/pools/",
    "/manage/fleet/",
    "/manage/quotas/",
    "/manage/quota-changes/",
    "/manage/audit/",
]


@pytest.mark.parametrize("url", ADMIN_PAGES)
def test_admin_pages_render_for_a_platform_admin(world: World, url: str):
    # when
    response = client_for(world.root).get(url)
    # then
    assert response.status_code == 200


@pytest.mark.parametrize("url", ADMIN_PAGES)
@pytest.mark.parametrize("username", ["alice", "mallory"])
def test_admin_pages_are_403_for_members_and_managers(world: World, url: str, username: str):
    # when
    response = client_for(getattr(world, username)).get(url)
    # then
    assert response.status_code == 403


def test_the_tenant_page_is_403_for_a_manager(world: World):
    # when
    response = client_for(world.mallory).get(f"/manage/tenants/{world.tenant_a.pk}/")
    # then
    assert response.status_code == 403


def test_an_admin_creates_a_tenant(world: World):
    # when
    response = client_for(world.root).post(
        "/manage/tenants/",
        {
            "name": "Team C",
            "slug": "team-c",
            "max_lease_hours": "72",
            "auto_approve_max_compute_slices": "1",
            "auto_approve_max_lease_hours": "12",
        },
    )
    # then
    tenant = Tenant.objects.get(slug="team-c")
    assert response["Location"] == f"/manage/tenants/{tenant.pk}/"
    assert (tenant.max_lease_hours, tenant.auto_approve_max_compute_slices) == (72, 1)


def test_a_bad_tenant_slug_is_a_field_error(world: World):
    # when
    response = client_for(world.root).post(
        "/manage/tenants/",
        {
            "name": "Team C",
            "slug": "Team C!",
            "max_lease_hours": "72",
            "auto_approve_max_compute_slices": "1",
            "auto_approve_max_lease_hours": "12",
        },
    )
    # then
    assert response.status_code == 400
    assert list(response.context["form"].errors) == ["slug"]
    assert Tenant.objects.filter(name="Team C").exists() is False


def test_a_manager_cannot_create_a_tenant_and_nothing_changes(world: World):
    # given
    events_before = AuditEvent.objects.count()
    # when
    response = client_for(world.mallory).post(
        "/manage/tenants/",
        {
            "name": "Team C",
            "slug": "team-c",
            "max_lease_hours": "72",
            "auto_approve_max_compute_slices": "1",
            "auto_approve_max_lease_hours": "12",
        },
    )
    # then
    assert response.status_code == 403
    assert Tenant.objects.count() == 2
    assert AuditEvent.objects.count() == events_before


def test_an_admin_edits_a_tenants_policy(world: World):
    # when
    response = client_for(world.root).post(
        f"/manage/tenants/{world.tenant_a.pk}/",
        {
            "name": "Team A",
            "max_lease_hours": "48",
            "auto_approve_max_compute_slices": "0",
            "auto_approve_max_lease_hours": "4",
        },
    )
    # then
    assert response.status_code == 302
    world.tenant_a.refresh_from_db()
    assert (world.tenant_a.max_lease_hours, world.tenant_a.auto_approve_max_compute_slices) == (48, 0)
    assert world.tenant_a.auto_approve_max_lease_hours == 4


def test_an_auto_approve_lease_above_the_maximum_is_refused_with_the_schemas_message(world: World):
    # when
    response = client_for(world.root).post(
        f"/manage/tenants/{world.tenant_a.pk}/",
        {
            "name": "Team A",
            "max_lease_hours": "10",
            "auto_approve_max_compute_slices": "2",
            "auto_approve_max_lease_hours": "24",
        },
    )
    # then
    assert response.status_code == 400
    assert response.context["policy_form"].non_field_errors() == [
        "The auto-approve lease bound cannot exceed the maximum lease."
    ]
    world.tenant_a.refresh_from_db()
    assert world.tenant_a.max_lease_hours == 168


def test_an_admin_adds_changes_and_removes_a_member(world: World):
    # given
    client = client_for(world.root)
    # when
    client.post(f"/manage/tenants/{world.tenant_a.pk}/members/", {"username": "charlie", "role": "member"})
    membership = Membership.objects.get(user=world.charlie, tenant=world.tenant_a)
    client.post(f"/manage/memberships/{membership.pk}/role/", {"role": "manager"})
    membership.refresh_from_db()
    role_after_change = membership.role
    client.post(f"/manage/memberships/{membership.pk}/remove/")
    # then
    assert role_after_change == Membership.Role.MANAGER
    assert Membership.objects.filter(user=world.charlie, tenant=world.tenant_a).exists() is False
    verbs = list(
        AuditEvent.objects.filter(object_type="membership", tenant=world.tenant_a)
        .order_by("id")
        .values_list("verb", flat=True)
    )
    assert verbs == ["add_member", "change_role", "remove_member"]


def test_adding_an_unknown_user_is_a_field_error(world: World):
    # when
    response = client_for(world.root).post(
        f"/manage/tenants/{world.tenant_a.pk}/members/", {"username": "nobody", "role": "member"}
    )
    # then
    assert response.status_code == 400
    assert response.context["member_form"].errors == {"username": ["No user named 'nobody'."]}


def test_a_manager_cannot_change_roles_and_nothing_changes(world: World):
    # given
    membership = Membership.objects.get(user=world.alice, tenant=world.tenant_a)
    events_before = AuditEvent.objects.count()
    # when
    response = client_for(world.mallory).post(f"/manage/memberships/{membership.pk}/role/", {"role": "manager"})
    # then
    assert response.status_code == 403
    membership.refresh_from_db()
    assert membership.role == Membership.Role.MEMBER
    assert AuditEvent.objects.count() == events_before


def test_an_admin_creates_a_pool_offering_chosen_profiles(world: World):
    # when
    response = client_for(world.root).post(
        "/manage/pools/",
        {
            "name": "H200 pool",
            "slug": "h200",
            "gpu_model": "NVIDIA H200",
            "profiles": ["7g.141gb", "1g.18gb"],
            "description": "",
        },
    )
    # then
    assert response.status_code == 302
    pool = NodePool.objects.get(slug="h200")
    assert pool.gpu_model == "NVIDIA H200"
    assert pool.profiles == ["1g.18gb", "7g.141gb"]


def test_a_profile_of_another_gpu_model_is_a_field_error(world: World):
    # when
    response = client_for(world.root).post(
        "/manage/pools/",
        {"name": "A30 pool", "slug": "a30", "gpu_model": "NVIDIA A30", "profiles": ["7g.80gb"]},
    )
    # then
    assert response.status_code == 400
    assert list(response.context["form"].errors) == ["profiles"]
    assert NodePool.objects.filter(slug="a30").exists() is False


def test_an_admin_sets_a_quota_with_profile_caps(world: World):
    # when
    response = client_for(world.root).post(
        "/manage/quotas/",
        {
            "tenant": str(world.tenant_b.pk),
            "pool": str(world.pool.pk),
            "compute_slices_limit": "7",
            "memory_slices_limit": "8",
            "profile_caps": "7g.80gb=0",
        },
    )
    # then
    assert response["Location"] == "/manage/quotas/"
    quota = Quota.objects.get(tenant=world.tenant_b, pool=world.pool)
    assert (quota.compute_slices_limit, quota.memory_slices_limit, quota.profile_caps) == (7, 8, {"7g.80gb": 0})


def test_an_admin_approves_and_rejects_quota_changes(world: World):
    # given
    first, _ = services.request_quota_change(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        compute_slices_limit=21,
        memory_slices_limit=24,
        justification="more",
        actor=world.mallory,
    )
    second, _ = services.request_quota_change(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        compute_slices_limit=70,
        memory_slices_limit=80,
        justification="much more",
        actor=world.mallory,
    )
    client = client_for(world.root)
    # when
    client.post(f"/manage/quota-changes/{first.pk}/approve/", {"reason": "ok"})
    client.post(f"/manage/quota-changes/{second.pk}/reject/", {"reason": "too much"})
    # then
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.status, second.status) == (QuotaChangeRequest.Status.APPROVED, QuotaChangeRequest.Status.REJECTED)
    quota = Quota.objects.get(tenant=world.tenant_a, pool=world.pool)
    assert (quota.compute_slices_limit, quota.memory_slices_limit) == (21, 24)


def test_the_audit_log_filters_by_verb_actor_and_tenant(world: World):
    # given
    allocation = request_slices(world, world.alice, profile="3g.40gb")
    services.approve_allocation(allocation_id=allocation.pk, actor=world.mallory)
    # when
    response = client_for(world.root).get(
        "/manage/audit/", {"verb": "approve", "actor": "mallory", "tenant": str(world.tenant_a.pk)}
    )
    # then
    events = list(response.context["page"].object_list)
    assert [(e.verb, e.actor_name, e.object_id) for e in events] == [("approve", "mallory", str(allocation.pk))]


def test_the_audit_log_pages_through_fifty_events_at_a_time(world: World):
    # given: the world wrote 5 events (pool, two nodes, two quotas); 55 tokens add 55 more
    for n in range(55):
        create_api_token(user=world.alice, name=f"t{n}", scope="read", expires_at=None, actor=world.alice)
    client = client_for(world.root)
    # when
    first = client.get("/manage/audit/")
    second = client.get("/manage/audit/", {"page": "2"})
    # then
    assert first.context["page"].paginator.count == 60
    assert len(first.context["page"].object_list) == 50
    assert len(second.context["page"].object_list) == 10
    assert 'href="?page=2"' in first.content.decode()


# --- API tokens ---------------------------------------------------------------------------------------


def test_a_new_tokens_secret_is_shown_once(world: World):
    # given
    client = client_for(world.alice)
    # when: create, follow the redirect, then reload
    created = client.post("/tokens/", {"name": "CI", "scope": "write", "expires_in_days": "30"})
    shown = client.get("/tokens/")
    reloaded = client.get("/tokens/")
    # then
    token = ApiToken.objects.get(user=world.alice)
    secret = shown.context["new_secret"]
    assert (created.status_code, created["Location"]) == (302, "/tokens/")
    assert re.fullmatch(rf"fatia_{token.prefix}_[\w-]+", secret)
    assert secret in shown.content.decode()
    assert shown["Cache-Control"] == "max-age=0, no-cache, no-store, must-revalidate, private"
    assert reloaded.context["new_secret"] is None
    assert secret not in reloaded.content.decode()
    assert (token.name, token.scope) == ("CI", "write")
    assert token.expires_at is not None


def test_reloading_after_creating_a_token_creates_no_second_one(world: World):
    """Issue 9: the POST rendered the secret without a redirect, so a reload posted the form again."""
    # given
    client = client_for(world.alice)
    # when: the browser follows the redirect, and the user reloads that page twice
    first = client.post("/tokens/", {"name": "CI", "scope": "read"}, follow=True)
    reloads = [client.get(first.redirect_chain[-1][0]) for _ in range(2)]
    # then
    assert first.redirect_chain == [("/tokens/", 302)]
    assert ApiToken.objects.filter(user=world.alice).count() == 1
    assert [r.context["new_secret"] for r in reloads] == [None, None]
    assert "is created" not in reloads[0].content.decode()


def test_a_refused_token_form_shows_its_errors_and_no_secret(world: World):
    # when
    response = client_for(world.alice).post("/tokens/", {"name": "", "scope": "write"})
    # then
    assert response.status_code == 400
    assert response.context["new_secret"] is None
    assert response.context["form"].errors == {"name": ["This field is required."]}
    assert ApiToken.objects.count() == 0


def test_alice_revokes_her_token(world: World):
    # given
    token, _ = create_api_token(user=world.alice, name="laptop", scope="read", expires_at=None, actor=world.alice)
    # when
    response = client_for(world.alice).post(f"/tokens/{token.pk}/revoke/")
    # then
    assert response["Location"] == "/tokens/"
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_charlie_gets_404_revoking_alices_token_and_nothing_changes(world: World):
    # given
    token, _ = create_api_token(user=world.alice, name="laptop", scope="read", expires_at=None, actor=world.alice)
    events_before = AuditEvent.objects.count()
    # when
    response = client_for(world.charlie).post(f"/tokens/{token.pk}/revoke/")
    # then
    assert response.status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None
    assert AuditEvent.objects.count() == events_before
