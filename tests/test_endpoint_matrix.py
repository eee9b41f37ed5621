"""Every API route with the three users and an anonymous caller, and "nothing changed" on each refusal.

alice: member of tenant A; mallory: manager of tenant A; charlie: member of tenant B. Objects in the
paths belong to tenant A (tokens to alice). A refusal (401, 403, 404, 400) must leave the database as
it was; the last test fails when a route is added to the API without a row here.

The users, the pool and the objects are made once for the module (`built`), in a transaction rolled back when the
module ends; each case runs in a savepoint inside it (pytest-django's `db`), rolled back after the case, so every
case still starts from the same rows. Making them for each of the ~370 cases was most of the file's time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import transaction
from django.test import override_settings
from django.urls import resolve
from django.utils import timezone

from allocations import services
from allocations.api.urls import router as allocations_router
from allocations.cohorts.config import create_cohort
from allocations.mig.reconfig import Operation
from allocations.models import (
    Allocation,
    Booking,
    Cohort,
    ExtensionConsent,
    LeaseExtension,
    NodePool,
    Notification,
    Quota,
    QuotaChangeRequest,
)
from allocations.nodeagent.api.urls import urlpatterns as nodeagent_urls
from allocations.nodeagent.commands import queue_agent_commands
from allocations.nodeagent.models import AgentCommand, AgentCredential, AgentStatus
from allocations.nodeagent.services import issue_agent_credential
from allocations.services.bookings import request_booking
from tenants.api.urls import router as tenants_router
from tenants.models import ApiToken, AuditEvent, Membership, SsoGroupMapping, Tenant, TenantNamespace
from tenants.services import create_api_token
from tests.conftest import World, build_world

pytestmark = pytest.mark.django_db

USERS = ("alice", "mallory", "charlie", "anonymous")


@dataclass(frozen=True)
class Ids:
    tenant: int
    membership: int
    token: int
    pool: int
    quota: int
    change: int
    pending: int
    active: int
    event: int
    extension: int
    mapping: int
    agent_credential: int
    agent_command: int
    booking: int
    namespace: int
    consent: int
    cohort: int


# The module's world, the objects in the paths, and the snapshot of the database with them (see `built`).
Built = tuple[World, Ids, tuple[Any, ...]]


def objects(world: World) -> Ids:
    pending, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="3g.40gb",
        count=1,
        lease_hours=8,
        purpose="pending",
        actor=world.alice,
    )
    active, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="1g.10gb",
        count=1,
        lease_hours=8,
        purpose="active",
        actor=world.alice,
    )
    services.provision_allocation(allocation_id=active.pk)
    # Another active lease with an extension past the auto-approve lease (24 h), waiting for a manager.
    extended, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="1g.10gb",
        count=1,
        lease_hours=8,
        purpose="extended",
        actor=world.alice,
    )
    services.provision_allocation(allocation_id=extended.pk)
    extension = services.request_lease_extension(allocation_id=extended.pk, hours=40, actor=world.alice)
    change, _ = services.request_quota_change(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        compute_slices_limit=28,
        memory_slices_limit=32,
        justification="growth",
        actor=world.mallory,
    )
    token, _ = create_api_token(user=world.alice, name="mine", scope="read", expires_at=None, actor=world.alice)
    event = AuditEvent.objects.filter(tenant=world.tenant_a).order_by("pk").first()
    assert event is not None
    mapping = SsoGroupMapping.objects.create(group="gpu-team-a", tenant=world.tenant_a, role="member")
    node = world.pool.nodes.order_by("pk").first()
    assert node is not None
    credential, _ = issue_agent_credential(node_id=node.pk, actor=world.root)
    (command,) = queue_agent_commands(
        node_id=node.pk, gpu_index=0, operations=[Operation("create", "1g.10gb", 0)], batch_key="matrix"
    )
    booking = request_booking(**booking_fields(world), actor=world.alice)  # past the policy: pending
    # A third lease whose long extension waits for the booking's owner (alice) to agree; made directly, since the
    # big pool has room for both (tests/bookings/test_extension_consents.py makes real conflicts).
    consented, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="1g.10gb",
        count=1,
        lease_hours=8,
        purpose="consented",
        actor=world.alice,
    )
    services.provision_allocation(allocation_id=consented.pk)
    waiting = services.request_lease_extension(allocation_id=consented.pk, hours=40, actor=world.alice)
    consent = ExtensionConsent.objects.create(extension=waiting, booking=booking)
    return Ids(
        tenant=world.tenant_a.pk,
        membership=Membership.objects.get(user=world.alice).pk,
        token=token.pk,
        pool=world.pool.pk,
        quota=Quota.objects.get(tenant=world.tenant_a, pool=world.pool).pk,
        change=change.pk,
        pending=pending.pk,
        active=active.pk,
        event=event.pk,
        extension=extension.pk,
        mapping=mapping.pk,
        agent_credential=credential.pk,
        agent_command=command.pk,
        booking=booking.pk,
        namespace=TenantNamespace.objects.create(tenant=world.tenant_a, name="team-a-own").pk,
        consent=consent.pk,
        cohort=create_cohort(pool_id=world.pool.pk, name="research", actor=world.root).pk,
    )


@pytest.fixture(scope="module")
def built(django_db_setup: None, django_db_blocker: Any) -> Iterator[Built]:
    """The world, the objects in the paths and the snapshot of the rows they make, made once; gone when the module
    ends (the transaction rolls back). Every case starts from these rows, so a refusal must leave exactly them: a
    case that left anything behind would fail the next refusal's check too."""
    with django_db_blocker.unblock(), transaction.atomic():
        # The function-scoped fast_password_hashing fixture does not reach a module's setup.
        with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
            world = build_world()
            ids = objects(world)
        yield world, ids, snapshot()
        transaction.set_rollback(True)


