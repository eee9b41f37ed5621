"""The portal on the test control plane with a pool of shareable whole GPUs (issue 13): a fake node of L4s in
NVIDIA's consumable-shares format, found by fleet discovery through the pool's node selector."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from functools import partial
from typing import Any

from kubernetes import client

from allocations import services
from allocations.cluster import sync as kube_sync
from allocations.cluster.fake_fleet import FakeNode, ensure_device_classes
from allocations.cluster.fake_shared import SHAREABLE_GPUS, publish_shared_node
from allocations.cluster.watcher import FleetDiscovery
from allocations.models import SHARE_PROFILE, Allocation, NodePool
from tenants.models import Tenant
from tests.conftest import World
from tests.kube.conftest import ControlPlane, ready, wait_for

L4 = "NVIDIA L4"
L4_MIB = SHAREABLE_GPUS[L4].memory_mib
RUN_LABEL = "fatia.test/run"


@dataclass
class SharedWorld:
    world: World
    pool: NodePool
    node: FakeNode
    prefix: str

    def namespace(self, slug: str) -> str:
        return f"{self.prefix}{slug}"


def make_shared_world(
    world: World,
    control_plane: ControlPlane,
    admin: client.ApiClient,
    settings: Any,
    *,
    kind: str,
    interval: str = NodePool.SharingInterval.DEFAULT,
    gpu_count: int = 2,
) -> SharedWorld:
    """A `kind` pool (shared or mps) of one fake node with `gpu_count` L4s, its GPUs discovered; quota for both
    tenants; their namespaces onboarded."""
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    settings.FATIA_KUBECONFIG = str(control_plane.portal_kubeconfig)
    settings.FATIA_KUBE_NAMESPACE_PREFIX = f"t{uuid.uuid4().hex[:6]}-"
    ensure_device_classes(admin)  # the driver's chart installs gpu.nvidia.com, which the shares' claims ask for
    run = uuid.uuid4().hex[:8]
    node = publish_shared_node(admin, L4, f"l4-{run}", gpu_count, labels={RUN_LABEL: run})
    pool = services.create_node_pool(
        name=f"L4 {kind} {run}",
        slug=f"l4-{kind}-{run}",
        gpu_model=L4,
        actor=world.root,
        kind=kind,
        node_selector=f"{RUN_LABEL}={run}",
        **({"sharing_interval": interval} if kind == NodePool.Kind.SHARED else {}),
    )
    FleetDiscovery(resync_s=3600).sync_once()
    # Every request waits for a manager, so the tests approve (and race) when they choose.
    Tenant.objects.filter(pk__in=[world.tenant_a.pk, world.tenant_b.pk]).update(auto_approve_max_compute_slices=0)
    for tenant in (world.tenant_a, world.tenant_b):
        services.set_tenant_quota(
            tenant_id=tenant.pk, pool_id=pool.pk, compute_slices_limit=1000, memory_slices_limit=100, actor=world.root
        )
    sw = SharedWorld(world, pool, node, settings.FATIA_KUBE_NAMESPACE_PREFIX)
    for tenant in (world.tenant_a, world.tenant_b):
        kube_sync.onboard_tenant(tenant_id=tenant.pk)
        ns = sw.namespace(tenant.slug)
        wait_for(f"namespace {ns} to be ready", partial(ready, admin, ns))
    return sw


def share_request(
    sw: SharedWorld, *, memory_mib: int, count: int = 1, tenant_b: bool = False, thread_percentage: int | None = None
) -> Allocation:
    """A PENDING request for `count` shares of `memory_mib`, made by the request service as a member would."""
    allocation, _ = services.request_allocation(
        tenant_id=(sw.world.tenant_b if tenant_b else sw.world.tenant_a).pk,
        pool_id=sw.pool.pk,
        profile=SHARE_PROFILE,
        count=count,
        lease_hours=2,
        purpose="shared on kube",
        actor=sw.world.charlie if tenant_b else sw.world.alice,
        memory_mib=memory_mib,
        thread_percentage=thread_percentage,
    )
    assert allocation.status == Allocation.Status.PENDING
    return allocation


def approve(sw: SharedWorld, allocation: Allocation) -> Allocation:
    """A manager's approval: mallory for Team A, a platform admin for Team B."""
    approver = sw.world.root if allocation.tenant_id == sw.world.tenant_b.pk else sw.world.mallory
    return services.approve_allocation(allocation_id=allocation.pk, actor=approver)
