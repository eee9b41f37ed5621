"""Turning an approved request into slices on GPUs, and taking them away again.

The portal chooses the GPU and slot itself (fragmentation-aware placement, allocations/mig), records
the choice, then realises it on the cluster backend. The simulated backend (demo, unit tests) has
nothing to build, so the request becomes ACTIVE in the same transaction; the Kubernetes backend
(allocations/kube.py, issue #4) applies a ResourceClaim and a holder pod instead.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from allocations.models import Allocation, SlicePlacement
from allocations.placement import PlannedSlice, plan_slices
from allocations.services.locks import lock_allocation, lock_pool
from allocations.services.quotas import free_quota
from tenants.services import record_audit_event

Status = Allocation.Status


def provision_allocation(*, allocation_id: int) -> Allocation:
    """APPROVED -> ACTIVE (simulated backend) or APPROVED -> PROVISIONING with the claim and holder pod
    applied (Kubernetes backend, services/kube_sync.py), or -> FAILED (quota freed) when the pool has no room.

    Idempotent: a redelivered task finds the allocation past APPROVED and does nothing more than the
    cluster backend's idempotent re-apply. Raises KubeUnavailable (retry) from the Kubernetes backend.
    """
    if settings.FATIA_CLUSTER_BACKEND == "kubernetes":
        from allocations.services import kube_sync

        return kube_sync.provision_on_cluster(allocation_id=allocation_id)
    return _provision_simulated(allocation_id=allocation_id)


def teardown_allocation(*, allocation_id: int) -> Allocation:
    """RELEASING -> RELEASED / EXPIRED: on the Kubernetes backend the holder pod and the claim are deleted
    first (404 counts as done), then finish_release. Idempotent. Raises KubeUnavailable (retry)."""
    if settings.FATIA_CLUSTER_BACKEND == "kubernetes":
        from allocations.services import kube_sync

        return kube_sync.release_on_cluster(allocation_id=allocation_id)
    return finish_release(allocation_id=allocation_id)


@transaction.atomic
def _provision_simulated(*, allocation_id: int) -> Allocation:
    """APPROVED -> ACTIVE with placements, or -> FAILED (quota freed) when the pool has no room.

    Idempotent: anything but APPROVED is left alone, so a redelivered task does nothing.
    Locks the allocation, then the pool (placement decisions in a pool are serialised), then quota.
    """
    allocation = lock_allocation(allocation_id=allocation_id)
    if allocation.status != Status.APPROVED:
        return allocation
    pool = lock_pool(pool_id=allocation.pool_id)
    slices = plan_slices(pool=pool, profile=allocation.profile, count=allocation.count)
    if slices is None:
        return _fail(
            allocation,
            f"No room in {pool.name} for {allocation.count} x {allocation.profile} right now; "
            "the quota was given back. Try fewer slices or a smaller profile.",
        )
    record_placements(allocation=allocation, slices=slices)
    now = timezone.now()
    allocation.status = Status.ACTIVE
    allocation.claim_name = allocation.kube_name
    allocation.activated_at = now
    allocation.lease_expires_at = now + timedelta(hours=allocation.lease_hours)
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
            "placements": [f"{s.node_name}/gpu-{s.gpu_index}:{s.start}+{s.size}" for s in slices],
        },
    )
    return allocation


def record_placements(*, allocation: Allocation, slices: list[PlannedSlice]) -> None:
    """Save the planned slices of an allocation; the caller holds its pool's lock."""
    SlicePlacement.objects.bulk_create(
        [
            SlicePlacement(
                allocation=allocation,
                gpu_id=s.gpu_id,
                profile=allocation.profile,
                start=s.start,
                size=s.size,
                device_name=s.device_name,
                blocked_starts=list(s.blocked_starts),
            )
            for s in slices
        ]
    )


@transaction.atomic
def finish_release(*, allocation_id: int) -> Allocation:
    """RELEASING -> RELEASED or EXPIRED: delete the placements and give the quota back. Idempotent."""
    allocation = lock_allocation(allocation_id=allocation_id)
    if allocation.status != Status.RELEASING:
        return allocation
    SlicePlacement.objects.filter(allocation=allocation).delete()
    free_quota(allocation=allocation)
    final = allocation.end_state or Status.RELEASED
    allocation.status = final
    allocation.ended_at = timezone.now()
    allocation.status_message = "Lease ended; slices released." if final == Status.EXPIRED else "Released."
    allocation.save(update_fields=["status", "ended_at", "status_message", "updated_at"])
    record_audit_event(
        actor=None,
        verb="finish_release",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        before={"status": Status.RELEASING},
        after={"status": final},
    )
    return allocation


@transaction.atomic
def mark_allocation_failed(*, allocation_id: int, reason: str) -> Allocation:
    """Any live state -> FAILED with a message for the requester; quota is given back once."""
    allocation = lock_allocation(allocation_id=allocation_id)
    if allocation.status in Allocation.TERMINAL:
        return allocation
    return _fail(allocation, reason)


def _fail(allocation: Allocation, reason: str) -> Allocation:
    previous = allocation.status
    if previous in Allocation.QUOTA_HOLDING:
        SlicePlacement.objects.filter(allocation=allocation).delete()
        free_quota(allocation=allocation)
    allocation.status = Status.FAILED
    allocation.status_message = reason
    allocation.ended_at = timezone.now()
    allocation.save(update_fields=["status", "status_message", "ended_at", "updated_at"])
    record_audit_event(
        actor=None,
        verb="fail",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        before={"status": previous},
        after={"status": Status.FAILED, "reason": reason},
    )
    return allocation
