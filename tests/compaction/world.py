"""A small pool whose layout the compaction tests set slot by slot: one node, three H100s."""

from __future__ import annotations

from dataclasses import dataclass

from allocations import services
from allocations.costs import gpu_model_for
from allocations.models import Allocation, Gpu, NodePool, SlicePlacement
from allocations.placement import dra_device_name
from tests.conftest import H100, World


@dataclass
class Small:
    world: World
    pool: NodePool

    def gpu(self, index: int) -> Gpu:
        return Gpu.objects.get(node__pool=self.pool, index=index)

    def approved(self, profile: str, *, purpose: str = "needs room") -> Allocation:
        """A request of alice's for one `profile`, approved by mallory where the policy left it pending; not
        provisioned (the object as requested: its status is not read again)."""
        allocation, _ = services.request_allocation(
            tenant_id=self.world.tenant_a.pk,
            pool_id=self.pool.pk,
            profile=profile,
            count=1,
            lease_hours=4,
            purpose=purpose,
            actor=self.world.alice,
        )
        if allocation.status == Allocation.Status.PENDING:
            services.approve_allocation(allocation_id=allocation.pk, actor=self.world.mallory)
        return allocation

    def active(self, profile: str, gpu: int, start: int, *, movable: bool = False) -> Allocation:
        """An ACTIVE request of alice's with its one slice at `gpu`:`start` (provisioned by the services, then its
        placement put at the slot the test needs: placement policy is not what these tests are about)."""
        allocation = self.approved(profile, purpose="compaction test")
        services.provision_allocation(allocation_id=allocation.pk)
        spec = gpu_model_for(H100).profile(profile)
        SlicePlacement.objects.filter(allocation=allocation).update(
            gpu=self.gpu(gpu),
            start=start,
            device_name=dra_device_name(gpu_index=gpu, profile=profile, profile_id=spec.profile_id, start=start),
        )
        Allocation.objects.filter(pk=allocation.pk).update(movable=movable)
        allocation.refresh_from_db()
        assert allocation.status == Allocation.Status.ACTIVE
        return allocation


def small_pool(world: World) -> Small:
    pool = services.create_node_pool(name="Small pool", slug="small", gpu_model=H100, actor=world.root)
    services.register_node(pool_id=pool.pk, name="small-node-0", gpu_count=3, actor=world.root)
    services.set_tenant_quota(
        tenant_id=world.tenant_a.pk, pool_id=pool.pk, compute_slices_limit=21, memory_slices_limit=24, actor=world.root
    )
    return Small(world, pool)


def where(allocation: Allocation) -> list[tuple[int, int]]:
    return sorted(SlicePlacement.objects.filter(allocation=allocation).values_list("gpu__index", "start"))
