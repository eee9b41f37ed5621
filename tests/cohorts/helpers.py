"""A cohort for the tests (issue 15): Team A lends, Team B borrows, in a pool of two H100 nodes (14 slices)."""

from __future__ import annotations

from allocations import services
from allocations.models import Allocation, Cohort, NodePool, Quota, SlicePlacement
from tenants.models import AuditEvent, Membership, Tenant
from tests.conftest import World
from tests.factories import MembershipFactory, TenantFactory, UserFactory
from tests.queue.helpers import ask, small_pool


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


def lender_waits(world: World) -> tuple[Allocation, list[Allocation], Tenant]:
    """Given: two H100s. Team A (guaranteed 21 / 24) runs a 4g.40gb and a 3g.40gb on node 0 and a 3g.40gb at start 4
    of node 1; Team B (no guarantee) runs two borrowed 1g.10gb at starts 0 and 1 of node 1, leaving 2-3 free; Team
    C, a third member of the cohort, lends a guarantee of 7 / 8 it does not use. Team A then asks for a 4g.40gb
    (start 0 only): it waits while both borrowed slices get notice. Returns (the lender, the borrowed, Team C)."""
    pool, cohort = cohort_pool(world)
    services.set_tenant_quota(
        tenant_id=world.tenant_a.pk, pool_id=pool.pk, compute_slices_limit=21, memory_slices_limit=24,
        actor=world.root,
    )  # fmt: skip
    team_c = TenantFactory(name="Team C", slug="team-c", auto_approve_max_compute_slices=7)
    MembershipFactory(user=UserFactory(username="dora"), tenant=team_c, role=Membership.Role.MEMBER)
    services.set_tenant_quota(
        tenant_id=team_c.pk, pool_id=pool.pk, compute_slices_limit=7, memory_slices_limit=8, actor=world.root
    )
    Quota.objects.filter(pool=pool).update(cohort=cohort)
    ask(world, pool, "4g.40gb")
    ask(world, pool, "3g.40gb")
    borrowed = [ask(world, pool, "1g.10gb", b=True) for _ in range(2)]
    ask(world, pool, "3g.40gb")
    where = SlicePlacement.objects.filter(allocation__in=borrowed).values_list("gpu__node__name", "start")
    assert sorted(where) == [("q1-node-1", 0), ("q1-node-1", 1)]
    lender = ask(world, pool, "4g.40gb")
    assert lender.status == Allocation.Status.QUEUED
    noticed = Allocation.objects.filter(reclaimed_for=lender).values_list("pk", flat=True)
    assert sorted(noticed) == sorted(b.pk for b in borrowed)
    return lender, borrowed, team_c


def ask_c(world: World, team_c: Tenant, profile: str) -> Allocation:
    """Team C's request (see `lender_waits`), approved at once, then provisioned."""
    allocation, _ = services.request_allocation(
        tenant_id=team_c.pk, pool_id=Quota.objects.get(tenant=team_c).pool_id, profile=profile, count=1, lease_hours=8,
        purpose="another lender", actor=Membership.objects.get(tenant=team_c).user,
    )  # fmt: skip
    assert allocation.status == Allocation.Status.APPROVED
    return services.provisioning.provision_allocation(allocation_id=allocation.pk)


def lender_waits_behind_itself(world: World) -> tuple[NodePool, Allocation]:
    """Given: a cohort whose Team A (guaranteed 21 / 24) runs both GPUs whole itself, and its 1g.10gb, within its
    guarantee, waits for room with nothing borrowed to take back (the pool and the queued request)."""
    pool, _ = cohort_pool(world)
    services.set_tenant_quota(
        tenant_id=world.tenant_a.pk, pool_id=pool.pk, compute_slices_limit=21, memory_slices_limit=24,
        actor=world.root,
    )  # fmt: skip
    assert {ask(world, pool, "7g.80gb").status for _ in range(2)} == {Allocation.Status.ACTIVE}
    waiting = ask(world, pool, "1g.10gb")
    assert waiting.status == Allocation.Status.QUEUED
    return pool, waiting
