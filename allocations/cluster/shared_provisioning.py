"""Provisioning in a shared or MPS pool on the Kubernetes backend: shares of whole GPUs, placed by memory.

Called by sync.start_provisioning under the allocation's and the pool's locks (lock order: allocation, then pool),
so two workers never give the same free memory to two requests: the placement reads every live share of the
pool's GPUs under the pool lock. `start_shared_claims` records the placements and moves the request to
PROVISIONING; sync.py then applies one claim per share and the holder pod (allocations/cluster/shared_claims.py),
and kube-scheduler allocates them, or leaves a claim that does not fit unallocated (it never over-commits a GPU's
memory either).
"""

from __future__ import annotations

from allocations.models import SHARE_PROFILE, Allocation, Gpu, NodePool, SlicePlacement
from allocations.services.lifecycle import fail_locked_allocation
from allocations.share_placement import read_shared_pool, share_request_of
from allocations.sharing.packing import place_shares
from tenants.services import record_audit_event

Status = Allocation.Status


def provision_shared(*, allocation: Allocation, pool: NodePool) -> Allocation:
    """APPROVED -> PROVISIONING with one placement per share, or -> FAILED (quota freed) when no node of the pool
    has room for every share now. Caller holds the allocation's and the pool's locks, in that order."""
    placements = place_on_one_node(pool=pool, allocation=allocation)
    if placements is None:
        return fail_locked_allocation(
            allocation,
            f"No room in {pool.name} for {allocation.count} x {allocation.memory_mib} MiB on one node right now; "
            "the quota was given back. Try fewer or smaller shares.",
        )
    start_shared_claims(allocation, placements)
    return allocation


def place_on_one_node(*, pool: NodePool, allocation: Allocation) -> list[SlicePlacement] | None:
    """The portal's packing (allocations/share_placement.py: best fit by memory on GPUs already shared, whole GPUs
    kept free, tenants that avoid co-tenants kept apart), with one rule more on Kubernetes: every share of a
    request on ONE node, because the request's one holder pod references all its claims. The packing over the
    whole pool first; when it spreads over nodes, the first node (by name) that takes them all. Unsaved
    placements, or None when no node has room. Caller holds the pool lock."""
    gpus, positions = read_shared_pool(pool)
    request = share_request_of(allocation, pool)
    slots = place_shares(gpus, request)
    if slots is not None and len({positions[s.gpu_id][0] for s in slots}) > 1:
        slots = None
        for node in sorted({name for name, _ in positions.values()}):
            slots = place_shares([g for g in gpus if positions[g.gpu_id][0] == node], request)
            if slots is not None:
                break
    if slots is None:
        return None
    rows = {g.pk: g for g in Gpu.objects.filter(pk__in={s.gpu_id for s in slots}).select_related("node")}
    return [SlicePlacement(allocation=allocation, gpu=rows[s.gpu_id], memory_mib=s.memory_mib) for s in slots]


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
