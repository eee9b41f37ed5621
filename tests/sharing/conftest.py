"""A time-sliced pool of L4 GPUs and an MPS pool of L40S GPUs next to the MIG pool of tests/conftest.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from allocations import services
from allocations.models import NodePool
from tenants import services as tenant_services
from tests.conftest import World


@dataclass
class Shared:
    world: World
    l4: NodePool  # time-sliced, 2 nodes x 2 GPUs
    mps: NodePool  # MPS, 1 node x 2 GPUs


@pytest.fixture
def shared(world: World, db: Any) -> Shared:
    root = world.root
    l4 = services.create_node_pool(name="L4 shared", slug="l4-shared", gpu_model="NVIDIA L4", kind="shared", actor=root)
    mps = services.create_node_pool(name="L40S MPS", slug="l40s-mps", gpu_model="NVIDIA L40S", kind="mps", actor=root)
    for n in range(2):
        services.register_node(pool_id=l4.pk, name=f"l4-node-{n}", gpu_count=2, actor=root)
    services.register_node(pool_id=mps.pk, name="l40s-node-0", gpu_count=2, actor=root)
    for tenant in (world.tenant_a, world.tenant_b):
        for pool in (l4, mps):
            # 200 % of a GPU and 64 GiB each
            services.set_tenant_quota(
                tenant_id=tenant.pk, pool_id=pool.pk, compute_slices_limit=200, memory_slices_limit=64, actor=root
            )
    # Team A auto-approves up to two GPUs' worth (14 compute slices of 7); Team B keeps the default 2 (2/7 GPU).
    tenant_services.update_tenant_policy(tenant_id=world.tenant_a.pk, actor=root, auto_approve_max_compute_slices=14)
    return Shared(world, l4, mps)
