"""Requests made active through the services, for tests that start from a running allocation."""

from __future__ import annotations

from typing import Any

from allocations import services
from allocations.models import Allocation, NodePool
from tests.conftest import World


def active_request(
    world: World,
    *,
    pool: NodePool | None = None,
    profile: str = "1g.10gb",
    count: int = 1,
    lease_hours: int = 8,
    purpose: str = "serving",
    memory_mib: int | None = None,
    actor: Any = None,
) -> Allocation:
    """Team A's request (alice's unless `actor` is given) in `pool` (the world's MIG pool by default), approved by
    root where the tenant's policy left it pending, and provisioned on the simulated fleet."""
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=(pool or world.pool).pk,
        profile=profile,
        count=count,
        lease_hours=lease_hours,
        purpose=purpose,
        memory_mib=memory_mib,
        actor=actor or world.alice,
    )
    if allocation.status == Allocation.Status.PENDING:
        services.approve_allocation(allocation_id=allocation.pk, actor=world.root)
    return services.provision_allocation(allocation_id=allocation.pk)


def shared_l4_pool(world: World) -> NodePool:
    """A time-sliced pool of one node with two L4 GPUs, where Team A may hold 200 % of a GPU and 64 GiB."""
    l4 = services.create_node_pool(name="L4", slug="l4", gpu_model="NVIDIA L4", kind="shared", actor=world.root)
    services.register_node(pool_id=l4.pk, name="l4-node-0", gpu_count=2, actor=world.root)
    services.set_tenant_quota(
        tenant_id=world.tenant_a.pk, pool_id=l4.pk, compute_slices_limit=200, memory_slices_limit=64, actor=world.root
    )
    return l4
