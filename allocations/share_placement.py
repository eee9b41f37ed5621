"""Where a request's shares go in a time-sliced or MPS pool: the pool's GPUs and the shares live requests hold,
read from the database, handed to the pure packing (allocations/sharing/packing.py), and the chosen GPUs turned
back into planned slices (start and size 0, `memory_mib` set).

Callers hold the pool's row lock (services/locks.py: lock_pool), so the shares read here cannot change before the
chosen placements are saved; concurrent approvals in one pool therefore never over-commit a GPU.
"""

from __future__ import annotations

from django.db.models import Sum

from allocations.models import Allocation, ClaimedDevice, NodePool, SlicePlacement
from allocations.models import Gpu as GpuRow
from allocations.models import Node as NodeRow
from allocations.placement import PlannedSlice
from allocations.sharing.catalog import shared_model
from allocations.sharing.packing import GpuShares, ShareRequest, ShareSlot, place_shares


def shared_device_name(gpu_index: int) -> str:
    """NVIDIA's DRA driver names a whole GPU device gpu-<index>; every share of it is a claim on that device."""
    return f"gpu-{gpu_index}"


def read_shared_pool(pool: NodePool) -> tuple[list[GpuShares], dict[int, tuple[str, int]]]:
    """The pool's ready GPUs with the memory, thread share and tenants of the shares on them, and each GPU's
    (node name, index). Claims made outside the portal count with the memory they consumed (a whole GPU when the
    cluster did not say)."""
    gpu_memory = shared_model(pool.gpu_model).memory_mib
    gpus = list(
        GpuRow.objects.filter(node__pool=pool, node__state=NodeRow.State.READY)
        .order_by("node__name", "index")
        .values_list("pk", "node__name", "index")
    )
    memory: dict[int, int] = {}
    threads: dict[int, int] = {}
    tenants: dict[int, set[int]] = {}
    exclusive: dict[int, set[int]] = {}
    rows = SlicePlacement.objects.filter(
        gpu__node__pool=pool, allocation__status__in=Allocation.QUOTA_HOLDING
    ).values_list(
        "gpu_id",
        "memory_mib",
        "allocation__thread_percentage",
        "allocation__tenant_id",
        "allocation__tenant__avoid_co_tenants",
    )
    for gpu_id, mib, thread_pct, tenant_id, avoids in rows:
        memory[gpu_id] = memory.get(gpu_id, 0) + (mib or gpu_memory)
        threads[gpu_id] = threads.get(gpu_id, 0) + (thread_pct or 0)
        tenants.setdefault(gpu_id, set()).add(tenant_id)
        if avoids:
            exclusive.setdefault(gpu_id, set()).add(tenant_id)
    outside = (
        ClaimedDevice.objects.outside_fatia()
        .filter(gpu__node__pool=pool)
        .values("gpu_id")
        .annotate(mib=Sum("consumed_memory_mib"))
        .order_by()
    )
    for row in outside:
        if row["gpu_id"] is not None:
            memory[row["gpu_id"]] = memory.get(row["gpu_id"], 0) + (row["mib"] or gpu_memory)
    shares = [
        GpuShares(
            gpu_id=pk,
            order=(node, index),
            memory_mib=gpu_memory,
            used_memory_mib=min(memory.get(pk, 0), gpu_memory),
            used_thread_percentage=min(threads.get(pk, 0), 100),
            tenants=frozenset(tenants.get(pk, set())),
            exclusive_tenants=frozenset(exclusive.get(pk, set())),
        )
        for pk, node, index in gpus
    ]
    return shares, {pk: (node, index) for pk, node, index in gpus}


def share_request_of(allocation: Allocation, pool: NodePool) -> ShareRequest:
    """The packing's view of a request for shares."""
    return ShareRequest(
        tenant_id=allocation.tenant_id,
        memory_mib=int(allocation.memory_mib or 0),
        count=allocation.count,
        thread_percentage=allocation.thread_percentage if pool.kind == NodePool.Kind.MPS else None,
        avoid_co_tenants=allocation.tenant.avoid_co_tenants,
    )


def plan_shares(*, pool: NodePool, allocation: Allocation) -> list[PlannedSlice] | None:
    """The GPU of each of the allocation's shares, or None when they do not all fit now."""
    gpus, positions = read_shared_pool(pool)
    slots = place_shares(gpus, share_request_of(allocation, pool))
    return None if slots is None else planned_shares(slots, positions)


def planned_shares(slots: list[ShareSlot], positions: dict[int, tuple[str, int]]) -> list[PlannedSlice]:
    """The packing's slots as planned slices: a GPU (by node name and index) and the memory, no slot."""
    return [
        PlannedSlice(
            gpu_id=slot.gpu_id,
            node_name=positions[slot.gpu_id][0],
            gpu_index=positions[slot.gpu_id][1],
            start=0,
            size=0,
            device_name=shared_device_name(positions[slot.gpu_id][1]),
            memory_mib=slot.memory_mib,
        )
        for slot in slots
    ]
