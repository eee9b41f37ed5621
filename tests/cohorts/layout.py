"""A cohort pool of one node with several H100s, and slices put where a test needs them (issue 15's room tests)."""

from __future__ import annotations

from allocations import services
from allocations.costs import gpu_model_for
from allocations.models import Allocation, Cohort, NodePool, Quota, SlicePlacement
from allocations.placement import dra_device_name
from tenants.models import Tenant
from tests.conftest import H100, World


def cohort_node(world: World, *, slug: str, gpus: int, a: tuple[int, int], b: tuple[int, int]) -> NodePool:
    """Given: one node of `gpus` H100s; Team A guaranteed `a` (compute, memory), Team B `b`, in one cohort with 30
    minutes of grace; both auto-approved up to a whole GPU."""
    pool = services.create_node_pool(name=f"Pool {slug}", slug=slug, gpu_model=H100, actor=world.root)
    services.register_node(pool_id=pool.pk, name=f"{slug}-node-0", gpu_count=gpus, actor=world.root)
    for tenant, (compute, memory) in ((world.tenant_a, a), (world.tenant_b, b)):
        services.set_tenant_quota(
            tenant_id=tenant.pk, pool_id=pool.pk, compute_slices_limit=compute, memory_slices_limit=memory,
            actor=world.root,
        )  # fmt: skip
    cohort = Cohort.objects.create(pool=pool, name="research", reclaim_grace_minutes=30)
    Quota.objects.filter(pool=pool).update(cohort=cohort)
    Tenant.objects.filter(pk__in=[world.tenant_a.pk, world.tenant_b.pk]).update(auto_approve_max_compute_slices=7)
    return pool


def put(pool: NodePool, allocation: Allocation, gpu: int, start: int, *, movable: bool = False) -> Allocation:
    """Given, not a rule under test: the request's one slice at `gpu`:`start` (the layout this test needs)."""
    spec = gpu_model_for(H100).profile(allocation.profile)
    SlicePlacement.objects.filter(allocation=allocation).update(
        gpu=pool.nodes.get().gpus.get(index=gpu),
        start=start,
        device_name=dra_device_name(gpu_index=gpu, profile=allocation.profile, profile_id=spec.profile_id, start=start),
    )
    Allocation.objects.filter(pk=allocation.pk).update(movable=movable)
    allocation.refresh_from_db()
    assert allocation.status == Allocation.Status.ACTIVE
    return allocation
