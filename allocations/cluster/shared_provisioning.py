"""Provisioning in a shared or MPS pool on the Kubernetes backend: shares of whole GPUs, placed by memory.

Called by sync.start_provisioning under the allocation's and the pool's locks (lock order: allocation, then pool),
so two workers never give the same free memory to two requests: the placement reads every live share of the
pool's GPUs under the pool lock. `start_claiming` (services/lifecycle.py, as for MIG) records the placements and
moves the request to PROVISIONING; sync.py then applies one claim per share and the holder pod
(allocations/cluster/shared_claims.py), and kube-scheduler allocates them, or leaves a claim that does not fit
unallocated (it never over-commits a GPU's memory either).
"""

from __future__ import annotations

from allocations.models import Allocation, NodePool
from allocations.placement import PlannedSlice
from allocations.services.lifecycle import fail_locked_allocation, start_claiming
from allocations.share_placement import planned_shares, read_shared_pool, share_request_of
from allocations.sharing.packing import place_shares

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
    start_claiming(allocation=allocation, slices=placements, audit={})
    return allocation


def place_on_one_node(*, pool: NodePool, allocation: Allocation) -> list[PlannedSlice] | None:
    """The portal's packing (allocations/share_placement.py: best fit by memory on GPUs already shared, whole GPUs
    kept free, tenants that avoid co-tenants kept apart), with one rule more on Kubernetes: every share of a
    request on ONE node, because the request's one holder pod references all its claims. The packing over the
    whole pool first; when it spreads over nodes, the first node (by name) that takes them all. None when no node
    has room. Caller holds the pool lock."""
    gpus, positions = read_shared_pool(pool)
    request = share_request_of(allocation, pool)
    slots = place_shares(gpus, request)
    if slots is not None and len({positions[s.gpu_id][0] for s in slots}) > 1:
        slots = None
        for node in sorted({name for name, _ in positions.values()}):
            slots = place_shares([g for g in gpus if positions[g.gpu_id][0] == node], request)
            if slots is not None:
                break
    return None if slots is None else planned_shares(slots, positions)