def snapshot() -> tuple[Any, ...]:
    return (
        AuditEvent.objects.count(),
        list(Allocation.objects.order_by("pk").values_list("pk", "status", "lease_hours")),
        list(Quota.objects.order_by("pk").values_list("pk", "compute_slices_limit", "memory_slices_limit")),
        list(QuotaChangeRequest.objects.order_by("pk").values_list("pk", "status")),
        list(Membership.objects.order_by("pk").values_list("pk", "role")),
        list(Tenant.objects.order_by("pk").values_list("pk", "name", "max_lease_hours", "idle_reclaim_enabled")),
        list(ApiToken.objects.order_by("pk").values_list("pk", "revoked_at")),
        list(NodePool.objects.order_by("pk").values_list("pk", "name", "profiles")),
        list(LeaseExtension.objects.order_by("pk").values_list("pk", "status")),
        list(Notification.objects.order_by("pk").values_list("pk", "read_at")),
        list(SsoGroupMapping.objects.order_by("pk").values_list("pk", "group", "tenant_id", "role")),
        list(AgentCredential.objects.order_by("pk").values_list("pk", "revoked_at")),
        AgentStatus.objects.count(),
        list(AgentCommand.objects.order_by("pk").values_list("pk", "status")),
        list(Booking.objects.order_by("pk").values_list("pk", "status")),
        list(ExtensionConsent.objects.order_by("pk").values_list("pk", "status")),
        list(Cohort.objects.order_by("pk").values_list("pk", "name", "reclaim_grace_minutes")),
        list(Quota.objects.order_by("pk").values_list("pk", "cohort_id", "borrowing_compute_limit")),
    )


def booking_fields(world: World) -> dict[str, Any]:
    start = timezone.now().replace(second=0, microsecond=0) + timedelta(days=1)
    return {
        "tenant_id": world.tenant_a.pk,
        "pool_id": world.pool.pk,
        "profile": "3g.40gb",
        "count": 1,
        "starts_at": start,
        "ends_at": start + timedelta(hours=2),
        "purpose": "workshop",
    }


