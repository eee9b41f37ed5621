"""Provisioning in a shared or MPS pool on the Kubernetes backend: shares of whole GPUs, placed by memory.

Called by sync.start_provisioning under the allocation's and the pool's locks (lock order: allocation, then pool),
so two workers never give the same free memory to two requests: the placement reads every live share of the
pool's GPUs under the pool lock. `start_shared_claims` records the placements and moves the request to
PROVISIONING; sync.py then applies one claim per share and the holder pod (allocations/cluster/shared_claims.py),
and kube-scheduler allocates them, or leaves a claim that does not fit unallocated (it never over-commits a GPU's
memory either).
"""

from __future__ import annotations

from django.db.models import Sum

from allocations.models import SHARE_PROFILE, Allocation, ClaimedDevice, Gpu, Node, NodePool, SlicePlacement
from allocations.services.lifecycle import fail_locked_allocation
from tenants.services import record_audit_event

Status = Allocation.Status


def provision_shared(*, allocation: Allocation, pool: NodePool) -> Allocation:
    """APPROVED -> PROVISIONING with one placement per share, or -> FAILED (quota freed) when no node of the pool
    has room for every share now. Caller holds the allocation's and the pool's locks, in that order."""
    placements = first_fit_shares(pool=pool, allocation=allocation)
    if placements is None:
        return fail_locked_allocation(
            allocation,
            f"No room in {pool.name} for {allocation.count} x {allocation.memory_mib} MiB on one node right now; "
            "the quota was given back. Try fewer or smaller shares.",
        )
    start_shared_claims(allocation, placements)
    return allocation


def free_memory_by_gpu(gpus: list[Gpu]) -> dict[int, int]:
    """Each GPU's memory (MiB) not held by a live share of the portal's nor by a claim made outside it."""
    ids = [g.pk for g in gpus]
    held = dict(
        SlicePlacement.objects.filter(gpu_id__in=ids, allocation__status__in=Allocation.QUOTA_HOLDING)
        .values("gpu_id")
        .annotate(mib=Sum("memory_mib"))
        .values_list("gpu_id", "mib")
    )
    outside = dict(
        ClaimedDevice.objects.filter(gpu_id__in=ids, allocation_uuid__isnull=True)
        .values("gpu_id")
        .annotate(mib=Sum("consumed_memory_mib"))
        .values_list("gpu_id", "mib")
    )
    return {g.pk: (g.memory_mib or 0) - (held.get(g.pk) or 0) - (outside.get(g.pk) or 0) for g in gpus}


def first_fit_shares(*, pool: NodePool, allocation: Allocation) -> list[SlicePlacement] | None:
    """STAND-IN for sharedcore's packing (allocations/sharing/packing.py, place_shares), which the merge puts
    here: the first ready node (by name) whose GPUs (by index) take every share of `memory_mib`, first fit, a
    GPU taking several shares while it has room. Unsaved placements, or None when no node has room. It neither
    spreads tenants that avoid co-tenants nor keeps whole GPUs free; the packing does. Caller holds the pool lock.
    """
    size = allocation.memory_mib or 0
    if size <= 0:
        return None
    gpus = list(
        Gpu.objects.filter(node__pool=pool, node__state=Node.State.READY, memory_mib__isnull=False)
        .select_related("node")
        .order_by("node__name", "index")
    )
    free = free_memory_by_gpu(gpus)
    by_node: dict[int, list[Gpu]] = {}
    for gpu in gpus:
        by_node.setdefault(gpu.node_id, []).append(gpu)
    for node_gpus in by_node.values():
        left = {g.pk: free[g.pk] for g in node_gpus}
        chosen: list[Gpu] = []
        for _ in range(allocation.count):
            fitting = next((g for g in node_gpus if left[g.pk] >= size), None)
            if fitting is None:
                break
            left[fitting.pk] -= size
            chosen.append(fitting)
        if len(chosen) == allocation.count:
            return [SlicePlacement(allocation=allocation, gpu=g, memory_mib=size) for g in chosen]
    return None


def start_shared_claims(allocation: Allocation, placements: list[SlicePlacement]) -> None:
    """APPROVED -> PROVISIONING for shares of whole GPUs: the placements (each a GPU and the memory its share
    takes) saved as shares (profile SHARE_PROFILE, no slot), the first claim named, the step audited with the
    plan. The caller holds the allocation's and the pool's locks and applies the claims after commit
    (sync.provision_on_cluster)."""
    SlicePlacement.objects.bulk_create(
        [
            SlicePlacement(
                allocation=allocation,
                gpu=p.gpu,
                profile=SHARE_PROFILE,
                start=0,
                size=0,
                device_name=f"gpu-{p.gpu.index}",
                memory_mib=p.memory_mib,
            )
            for p in placements
        ]
    )
    allocation.status = Status.PROVISIONING
    allocation.claim_name = allocation.kube_claim_names[0]
    allocation.status_message = "Waiting for the cluster to allocate the shares."
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
            "plan": [f"{p.gpu.node.name}/gpu-{p.gpu.index}:{p.memory_mib}MiB" for p in placements],
        },
    )
