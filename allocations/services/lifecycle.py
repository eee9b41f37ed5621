"""The end states every cluster backend records: where the slices went, a release finished, a failure.

Both the simulated backend (services/provisioning.py) and the Kubernetes backend (cluster/sync.py) call these,
so neither backend calls back into the other's module.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from allocations.models import Allocation, SlicePlacement
from allocations.placement import PlannedSlice, layout_changed
from allocations.services.locks import lock_allocation
from allocations.services.queue_trigger import request_admission
from allocations.services.quotas import free_quota
from tenants.services import record_audit_event

Status = Allocation.Status


def record_placements(*, allocation: Allocation, slices: list[PlannedSlice]) -> None:
    """Save the planned slices of an allocation; the caller holds its pool's lock."""
    layout_changed(allocation.pool_id)  # a layout read once per try (placement.read_once_per_try) is stale now
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
                memory_mib=s.memory_mib,
            )
            for s in slices
        ]
    )


def planned_where(planned: PlannedSlice) -> str:
    """Where a planned slice goes, for the audit: node/gpu-<index>:<start>+<size>, or :<MiB>MiB for a share."""
    if planned.memory_mib is not None:
        return f"{planned.node_name}/gpu-{planned.gpu_index}:{planned.memory_mib}MiB"
    return f"{planned.node_name}/gpu-{planned.gpu_index}:{planned.start}+{planned.size}"


def start_claiming(*, allocation: Allocation, slices: list[PlannedSlice], audit: dict[str, object]) -> None:
    """APPROVED -> PROVISIONING on the Kubernetes backend: the planned slices saved, the first claim named, and the
    step audited with the plan (plus what the caller adds in `audit`). The caller holds the allocation's and the
    pool's locks."""
    record_placements(allocation=allocation, slices=slices)
    allocation.status = Status.PROVISIONING
    allocation.claim_name = allocation.kube_claim_names[0]
    allocation.status_message = "Waiting for the cluster to allocate the slices."
    allocation.save(update_fields=["status", "claim_name", "status_message", "updated_at"])
    record_audit_event(
        actor=None,
        verb="provision",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        before={"status": Status.APPROVED},
        after={
            "status": Status.PROVISIONING,
            "claim": allocation.claim_name,
            **({"claims": allocation.claim_names} if len(allocation.claim_names) > 1 else {}),
            "plan": [planned_where(s) for s in slices],
            **audit,
        },
    )


@transaction.atomic
def finish_release(*, allocation_id: int) -> Allocation:
    """RELEASING -> RELEASED or EXPIRED: delete the placements and give the quota back. Idempotent."""
    allocation = lock_allocation(allocation_id=allocation_id)
    if allocation.status != Status.RELEASING:
        return allocation
    SlicePlacement.objects.filter(allocation=allocation).delete()
    free_quota(allocation=allocation)
    request_admission(pool_id=allocation.pool_id)  # its slots are free: the queue may fit now
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
    return fail_locked_allocation(allocation, reason)


def fail_locked_allocation(allocation: Allocation, reason: str) -> Allocation:
    """-> FAILED with `reason`, freeing quota and placements once; the caller holds the allocation's lock."""
    previous = allocation.status
    if previous in Allocation.QUOTA_HOLDING:
        layout_changed(allocation.pool_id)  # as record_placements: a try's layout read once is stale once they go
        deleted, _ = SlicePlacement.objects.filter(allocation=allocation).delete()
        free_quota(allocation=allocation)
        if deleted:
            request_admission(pool_id=allocation.pool_id)  # failure cleanup freed slots
    allocation.status = Status.FAILED
    allocation.held = False  # a held request that fails waits no more (issue 14)
    allocation.status_message = reason
    allocation.ended_at = timezone.now()
    allocation.save(update_fields=["status", "held", "status_message", "ended_at", "updated_at"])
    record_audit_event(
        actor=None,
        verb="fail",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        before={"status": previous},
        after={"status": Status.FAILED, "reason": reason},
    )
    return allocation
