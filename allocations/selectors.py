"""Read-only queries for views, the API and the CLI. Every one is scoped to a user."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db.models import Count, Q, QuerySet, Sum

from allocations.costs import gpu_equivalents, gpu_model_for
from allocations.mig.catalog import load_catalog
from allocations.models import Allocation, NodePool, Quota, QuotaChangeRequest, SlicePlacement
from tenants.models import AuditEvent, Tenant
from tenants.selectors import can_manage_tenant

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser
    from django.contrib.auth.models import User as AuthUser

    User = AuthUser | AnonymousUser


def get_allocation_for_user(user: User, pk: int) -> Allocation:
    """The allocation if the user may see it; DoesNotExist (a 404) otherwise, also for other tenants'."""
    return Allocation.objects.for_user(user).select_related("tenant", "pool", "requested_by").get(pk=pk)


def allocations_for_user(user: User) -> list[Allocation]:
    return list(Allocation.objects.for_user(user).select_related("tenant", "pool", "requested_by")[:200])


def pending_approvals_for_user(user: User) -> list[Allocation]:
    return list(
        Allocation.objects.managed_by(user)
        .filter(status=Allocation.Status.PENDING)
        .select_related("tenant", "pool", "requested_by")
        .order_by("created_at")
    )


def allocation_timeline(allocation: Allocation) -> list[AuditEvent]:
    return list(
        AuditEvent.objects.filter(object_type="allocation", object_id=str(allocation.pk)).order_by("created_at", "id")
    )


@dataclass(frozen=True, slots=True)
class Balance:
    """A tenant's quota in one pool, with what is used and free, also in GPU-equivalents."""

    quota_id: int
    tenant_id: int
    tenant_name: str
    pool_id: int
    pool_name: str
    gpu_model: str
    compute_limit: int
    memory_limit: int
    compute_used: int
    memory_used: int
    profile_caps: dict[str, int]

    @property
    def compute_free(self) -> int:
        return max(self.compute_limit - self.compute_used, 0)

    @property
    def memory_free(self) -> int:
        return max(self.memory_limit - self.memory_used, 0)

    @property
    def gpu_equivalents_limit(self) -> float:
        return round(gpu_equivalents(gpu_model_for(self.gpu_model), self.compute_limit, self.memory_limit), 3)

    @property
    def gpu_equivalents_used(self) -> float:
        return round(gpu_equivalents(gpu_model_for(self.gpu_model), self.compute_used, self.memory_used), 3)

    @property
    def gpu_equivalents_free(self) -> float:
        return round(gpu_equivalents(gpu_model_for(self.gpu_model), self.compute_free, self.memory_free), 3)


def balance_of(quota: Quota) -> Balance:
    return Balance(
        quota_id=quota.pk,
        tenant_id=quota.tenant_id,
        tenant_name=quota.tenant.name,
        pool_id=quota.pool_id,
        pool_name=quota.pool.name,
        gpu_model=quota.pool.gpu_model,
        compute_limit=quota.compute_slices_limit,
        memory_limit=quota.memory_slices_limit,
        compute_used=quota.compute_slices_used,
        memory_used=quota.memory_slices_used,
        profile_caps=dict(quota.profile_caps),
    )


def balances_for_user(user: User, tenant_id: int | None = None) -> list[Balance]:
    quotas = Quota.objects.for_user(user).select_related("tenant", "pool")
    if tenant_id is not None:
        quotas = quotas.filter(tenant_id=tenant_id)
    return [balance_of(q) for q in quotas]


def quota_shortfall(*, quota: Quota | None, allocation: Allocation) -> str | None:
    """Why the allocation does not fit the (locked) quota right now, or None when it fits."""
    if quota is None:
        return f"The tenant has no quota in pool {allocation.pool.slug}."
    free_compute = quota.compute_slices_limit - quota.compute_slices_used
    free_memory = quota.memory_slices_limit - quota.memory_slices_used
    if allocation.compute_slices > free_compute:
        return (
            f"Needs {allocation.compute_slices} compute slices; {max(free_compute, 0)} of "
            f"{quota.compute_slices_limit} are free."
        )
    if allocation.memory_slices > free_memory:
        return (
            f"Needs {allocation.memory_slices} memory slots; {max(free_memory, 0)} of "
            f"{quota.memory_slices_limit} are free."
        )
    cap = quota.profile_caps.get(allocation.profile)
    if cap is not None:
        held = (
            Allocation.objects.holding_quota()
            .filter(tenant_id=allocation.tenant_id, pool_id=allocation.pool_id, profile=allocation.profile)
            .exclude(pk=allocation.pk)
            .aggregate(n=Sum("count"))["n"]
            or 0
        )
        if held + allocation.count > cap:
            return f"The tenant may hold at most {cap} x {allocation.profile}; {held} are held."
    return None


def pools_for_user(user: User) -> list[NodePool]:
    """Pools are visible to every signed-in user; quotas decide who can use them."""
    if not user.is_authenticated:
        return []
    return list(NodePool.objects.all())


def quota_changes_for_user(user: User, *, pending_only: bool = False) -> list[QuotaChangeRequest]:
    qs = QuotaChangeRequest.objects.for_user(user).select_related("tenant", "pool", "requested_by")
    if pending_only:
        qs = qs.filter(status=QuotaChangeRequest.Status.PENDING)
    return list(qs)


def search_allocations(user: User, text: str) -> list[Allocation]:
    qs = Allocation.objects.for_user(user).select_related("tenant", "pool", "requested_by")
    if text:
        qs = qs.filter(Q(purpose__icontains=text) | Q(claim_name__icontains=text) | Q(profile__icontains=text))
    return list(qs[:200])


# Shapes for the browser pages.

Status = Allocation.Status
RELEASABLE = (Status.PENDING, Status.APPROVED, Status.PROVISIONING, Status.ACTIVE)


@dataclass(frozen=True, slots=True)
class StatusFilter:
    value: str
    label: str
    count: int


def requests_for_user(user: User, *, status: str | None = None) -> list[Allocation]:
    """The user's tenants' requests, newest first, optionally of one status (at most 200)."""
    qs = Allocation.objects.for_user(user).select_related("tenant", "pool", "requested_by")
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


def gpu_equivalents_of(allocation: Allocation) -> float:
    """The share of whole GPUs the request costs: max(compute / GPU's compute, memory / GPU's memory)."""
    return gpu_equivalents(
        gpu_model_for(allocation.pool.gpu_model), allocation.compute_slices, allocation.memory_slices
    )


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
        .order_by("created_at", "id")
    )
    quotas = {
        (q.tenant_id, q.pool_id): q
        for q in Quota.objects.filter(tenant_id__in={a.tenant_id for a in pending}).select_related("tenant", "pool")
    }
    rows = []
    for allocation in pending:
        quota = quotas.get((allocation.tenant_id, allocation.pool_id))
        rows.append(
            PendingApproval(
                allocation=allocation,
                balance=balance_of(quota) if quota is not None else None,
                gpu_equivalents=gpu_equivalents_of(allocation),
                shortfall=quota_shortfall(quota=quota, allocation=allocation),
            )
        )
    return rows


def request_form_tenants(user: User) -> QuerySet[Tenant]:
    return Tenant.objects.for_user(user).order_by("name")


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
            "held": {profile: n for (t, p, profile), n in held.items() if t == q.tenant_id and p == q.pool_id},
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
