"""Read-only queries for the browser pages (the server-rendered UI), scoped to a user like selectors.py.

They shape data for templates and for the request form's live cost preview; they never change state.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db.models import Count, QuerySet, Sum

from allocations.costs import gpu_model_for
from allocations.mig.catalog import load_catalog
from allocations.models import Allocation, NodePool, Quota, SlicePlacement
from allocations.selectors import Balance, balance_of
from allocations.services.quotas import quota_shortfall
from tenants.models import ApiToken, AuditEvent, Membership, Tenant
from tenants.selectors import can_manage_tenant, managed_tenant_ids

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser
    from django.contrib.auth.models import User as AuthUser

    User = AuthUser | AnonymousUser

Status = Allocation.Status
RELEASABLE = (Status.PENDING, Status.APPROVED, Status.PROVISIONING, Status.ACTIVE)


@dataclass(frozen=True, slots=True)
class StatusFilter:
    value: str
    label: str
    count: int


def requests_for_user(user: User, *, status: str | None = None) -> list[Allocation]:
    """The user's tenants' requests, newest first, optionally of one status (at most 200)."""
    qs = Allocation.objects.for_user(user).select_related("tenant", "pool", "requested_by").distinct()
    if status:
        qs = qs.filter(status=status)
    return list(qs[:200])


def status_filters_for_user(user: User) -> list[StatusFilter]:
    """Every status with how many of the user's tenants' requests are in it."""
    visible = Allocation.objects.for_user(user).values("pk")
    counts = {
        row["status"]: row["n"]
        for row in Allocation.objects.filter(pk__in=visible).values("status").annotate(n=Count("pk")).order_by()
    }
    return [StatusFilter(value, str(label), counts.get(value, 0)) for value, label in Status.choices]


def placements_of(allocation: Allocation) -> list[SlicePlacement]:
    return list(allocation.placements.select_related("gpu__node").order_by("gpu__node__name", "gpu__index", "start"))


@dataclass(frozen=True, slots=True)
class AllocationActions:
    """Which buttons the detail page offers; the services still decide when they are pressed."""

    can_release: bool
    can_extend: bool
    can_decide: bool
    extend_max_hours: int


def allocation_actions(user: User, allocation: Allocation) -> AllocationActions:
    manages = can_manage_tenant(user, allocation.tenant_id)
    owner_or_manager = manages or allocation.requested_by_id == user.pk
    extend_max = max(allocation.tenant.max_lease_hours - allocation.lease_hours, 0)
    return AllocationActions(
        can_release=owner_or_manager and allocation.status in RELEASABLE,
        can_extend=owner_or_manager and allocation.status == Status.ACTIVE and extend_max > 0,
        can_decide=manages and allocation.status == Status.PENDING,
        extend_max_hours=extend_max,
    )


@dataclass(frozen=True, slots=True)
class PendingApproval:
    allocation: Allocation
    balance: Balance | None
    gpu_equivalents: float
    shortfall: str | None


def pending_approvals_with_balances(user: User) -> list[PendingApproval]:
    """Pending requests the user may decide, each with its tenant's balance in the pool and why it
    would not fit right now (None when approving it would succeed as far as quota goes)."""
    pending = list(
        Allocation.objects.managed_by(user)
        .filter(status=Status.PENDING)
        .select_related("tenant", "pool", "requested_by")
        .distinct()
        .order_by("created_at", "id")
    )
    quotas = {
        (q.tenant_id, q.pool_id): q
        for q in Quota.objects.filter(tenant_id__in={a.tenant_id for a in pending}).select_related("tenant", "pool")
    }
    rows = []
    for allocation in pending:
        quota = quotas.get((allocation.tenant_id, allocation.pool_id))
        model = gpu_model_for(allocation.pool.gpu_model)
        rows.append(
            PendingApproval(
                allocation=allocation,
                balance=balance_of(quota) if quota is not None else None,
                gpu_equivalents=max(
                    allocation.compute_slices / model.compute_slices, allocation.memory_slices / model.memory_slices
                ),
                shortfall=quota_shortfall(quota=quota, allocation=allocation),
            )
        )
    return rows


def request_form_tenants(user: User) -> QuerySet[Tenant]:
    return Tenant.objects.for_user(user).order_by("name").distinct()


def request_form_pools(user: User) -> QuerySet[NodePool]:
    if not user.is_authenticated:
        return NodePool.objects.none()
    return NodePool.objects.order_by("name")


def request_form_data(user: User) -> dict[str, Any]:
    """What the new-request page's script needs to show the cost of a request as it is typed: each
    pool's GPU model and offered profiles (with their compute and memory slices), each tenant's policy,
    and each tenant's remaining quota per pool with the slices it holds per profile (for profile caps)."""
    tenants = list(request_form_tenants(user))
    pools = list(request_form_pools(user))
    quotas = Quota.objects.filter(tenant__in=tenants).select_related("tenant", "pool")
    held: dict[tuple[int, int, str], int] = {
        (row["tenant_id"], row["pool_id"], row["profile"]): row["n"]
        for row in Allocation.objects.holding_quota()
        .filter(tenant__in=tenants)
        .values("tenant_id", "pool_id", "profile")
        .annotate(n=Sum("count"))
    }
    pool_data = []
    for pool in pools:
        model = gpu_model_for(pool.gpu_model)
        pool_data.append(
            {
                "id": pool.pk,
                "name": pool.name,
                "gpu_model": model.name,
                "compute_slices": model.compute_slices,
                "memory_slices": model.memory_slices,
                "profiles": [
                    {
                        "name": p.name,
                        "compute_slices": p.compute_slices,
                        "memory_slices": p.memory_slices,
                        "memory_gib": round(p.memory_mib / 1024, 1) if p.memory_mib else None,
                    }
                    for p in model.profiles
                    if p.name in pool.profiles
                ],
            }
        )
    quota_data: dict[str, dict[str, Any]] = {}
    for q in quotas:
        quota_data.setdefault(str(q.tenant_id), {})[str(q.pool_id)] = {
            "compute_limit": q.compute_slices_limit,
            "memory_limit": q.memory_slices_limit,
            "compute_used": q.compute_slices_used,
            "memory_used": q.memory_slices_used,
            "profile_caps": q.profile_caps,
            "held": {
                profile: n for (t, p, profile), n in held.items() if t == q.tenant_id and p == q.pool_id
            },
        }
    return {
        "max_count": settings.FATIA_MAX_SLICES_PER_REQUEST,
        "pools": pool_data,
        "tenants": [
            {
                "id": t.pk,
                "name": t.name,
                "max_lease_hours": t.max_lease_hours,
                "auto_approve_max_compute_slices": t.auto_approve_max_compute_slices,
                "auto_approve_max_lease_hours": t.auto_approve_max_lease_hours,
                "quotas": quota_data.get(str(t.pk), {}),
            }
            for t in tenants
        ],
    }


