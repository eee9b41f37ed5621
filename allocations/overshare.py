"""Tenants using more GPU memory than their shares on time-sliced GPUs, from the node agents' telemetry.

Time-slicing sets no memory limit (MPS pins one per client, MIG partitions the memory), so a tenant can take more
than its share and starve the others. The agent reports memory in use per GPU, not per process or pod (a GPU
without MIG has no MIG device to attribute it to), so the check is per GPU: memory in use above the memory its
live shares hold is over-use. With one tenant on the GPU that tenant is named; with several, each of them is
flagged as on an over-used GPU, since the report cannot tell whose process took the excess.
"""

from __future__ import annotations

from dataclasses import dataclass

from allocations.models import Allocation, NodePool, SlicePlacement
from allocations.nodeagent.models import DeviceState


@dataclass(frozen=True, slots=True)
class OverShare:
    gpu_id: int
    used_mib: int
    shared_mib: int
    tenant_ids: frozenset[int]

    @property
    def excess_mib(self) -> int:
        return self.used_mib - self.shared_mib

    @property
    def single_tenant(self) -> bool:
        return len(self.tenant_ids) == 1


def over_shared_gpus(*, gpu_ids: set[int] | None = None) -> dict[int, OverShare]:
    """Per GPU of a time-sliced pool whose reported memory in use passes what its live shares hold."""
    rows = SlicePlacement.objects.filter(
        allocation__status__in=Allocation.QUOTA_HOLDING,
        allocation__pool__kind=NodePool.Kind.SHARED,
        memory_mib__isnull=False,
    )
    if gpu_ids is not None:
        rows = rows.filter(gpu_id__in=gpu_ids)
    held: dict[int, int] = {}
    tenants: dict[int, set[int]] = {}
    for gpu_id, mib, tenant_id in rows.values_list("gpu_id", "memory_mib", "allocation__tenant_id"):
        held[gpu_id] = held.get(gpu_id, 0) + int(mib or 0)
        tenants.setdefault(gpu_id, set()).add(tenant_id)
    if not held:
        return {}
    used: dict[int, int] = {}
    for gpu_id, mib in DeviceState.objects.filter(
        kind=DeviceState.Kind.GPU, gpu_id__in=list(held), memory_used_mib__isnull=False
    ).values_list("gpu_id", "memory_used_mib"):
        if gpu_id is not None and mib is not None:
            used[gpu_id] = mib
    return {
        gpu_id: OverShare(gpu_id, used[gpu_id], held[gpu_id], frozenset(tenants[gpu_id]))
        for gpu_id in held
        if gpu_id in used and used[gpu_id] > held[gpu_id]
    }


def over_share_of(allocation: Allocation) -> OverShare | None:
    """The over-used GPU one of the allocation's shares is on, if any (the request page's flag)."""
    if allocation.pool.kind != NodePool.Kind.SHARED:
        return None
    gpu_ids = set(allocation.placements.values_list("gpu_id", flat=True))
    found = over_shared_gpus(gpu_ids=gpu_ids)
    return next(iter(sorted(found.values(), key=lambda o: o.gpu_id)), None)


def over_share_counts(tenant_ids: set[int] | None = None) -> dict[int, int]:
    """Per tenant: over-used time-sliced GPUs it holds a share on now (showback's count)."""
    counts: dict[int, int] = {}
    for found in over_shared_gpus().values():
        for tenant_id in found.tenant_ids:
            if tenant_ids is None or tenant_id in tenant_ids:
                counts[tenant_id] = counts.get(tenant_id, 0) + 1
    return counts
