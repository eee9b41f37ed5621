"""Turning an approved request into slices on GPUs, and taking them away again.

The portal chooses the GPU and slot itself (fragmentation-aware placement, allocations/mig), records
the choice, then realises it on the cluster backend. The simulated backend (demo, unit tests) has
nothing to build, so the request becomes ACTIVE in the same transaction; the Kubernetes backend
(allocations/cluster/sync.py) applies a ResourceClaim and a holder pod instead. The end states both backends
record (placements saved, release finished, failure) are in services/lifecycle.py.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from allocations.admission.hold import Hold, plan_or_hold, plans_forced
from allocations.cohorts.fence import place_around
from allocations.models import Allocation, NodePool
from allocations.placement import plan_slices, read_once_per_try
from allocations.queue_reservation import reservation_blocker
from allocations.services.admission import hold_allocation
from allocations.services.cohort_reclaim import WAITING as RECLAIM_WAITING
from allocations.services.cohort_reclaim import wait_for_reclaim
from allocations.services.compaction import rescue_with_moves
from allocations.services.lifecycle import fail_locked_allocation, finish_release, planned_where, record_placements
from allocations.services.locks import lock_allocation, lock_pool
from allocations.services.queue_entry import enqueue_allocation
from allocations.share_placement import plan_shares
from tenants.services import record_audit_event

Status = Allocation.Status


def provision_allocation(*, allocation_id: int) -> Allocation:
    """APPROVED -> ACTIVE (simulated backend) or APPROVED -> PROVISIONING with the claim and holder pod
    applied (Kubernetes backend, cluster/sync.py), or -> QUEUED (quota kept, services/queue_entry.py) when the
    pool has no room.

    Idempotent: a redelivered task finds the allocation past APPROVED and does nothing more than the
    cluster backend's idempotent re-apply. Raises KubeUnavailable (retry) from the Kubernetes backend.
    """
    if settings.FATIA_CLUSTER_BACKEND == "kubernetes":
        from allocations.cluster import sync

        return sync.provision_on_cluster(allocation_id=allocation_id)
    return _provision_simulated(allocation_id=allocation_id)


def start_allocation(*, allocation_id: int) -> Allocation:
    """The placement step alone, for the queue's admission pass (services/queue.py): APPROVED -> ACTIVE on the
    simulated backend, -> PROVISIONING with placements recorded on Kubernetes (the provision task then applies the
    claim), or -> QUEUED when the pool still has no room. Same locks and raises as provision_allocation."""
    if settings.FATIA_CLUSTER_BACKEND == "kubernetes":
        from allocations.cluster import sync

        return sync.start_provisioning(allocation_id=allocation_id)
    return _provision_simulated(allocation_id=allocation_id)


def teardown_allocation(*, allocation_id: int) -> Allocation:
    """RELEASING -> RELEASED / EXPIRED: on the Kubernetes backend the holder pod and the claim are deleted
    first (404 counts as done), then finish_release. Idempotent. Raises KubeUnavailable (retry)."""
    if settings.FATIA_CLUSTER_BACKEND == "kubernetes":
        from allocations.cluster import sync

        return sync.release_on_cluster(allocation_id=allocation_id)
    return finish_release(allocation_id=allocation_id)


@transaction.atomic
def _provision_simulated(*, allocation_id: int) -> Allocation:
    """APPROVED -> ACTIVE with placements, or -> QUEUED (MIG pools; quota kept) or FAILED (shared pools; quota
    freed) when the pool has no room.

    Idempotent: anything but APPROVED is left alone, so a redelivered task does nothing.
    Locks the allocation, then the pool (placement decisions in a pool are serialised), then quota.
    """
    allocation = lock_allocation(allocation_id=allocation_id)
    if allocation.status != Status.APPROVED:
        return allocation
    pool = lock_pool(pool_id=allocation.pool_id)
    # Every step below plans on one read of the pool's layout and demand, as a queued request's try (issue 14).
    with read_once_per_try(pool):
        return _place_simulated(allocation, pool)


def _place_simulated(allocation: Allocation, pool: NodePool) -> Allocation:
    """_provision_simulated's steps, under the allocation's and the pool's locks: plan (or hold), around lenders'
    rooms, a rescue by moves, then place, queue or fail."""
    hold: Hold | None = None
    if pool.is_shared:
        slices = plan_shares(pool=pool, allocation=allocation)
        what = f"{allocation.count} x {allocation.memory_mib} MiB share"
    else:
        slices, hold = plan_or_hold(  # a pool with admission may hold it (issue 14, allocations/admission/)
            pool=pool,
            allocation=allocation,
            plan=lambda force: plan_slices(pool=pool, profile=allocation.profile, count=allocation.count, force=force),
        )
        what = f"{allocation.count} x {allocation.profile}"
    if not pool.is_shared and wait_for_reclaim(allocation):  # a lender waits for what it lent (issue 15)
        return enqueue_allocation(allocation, pool=pool, what=what, waiting_for=RECLAIM_WAITING)
    if hold is not None:
        return hold_allocation(allocation, pool=pool, what=what, hold=hold)
    slices, held = place_around(  # not in the room a reclaim frees for a lender (issue 15)
        pool=pool,
        allocation=allocation,
        slices=slices,
        replan=lambda avoid: plan_slices(
            pool=pool,
            profile=allocation.profile,
            count=allocation.count,
            avoid=avoid,
            force=plans_forced(pool, allocation),  # issue 14: not placed where the first plan would hold it
        ),
    )
    if held:
        return enqueue_allocation(allocation, pool=pool, what=what, waiting_for=held)
    if slices is None and not pool.is_shared and rescue_with_moves(allocation):
        return allocation  # compaction moves other slices first; the plan's end provisions this one again
    if not pool.is_shared:
        blocker = None if slices is None else reservation_blocker(pool=pool, allocation=allocation, slices=slices)
        if slices is None or blocker is not None:
            return enqueue_allocation(allocation, pool=pool, what=what, waiting_for=blocker or "")
    if slices is None:
        return fail_locked_allocation(
            allocation,
            f"No room in {pool.name} for {what} right now; the quota was given back. Try fewer or smaller "
            f"{'shares' if pool.is_shared else 'slices or a smaller profile'}.",
        )
    record_placements(allocation=allocation, slices=slices)
    now = timezone.now()
    allocation.status = Status.ACTIVE
    allocation.claim_name = allocation.kube_claim_names[0]
    allocation.activated_at = now
    # A booking's request comes with its lease end set (the window's end); others start their lease now.
    allocation.lease_expires_at = allocation.lease_expires_at or now + timedelta(hours=allocation.lease_hours)
    allocation.status_message = "Active. Put the claim name in your pod spec's resourceClaims."
    allocation.save(
        update_fields=["status", "claim_name", "activated_at", "lease_expires_at", "status_message", "updated_at"]
    )
    record_audit_event(
        actor=None,
        verb="activate",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        before={"status": Status.APPROVED},
        after={
            "status": Status.ACTIVE,
            "claim": allocation.claim_name,
            "placements": [planned_where(s) for s in slices],
        },
    )
    return allocation