def managed_tenants(user: User) -> QuerySet[Tenant]:
    return Tenant.objects.filter(pk__in=managed_tenant_ids(user)).order_by("name")


@dataclass(frozen=True, slots=True)
class GpuModelChoice:
    name: str
    profiles: tuple[str, ...]


def gpu_model_choices() -> list[GpuModelChoice]:
    catalog = load_catalog()
    return [GpuModelChoice(name, catalog.model(name).profile_names()) for name in catalog.model_names()]


def pools_overview() -> QuerySet[NodePool]:
    """Every pool with its node and GPU counts (the admin's pool list)."""
    return NodePool.objects.annotate(
        node_count=Count("nodes", distinct=True), gpu_count=Count("nodes__gpus", distinct=True)
    ).order_by("name")


def tenants_overview() -> QuerySet[Tenant]:
    """Every tenant with its member count (the admin's tenant list)."""
    return Tenant.objects.annotate(
        member_count=Count("memberships", distinct=True),
    ).order_by("name")


def memberships_of(tenant: Tenant) -> QuerySet[Membership]:
    return Membership.objects.filter(tenant=tenant).select_related("user").order_by("user__username")


def api_tokens_for_user(user: User) -> QuerySet[ApiToken]:
    if not user.is_authenticated:
        return ApiToken.objects.none()
    return ApiToken.objects.filter(user_id=user.pk).order_by("-created_at")


def audit_events_for_user(
    user: User,
    *,
    tenant_id: int | None = None,
    verb: str = "",
    actor: str = "",
    object_type: str = "",
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[AuditEvent]:
    """The audit log the user may read (staff: all), filtered, newest first."""
    qs = AuditEvent.objects.for_user(user).select_related("tenant").distinct()
    if tenant_id is not None:
        qs = qs.filter(tenant_id=tenant_id)
    if verb:
        qs = qs.filter(verb=verb)
    if actor:
        qs = qs.filter(actor_name__iexact=actor)
    if object_type:
        qs = qs.filter(object_type=object_type)
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    if until is not None:
        qs = qs.filter(created_at__lt=until)
    return qs.order_by("-created_at", "-id")


def audit_filter_choices(user: User) -> tuple[list[str], list[str]]:
    """The verbs and object types present in the user's audit log, for the filter drop-downs."""
    qs = AuditEvent.objects.for_user(user)
    verbs = sorted(set(qs.values_list("verb", flat=True).distinct()))
    object_types = sorted(set(qs.values_list("object_type", flat=True).distinct()))
    return verbs, object_types


__all__ = [
    "AllocationActions",
    "GpuModelChoice",
    "PendingApproval",
    "StatusFilter",
    "allocation_actions",
    "api_tokens_for_user",
    "audit_events_for_user",
    "audit_filter_choices",
    "gpu_model_choices",
    "managed_tenants",
    "memberships_of",
    "pending_approvals_with_balances",
    "placements_of",
    "pools_overview",
    "request_form_data",
    "request_form_pools",
    "request_form_tenants",
    "requests_for_user",
    "status_filters_for_user",
    "tenants_overview",
]
