"""Borrowing within a cohort (issue 15): the borrowed part of an allocation, and what a queued one holds.

A request charged above its tenant's guarantee borrows that part from its cohort (services/quotas.reserve_quota
records it in `Allocation.borrowed_*`). While a request waits in the queue it holds only the part within its
guarantee: its borrowed part goes back to the cohort when it is queued (`return_borrowed_part`) and is borrowed
again when it is admitted (`borrow_again`), so queued work never pins guarantee that others lent and that idles.
Usage counters keep counting the whole usage of every request that holds it. docs/queue.md explains the rules.
"""

from __future__ import annotations

from django.db.models import F

from allocations.cohorts.accounting import Admission
from allocations.cohorts.members import cohort_admission
from allocations.models import Allocation, Quota
from allocations.services.locks import lock_cohort, lock_quota

Status = Allocation.Status


def record_borrowed(allocation: Allocation, admission: Admission) -> None:
    """Write the borrowed part on the allocation (saved too when it has a row)."""
    allocation.borrowed_compute_slices = admission.borrowed_compute
    allocation.borrowed_memory_slices = admission.borrowed_memory
    if allocation.pk is not None:
        Allocation.objects.filter(pk=allocation.pk).update(
            borrowed_compute_slices=admission.borrowed_compute, borrowed_memory_slices=admission.borrowed_memory
        )


def held_quota(allocation: Allocation) -> tuple[int, int]:
    """What the allocation holds in its quota's counters now: all of it, except a queued request's borrowed part."""
    if allocation.status == Status.QUEUED:
        return (
            allocation.compute_slices - allocation.borrowed_compute_slices,
            allocation.memory_slices - allocation.borrowed_memory_slices,
        )
    return allocation.compute_slices, allocation.memory_slices


def return_borrowed_part(allocation: Allocation) -> None:
    """A request that borrowed is about to wait in the queue: give its borrowed part back to the cohort now.
    `borrowed_*` stays as what it will need to borrow at admission. Caller holds the allocation (then pool) lock
    and sets QUEUED in the same transaction."""
    if allocation.status == Status.QUEUED:
        return  # already given back
    compute, memory = allocation.borrowed_compute_slices, allocation.borrowed_memory_slices
    if not compute and not memory:
        return
    quota = lock_quota(tenant_id=allocation.tenant_id, pool_id=allocation.pool_id)
    if quota is None:
        return
    Quota.objects.filter(pk=quota.pk).update(
        compute_slices_used=F("compute_slices_used") - compute, memory_slices_used=F("memory_slices_used") - memory
    )


def borrow_again(allocation: Allocation) -> bool:
    """A queued request about to be admitted charges the part it gave back when queued. What it borrows is
    measured again: its tenant may have room in its own guarantee by now. False (nothing charged) when the cohort
    no longer lends enough: it stays queued. Caller holds the allocation lock, then the pool's, and (the admission
    pass, services/queue.py) the quota row already, so the cohort row it locks here comes after every quota row."""
    compute, memory = allocation.borrowed_compute_slices, allocation.borrowed_memory_slices
    if not compute and not memory:
        return True
    quota = lock_quota(tenant_id=allocation.tenant_id, pool_id=allocation.pool_id)
    if quota is None:
        return False
    if quota.cohort_id is None:  # the tenant left its cohort meanwhile: its own guarantee or nothing
        fits = quota.compute_slices_used + compute <= quota.compute_slices_limit
        fits = fits and quota.memory_slices_used + memory <= quota.memory_slices_limit
        admission: Admission | None = Admission(0, 0) if fits else None
    else:
        lock_cohort(cohort_id=quota.cohort_id)
        admission = cohort_admission(quota, compute=compute, memory=memory)
    if admission is None:
        return False
    Quota.objects.filter(pk=quota.pk).update(
        compute_slices_used=F("compute_slices_used") + compute, memory_slices_used=F("memory_slices_used") + memory
    )
    record_borrowed(allocation, admission)
    return True