def payload(world: World, name: str) -> dict[str, Any]:
    a, pool = world.tenant_a.pk, world.pool.pk
    return {
        "tenant": {"name": "Team C", "slug": "team-c"},
        "tenant-edit": {"name": "Renamed"},
        "member": {"tenant": a, "username": "charlie", "role": "member"},
        "role": {"role": "manager"},
        "token": {"name": "t", "scope": "read"},
        "pool": {"name": "P2", "slug": "p2", "gpu_model": "NVIDIA H200"},
        "pool-edit": {"name": "Renamed pool"},
        "pool-admission": {"admission": "hold", "max_hold_minutes": 30},  # issue 14: platform admins only
        "quota": {"tenant": a, "pool": pool, "compute_slices_limit": 1, "memory_slices_limit": 1},
        "change": {
            "tenant": a,
            "pool": pool,
            "compute_slices_limit": 1,
            "memory_slices_limit": 1,
            "justification": "j",
        },
        "request": {"tenant": a, "pool": pool, "profile": "1g.10gb", "count": 1, "lease_hours": 1, "purpose": "p"},
        "reason": {"reason": "because"},
        "extend": {"hours": 2},
        "extend-long": {"hours": 30},
        "mapping": {"group": "gpu-team-a-managers", "tenant": a, "role": "manager"},
        "credential": {"node": "h100-node-1"},
        "idle": {"enabled": True, "idle_after_minutes": 60, "idle_grace_minutes": 30},
        "move-plan": {"pool": pool},
        "booking": {
            "tenant": a,
            "pool": pool,
            "profile": "1g.10gb",
            "count": 1,
            "starts_at": booking_fields(world)["starts_at"].isoformat(),
            "ends_at": booking_fields(world)["ends_at"].isoformat(),
            "purpose": "workshop",
        },
        "priority": {"priority": 1},
        "namespace": {"tenant": a, "name": "team-a-more"},
        "cohort": {"pool": pool, "name": "more"},
        "cohort-edit": {"reclaim_grace_minutes": 0},
        "membership": {"cohort": None},
        "what-if-add": {"count": 8},
        "what-if-quota": {"tenant": a},
        "none": {},
    }[name]


