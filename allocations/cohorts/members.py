"""A cohort's members as `accounting.MemberState` rows, read from their quota rows (issue 15).

Reads only. The services that charge quota lock the cohort row first (services/locks.lock_cohort), so the rows
read here cannot gain usage meanwhile; usage only drops under a reader, which leaves its answer on the safe side.
"""

from __future__ import annotations

from django.db.models import F

from allocations.cohorts.accounting import Admission, MemberState, admit_within, borrow_ceiling
from allocations.models import Quota


def member_state(quota: Quota, *, less_compute: int = 0, less_memory: int = 0) -> MemberState:
    return MemberState(
        tenant_id=quota.tenant_id,
        guarantee_compute=quota.compute_slices_limit,
        guarantee_memory=quota.memory_slices_limit,
        used_compute=quota.compute_slices_used - less_compute,
        used_memory=quota.memory_slices_used - less_memory,
        borrowing_compute_limit=quota.borrowing_compute_limit,
        borrowing_memory_limit=quota.borrowing_memory_limit,
        lending_compute_limit=quota.lending_compute_limit,
        lending_memory_limit=quota.lending_memory_limit,
    )


def member_states(cohort_id: int) -> list[MemberState]:
    """Every member of the cohort (quota rows of the cohort's pool), tenant order."""
    # A quota row of another pool pointing at this cohort is a misconfiguration: it takes no part.
    quotas = Quota.objects.filter(cohort_id=cohort_id, pool_id=F("cohort__pool_id")).order_by("tenant_id")
    return [member_state(q) for q in quotas]


def cohort_admission(quota: Quota, *, compute: int, memory: int) -> Admission | None:
    """Whether the quota's tenant may take `compute` / `memory` more within guarantee plus what its cohort lends
    now, and the part it borrows (accounting.admit_within). None without a cohort or when the cohort lends too
    little."""
    if quota.cohort_id is None:
        return None
    members = member_states(quota.cohort_id)
    if all(m.tenant_id != quota.tenant_id for m in members):
        return None
    return admit_within(members, quota.tenant_id, compute, memory)


def memory_ceiling(quota: Quota) -> int:
    """The most memory slots the quota's tenant may hold in its pool: its guarantee plus the most its cohort could
    ever lend it (accounting.borrow_ceiling)."""
    if quota.cohort_id is None:
        return quota.memory_slices_limit
    members = member_states(quota.cohort_id)
    if all(m.tenant_id != quota.tenant_id for m in members):
        return quota.memory_slices_limit
    return quota.memory_slices_limit + borrow_ceiling(members, quota.tenant_id)[1]
