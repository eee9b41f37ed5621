"""A cohort for the tests (issue 15): Team A lends, Team B borrows, in a pool of two H100 nodes (14 slices)."""

from __future__ import annotations

from allocations import services
from allocations.models import Allocation, Cohort, NodePool, Quota
from tenants.models import AuditEvent
from tests.conftest import World
from tests.queue.helpers import small_pool


def cohort_pool(world: World, *, grace_minutes: int = 30, b_guarantee: int = 0) -> tuple[NodePool, Cohort]:
    """Given (the cohort admin surfaces are another change's): A's guarantee is 7 compute / 8 memory, B's
    `b_guarantee` of each, both in one cohort with `grace_minutes` of notice; both auto-approved up to 7."""
    pool = small_pool(world, nodes=2)
    for tenant, guarantee in ((world.tenant_a, (7, 8)), (world.tenant_b, (b_guarantee, b_guarantee))):
        services.set_tenant_quota(
            tenant_id=tenant.pk,
            pool_id=pool.pk,
            compute_slices_limit=guarantee[0],
            memory_slices_limit=guarantee[1],
            actor=world.root,
        )
    cohort = Cohort.objects.create(pool=pool, name="research", reclaim_grace_minutes=grace_minutes)
    Quota.objects.filter(pool=pool).update(cohort=cohort)
    return pool, cohort


def used(world: World, pool: NodePool, *, b: bool = False) -> tuple[int, int]:
    quota = Quota.objects.get(tenant=world.tenant_b if b else world.tenant_a, pool=pool)
    return quota.compute_slices_used, quota.memory_slices_used


def verbs(allocation: Allocation) -> list[str]:
    return list(
        AuditEvent.objects.filter(object_type="allocation", object_id=str(allocation.pk))
        .order_by("id")
        .values_list("verb", flat=True)
    )


def sent(callbacks) -> list[str]:  # type: ignore[no-untyped-def]
    return [c.func.__self__.name for c in callbacks if hasattr(c.func, "__self__")]