# (method, path template, payload name, expected status for alice, mallory, charlie, anonymous)
CASES: list[tuple[str, str, str, tuple[int, int, int, int]]] = [
    ("get", "/api/v1/me/", "none", (200, 200, 200, 401)),
    ("get", "/api/v1/tenants/", "none", (200, 200, 200, 401)),
    ("post", "/api/v1/tenants/", "tenant", (403, 403, 403, 401)),
    ("get", "/api/v1/tenants/{tenant}/", "none", (200, 200, 404, 401)),
    ("patch", "/api/v1/tenants/{tenant}/", "tenant-edit", (403, 403, 404, 401)),
    # Idle reclaim: the tenant's managers (and admins) set it; members read it.
    ("get", "/api/v1/tenants/{tenant}/idle-reclaim/", "none", (200, 200, 404, 401)),
    ("put", "/api/v1/tenants/{tenant}/idle-reclaim/", "idle", (403, 200, 404, 401)),
    ("get", "/api/v1/memberships/", "none", (200, 200, 200, 401)),
    ("post", "/api/v1/memberships/", "member", (403, 403, 400, 401)),
    ("get", "/api/v1/memberships/{membership}/", "none", (200, 200, 404, 401)),
    ("patch", "/api/v1/memberships/{membership}/", "role", (403, 403, 404, 401)),
    ("delete", "/api/v1/memberships/{membership}/", "none", (403, 403, 404, 401)),
    ("get", "/api/v1/tokens/", "none", (200, 200, 200, 401)),
    ("post", "/api/v1/tokens/", "token", (201, 201, 201, 401)),
    ("get", "/api/v1/tokens/{token}/", "none", (200, 404, 404, 401)),
    ("delete", "/api/v1/tokens/{token}/", "none", (204, 404, 404, 401)),
    ("get", "/api/v1/pools/", "none", (200, 200, 200, 401)),
    ("post", "/api/v1/pools/", "pool", (403, 403, 403, 401)),
    ("get", "/api/v1/pools/{pool}/", "none", (200, 200, 200, 401)),
    ("patch", "/api/v1/pools/{pool}/", "pool-edit", (403, 403, 403, 401)),
    ("patch", "/api/v1/pools/{pool}/", "pool-admission", (403, 403, 403, 401)),
    ("get", "/api/v1/pools/{pool}/capacity/", "none", (200, 200, 200, 401)),
    ("get", "/api/v1/quotas/", "none", (200, 200, 200, 401)),
    ("post", "/api/v1/quotas/", "quota", (403, 403, 400, 401)),
    ("get", "/api/v1/quotas/{quota}/", "none", (200, 200, 404, 401)),
    # Cohort membership and limits on the quota (issue 15): platform admins only.
    ("patch", "/api/v1/quotas/{quota}/", "membership", (403, 403, 404, 401)),
    ("get", "/api/v1/quota-changes/", "none", (200, 200, 200, 401)),
    ("post", "/api/v1/quota-changes/", "change", (403, 201, 400, 401)),
    ("get", "/api/v1/quota-changes/{change}/", "none", (200, 200, 404, 401)),
    ("post", "/api/v1/quota-changes/{change}/approve/", "reason", (403, 403, 404, 401)),
    ("post", "/api/v1/quota-changes/{change}/reject/", "reason", (403, 403, 404, 401)),
    ("get", "/api/v1/allocations/", "none", (200, 200, 200, 401)),
    ("post", "/api/v1/allocations/", "request", (201, 201, 400, 401)),
    ("get", "/api/v1/allocations/{pending}/", "none", (200, 200, 404, 401)),
    ("post", "/api/v1/allocations/{pending}/approve/", "reason", (403, 200, 404, 401)),
    ("post", "/api/v1/allocations/{pending}/reject/", "reason", (403, 200, 404, 401)),
    ("post", "/api/v1/allocations/{active}/release/", "none", (200, 200, 404, 401)),
    ("post", "/api/v1/allocations/{active}/extend/", "extend", (200, 200, 404, 401)),
    # Retrying a request's overdue work: platform admins only (tests/allocations/test_outbox.py).
    ("post", "/api/v1/allocations/{active}/retry/", "none", (403, 403, 404, 401)),
    # "Keep it" on a request idle reclaim has not flagged: nothing to keep (tests/nodeagent/test_idle_api.py).
    ("post", "/api/v1/allocations/{active}/keep/", "none", (409, 409, 404, 401)),
    # Past the auto-approve lease: a member's extension waits (202), a manager's applies (200).
    ("post", "/api/v1/allocations/{active}/extend/", "extend-long", (202, 200, 404, 401)),
    # Compaction (issue 14): platform admins only (tests/compaction/test_api.py covers them as root).
    ("get", "/api/v1/move-plans/", "none", (403, 403, 403, 401)),
    ("post", "/api/v1/move-plans/", "move-plan", (403, 403, 403, 401)),
    ("get", "/api/v1/move-plans/{pool}/", "none", (403, 403, 403, 401)),
    ("get", "/api/v1/move-plans/preview/", "none", (403, 403, 403, 401)),
    ("get", "/api/v1/lease-extensions/", "none", (200, 200, 200, 401)),
    ("get", "/api/v1/lease-extensions/{extension}/", "none", (200, 200, 404, 401)),
    ("post", "/api/v1/lease-extensions/{extension}/approve/", "reason", (403, 200, 404, 401)),
    ("post", "/api/v1/lease-extensions/{extension}/reject/", "reason", (403, 200, 404, 401)),
    ("get", "/api/v1/extension-consents/", "none", (200, 200, 200, 401)),
    ("get", "/api/v1/extension-consents/{consent}/", "none", (200, 200, 404, 401)),
    ("post", "/api/v1/extension-consents/{consent}/agree/", "reason", (200, 200, 404, 401)),
    ("post", "/api/v1/extension-consents/{consent}/refuse/", "reason", (200, 200, 404, 401)),
    # The queue (issue 15): every user sees their tenants' queued requests; managers set priority.
    ("get", "/api/v1/queue/", "none", (200, 200, 200, 401)),
    ("post", "/api/v1/queue/{pending}/priority/", "priority", (403, 200, 404, 401)),
    ("get", "/api/v1/audit-events/", "none", (200, 200, 200, 401)),
    ("get", "/api/v1/audit-events/{event}/", "none", (404, 200, 404, 401)),
    # Single sign-on group mappings: platform admins only.
    ("get", "/api/v1/sso-group-mappings/", "none", (403, 403, 403, 401)),
    ("post", "/api/v1/sso-group-mappings/", "mapping", (403, 403, 403, 401)),
    ("get", "/api/v1/sso-group-mappings/{mapping}/", "none", (403, 403, 403, 401)),
    ("patch", "/api/v1/sso-group-mappings/{mapping}/", "role", (403, 403, 403, 401)),
    ("delete", "/api/v1/sso-group-mappings/{mapping}/", "none", (403, 403, 403, 401)),
    # Node agents: only platform admins manage credentials; the ingest endpoints take an agent's credential, never a
    # person's session (tests/nodeagent/ covers them with agent credentials).
    ("get", "/api/v1/agent-credentials/", "none", (403, 403, 403, 401)),
    ("post", "/api/v1/agent-credentials/", "credential", (403, 403, 403, 401)),
    ("post", "/api/v1/agent-credentials/{agent_credential}/revoke/", "none", (403, 403, 403, 401)),
    ("post", "/api/v1/agent/inventory/", "none", (403, 403, 403, 401)),
    # A plain Django view (the hot path, package `ingest`): only an agent credential authenticates there, so a
    # user signed in through DRF is as anonymous as nobody.
    ("post", "/api/v1/agent/telemetry/", "none", (401, 401, 401, 401)),
    # Bootstrap takes no credential (an agent pod's ServiceAccount token in the body); off unless configured.
    ("post", "/api/v1/agent/bootstrap/", "none", (404, 404, 404, 404)),
    ("get", "/api/v1/agent/commands/", "none", (403, 403, 403, 401)),
    ("post", "/api/v1/agent/commands/{agent_command}/result/", "none", (403, 403, 403, 401)),
    # Workloads and the advisor (issue 17): they compute and change nothing; attach is a POST for its body.
    ("get", "/api/v1/allocations/{active}/manifests/", "none", (400, 400, 404, 401)),
    ("post", "/api/v1/allocations/{active}/attach/", "none", (400, 400, 404, 401)),
    ("get", "/api/v1/advice/", "none", (400, 400, 400, 401)),
    # Bookings (issue 15): charlie cannot name tenant A (400), nor see its booking (404).
    ("get", "/api/v1/bookings/", "none", (200, 200, 200, 401)),
    ("post", "/api/v1/bookings/", "booking", (201, 201, 400, 401)),
    ("get", "/api/v1/bookings/{booking}/", "none", (200, 200, 404, 401)),
    ("post", "/api/v1/bookings/{booking}/approve/", "reason", (403, 200, 404, 401)),
    ("post", "/api/v1/bookings/{booking}/reject/", "reason", (403, 200, 404, 401)),
    ("post", "/api/v1/bookings/{booking}/cancel/", "none", (200, 200, 404, 401)),
    # Namespaces tenants own (issue 17): members list their tenants'; platform admins assign and remove them
    # (tests/tenants/test_namespaces_api.py covers them as root).
    ("get", "/api/v1/namespaces/", "none", (200, 200, 200, 401)),
    ("post", "/api/v1/namespaces/", "namespace", (403, 403, 403, 401)),
    ("delete", "/api/v1/namespaces/{namespace}/", "none", (403, 403, 403, 401)),
    # Cohorts (issue 15): platform admins write; members read those of pools where their tenants have quota
    # (tests/cohorts/test_config_api.py covers them as root and with a pool charlie's tenant alone uses).
    ("get", "/api/v1/cohorts/", "none", (200, 200, 200, 401)),
    ("post", "/api/v1/cohorts/", "cohort", (403, 403, 403, 401)),
    ("get", "/api/v1/cohorts/{cohort}/", "none", (200, 200, 200, 401)),
    ("patch", "/api/v1/cohorts/{cohort}/", "cohort-edit", (403, 403, 403, 401)),
    ("delete", "/api/v1/cohorts/{cohort}/", "none", (403, 403, 403, 401)),
    # Their pages (plain Django views): DRF's forced user is no session, so everyone here is sent to sign in;
    # tests/web/test_tenant_namespaces_page.py signs each user in (admin, manager, member, another tenant's).
    ("get", "/tenants/{tenant}/namespaces/", "none", (302, 302, 302, 302)),
    ("post", "/tenants/{tenant}/namespaces/", "namespace", (302, 302, 302, 302)),
    ("post", "/tenants/{tenant}/namespaces/{namespace}/remove/", "none", (302, 302, 302, 302)),
    # What-if for planners (issue 14): platform admins and managers of a tenant with quota in the pool; they compute
    # and change nothing (tests/planning/test_api.py covers bad input and tenancy). Its page,
    # /manage/pools/<id>/what-if/, follows the same rule since session 10 (it was for admins only): mallory gets the
    # page, alice and charlie a 403 (tests/planning/test_api.py signs each in; here no session, so 302 for all).
    ("get", "/manage/pools/{pool}/what-if/", "none", (302, 302, 302, 302)),
    ("get", "/api/v1/pools/{pool}/what-if/add-gpus/", "what-if-add", (403, 200, 403, 401)),
    ("get", "/api/v1/pools/{pool}/what-if/quota/", "what-if-quota", (403, 200, 403, 401)),
    ("get", "/api/v1/pools/{pool}/what-if/mix/", "none", (403, 200, 403, 401)),
    # The schema is public: it describes the API, not anybody's data.
    ("get", "/api/v1/schema/", "none", (200, 200, 200, 200)),
]


@pytest.mark.parametrize(
    ("method", "template", "body", "expected"), CASES, ids=[f"{c[0]} {c[1]} {c[2]}" for c in CASES]
)
@pytest.mark.parametrize("who", USERS)
def test_each_route_answers_each_user_as_expected(built: Built, method, template, body, expected, who):
    # given: the module's rows; the user read afresh, so nothing an earlier case cached on the object carries over
    world, ids, before = built
    path = template.format(**ids.__dict__)
    client = world.client(None if who == "anonymous" else User.objects.get(pk=getattr(world, who).pk))
    # when
    response = getattr(client, method)(path, payload(world, body), format="json")
    # then
    assert response.status_code == expected[USERS.index(who)], response.content
    if response.status_code >= 400:
        assert snapshot() == before


def test_every_api_route_is_in_the_matrix(built: Built):
    _, ids, _ = built
    covered = {resolve(template.format(**ids.__dict__)).url_name for _, template, _, _ in CASES}
    routes = {u.name for u in [*allocations_router.urls, *tenants_router.urls, *nodeagent_urls]} | {"me", "schema"}
    # Routes that exist only as formats of the same views (e.g. ".json" suffixes) are not separate routes.
    assert routes - covered == set()
