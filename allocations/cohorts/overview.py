"""Reads for the cohort surfaces (API, CLI, admin page): which cohorts a user may see, and each member's guarantee,
use, borrowed part and what it could lend now.

Tenancy: platform admins see every cohort and every member. Anyone else sees the cohorts of the pools where one of
their tenants has quota, and in them only their own tenants' member rows (the cohort's totals, not the other
tenants' figures).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db.models import Q, QuerySet, Sum

from allocations.cohorts.capacity import overcommit_warning, pool_capacity
from allocations.models import Allocation, Cohort, Quota

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User


def cohorts_for_user(user: User | AnonymousUser) -> QuerySet[Cohort]:
    if not user.is_authenticated:
        return Cohort.objects.none()
    cohorts = Cohort.objects.select_related("pool")
    if user.is_staff:
        return cohorts
    return cohorts.filter(pool__in=Quota.objects.for_user(user).values("pool_id"))


@dataclass(frozen=True)
class MemberRow:
    """One member's figures in compute slices and memory slots. `used` counts its whole use, borrowed part
    included; `lendable` is its unused guarantee within its lending limit (what others could borrow from it now)."""

    quota_id: int
    tenant_id: int
    tenant_name: str
    guarantee_compute: int
    guarantee_memory: int
    used_compute: int
    used_memory: int
    borrowed_compute: int
    borrowed_memory: int
    borrowing_compute_limit: int | None
    borrowing_memory_limit: int | None
    lending_compute_limit: int | None
    lending_memory_limit: int | None

    @property
    def lendable_compute(self) -> int:
        return _lendable(self.guarantee_compute, self.used_compute - self.borrowed_compute, self.lending_compute_limit)

    @property
    def lendable_memory(self) -> int:
        return _lendable(self.guarantee_memory, self.used_memory - self.borrowed_memory, self.lending_memory_limit)


def _lendable(guarantee: int, used_within: int, limit: int | None) -> int:
    unused = max(guarantee - used_within, 0)
    return unused if limit is None else min(unused, limit)


@dataclass(frozen=True)
class CohortView:
    cohort: Cohort
    members: list[MemberRow]  # those the viewer may see
    member_count: int  # all of them
    borrowed_compute: int  # by all members (= what the lenders have lent in total)
    borrowed_memory: int
    # Non-empty when the members' guarantees may not fit the pool at once (allocations/cohorts/capacity.py).
    overcommit_warning: str = ""


def cohort_views(cohorts: Iterable[Cohort], user: User | AnonymousUser) -> list[CohortView]:
    """Each cohort with its members: two queries for any number of cohorts."""
    cohorts = list(cohorts)
    quotas = list(Quota.objects.filter(cohort__in=cohorts).select_related("tenant").order_by("tenant__name", "pk"))
    borrowed = (
        {
            (row["tenant_id"], row["pool_id"]): (row["compute"] or 0, row["memory"] or 0)
            for row in Allocation.objects.filter(status__in=Allocation.QUOTA_HOLDING)
            .filter(_any_of((q.tenant_id, q.pool_id) for q in quotas))
            .values("tenant_id", "pool_id")
            .annotate(compute=Sum("borrowed_compute_slices"), memory=Sum("borrowed_memory_slices"))
        }
        if quotas
        else {}
    )
    visible = None if user.is_staff else set(Quota.objects.for_user(user).values_list("pk", flat=True))
    views = []
    capacities = {c.pool_id: pool_capacity(c.pool) for c in cohorts}
    for cohort in cohorts:
        rows = [_row(q, borrowed.get((q.tenant_id, q.pool_id), (0, 0))) for q in quotas if q.cohort_id == cohort.pk]
        compute = sum(r.guarantee_compute for r in rows)
        memory = sum(r.guarantee_memory for r in rows)
        views.append(
            CohortView(
                cohort=cohort,
                members=[r for r in rows if visible is None or r.quota_id in visible],
                member_count=len(rows),
                borrowed_compute=sum(r.borrowed_compute for r in rows),
                borrowed_memory=sum(r.borrowed_memory for r in rows),
                overcommit_warning=overcommit_warning(capacities[cohort.pool_id], compute, memory),
            )
        )
    return views


def _any_of(pairs: Iterable[tuple[int, int]]) -> Q:
    found = Q(pk__in=[])
    for tenant_id, pool_id in set(pairs):
        found |= Q(tenant_id=tenant_id, pool_id=pool_id)
    return found


def _row(quota: Quota, borrowed: tuple[int, int]) -> MemberRow:
    return MemberRow(
        quota_id=quota.pk,
        tenant_id=quota.tenant_id,
        tenant_name=quota.tenant.name,
        guarantee_compute=quota.compute_slices_limit,
        guarantee_memory=quota.memory_slices_limit,
        used_compute=quota.compute_slices_used,
        used_memory=quota.memory_slices_used,
        borrowed_compute=borrowed[0],
        borrowed_memory=borrowed[1],
        borrowing_compute_limit=quota.borrowing_compute_limit,
        borrowing_memory_limit=quota.borrowing_memory_limit,
        lending_compute_limit=quota.lending_compute_limit,
        lending_memory_limit=quota.lending_memory_limit,
    )
