"""Read-only queries for views, the API and the CLI. Every one is scoped to a user."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db.models import Q

from allocations.costs import gpu_equivalents, gpu_model_for
from allocations.models import Allocation, NodePool, Quota, QuotaChangeRequest
from tenants.models import AuditEvent

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser
    from django.contrib.auth.models import User as AuthUser

    User = AuthUser | AnonymousUser


def get_allocation_for_user(user: User, pk: int) -> Allocation:
    """The allocation if the user may see it; DoesNotExist (a 404) otherwise, also for other tenants'."""
    return Allocation.objects.for_user(user).select_related("tenant", "pool", "requested_by").distinct().get(pk=pk)


def allocations_for_user(user: User) -> list[Allocation]:
    return list(Allocation.objects.for_user(user).select_related("tenant", "pool", "requested_by").distinct()[:200])


def pending_approvals_for_user(user: User) -> list[Allocation]:
    return list(
        Allocation.objects.managed_by(user)
        .filter(status=Allocation.Status.PENDING)
        .select_related("tenant", "pool", "requested_by")
        .distinct()
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
    quotas = Quota.objects.for_user(user).select_related("tenant", "pool").distinct()
    if tenant_id is not None:
        quotas = quotas.filter(tenant_id=tenant_id)
    return [balance_of(q) for q in quotas]


def pools_for_user(user: User) -> list[NodePool]:
    """Pools are visible to every signed-in user; quotas decide who can use them."""
    if not user.is_authenticated:
        return []
    return list(NodePool.objects.all())


def quota_changes_for_user(user: User, *, pending_only: bool = False) -> list[QuotaChangeRequest]:
    qs = QuotaChangeRequest.objects.for_user(user).select_related("tenant", "pool", "requested_by").distinct()
    if pending_only:
        qs = qs.filter(status=QuotaChangeRequest.Status.PENDING)
    return list(qs)


def search_allocations(user: User, text: str) -> list[Allocation]:
    qs = Allocation.objects.for_user(user).select_related("tenant", "pool", "requested_by").distinct()
    if text:
        qs = qs.filter(Q(purpose__icontains=text) | Q(claim_name__icontains=text) | Q(profile__icontains=text))
    return list(qs[:200])
