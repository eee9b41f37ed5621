"""A multi-slice lender's room spread over GPUs in a static-MIG pool (issue 15, allocations/cohorts/fence.py
`_static_room`): when no single GPU can take it once the reclaimed instances are free, the room held is the spread
static placement will pin it to, an instance on each GPU (PostgreSQL; the Kubernetes adapter faked at its
boundary, tests/compaction/fake_kube.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from allocations import services
from allocations.cluster.sync import start_provisioning
from allocations.cohorts.fence import pool_fences
from allocations.models import Allocation, Cohort, Gpu, NodePool, Quota, SlicePlacement
from allocations.services.cohort_reclaim import reclaim_due_borrowed
from allocations.services.lifecycle import finish_release
from allocations.services.queue import admit_queued
from tenants.models import Membership, Tenant
from tests.compaction.fake_kube import install
from tests.conftest import World
from tests.factories import MembershipFactory, TenantFactory, UserFactory
from tests.queue.helpers import H100

pytestmark = pytest.mark.django_db
Status = Allocation.Status


@pytest.fixture
def pool(world: World, settings: Any, monkeypatch: pytest.MonkeyPatch) -> NodePool:
    """One node of two H100s, each carved into seven 1g.10gb, static (agent mode), on Kubernetes. Cohort: Team A
    guaranteed 14 / 16, Team B nothing (it borrows), Team C 1 / 1; everyone's requests approved at once."""
    pool = services.create_node_pool(name="Static spread", slug="ss", gpu_model=H100, actor=world.root)
    services.register_node(pool_id=pool.pk, name="ss-node-0", gpu_count=2, actor=world.root)
    for gpu in Gpu.objects.filter(node__pool=pool):
        k = gpu.index
        Gpu.objects.filter(pk=gpu.pk).update(
            uuid=f"GPU-{k}",
            static_instances=[
                {"profile": "1g.10gb", "start": s, "uuid": f"MIG-{k}-{s}", "device": f"gpu-{k}-mig-1g10gb-19-{s}"}
                for s in range(7)
            ],
        )
    NodePool.objects.filter(pk=pool.pk).update(mig_mode=NodePool.MigMode.STATIC_AGENT)
    team_c = TenantFactory(name="Team C", slug="team-c")
    MembershipFactory(user=UserFactory(username="dora"), tenant=team_c, role=Membership.Role.MEMBER)
    for tenant, (compute, memory) in ((world.tenant_a, (14, 16)), (world.tenant_b, (0, 0)), (team_c, (1, 1))):
        services.set_tenant_quota(
            tenant_id=tenant.pk, pool_id=pool.pk, compute_slices_limit=compute, memory_slices_limit=memory,
            actor=world.root,
        )  # fmt: skip
    Tenant.objects.update(auto_approve_max_compute_slices=7)
    cohort = Cohort.objects.create(pool=pool, name="static", reclaim_grace_minutes=30)
    Quota.objects.filter(pool=pool).update(cohort=cohort)
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    install(monkeypatch).nodes = ("ss-node-0",)
    return NodePool.objects.get(pk=pool.pk)


def ask(pool: NodePool, tenant: Tenant, count: int = 1) -> Allocation:
    """`count` x 1g.10gb of `tenant`'s, approved at once, then provisioned: PROVISIONING (pinned) or QUEUED."""
    allocation, _ = services.request_allocation(
        tenant_id=tenant.pk, pool_id=pool.pk, profile="1g.10gb", count=count, lease_hours=8, purpose="spread room",
        actor=Membership.objects.filter(tenant=tenant).first().user,
    )  # fmt: skip
    assert allocation.status == Status.APPROVED
    return start_provisioning(allocation_id=allocation.pk)


def pinned(allocation: Allocation) -> list[tuple[int, int]]:
    return sorted(SlicePlacement.objects.filter(allocation=allocation).values_list("gpu__index", "start"))


def test_a_two_slice_lender_s_room_over_two_gpus_is_held_on_both_and_pinned_to_it(pool: NodePool, world: World):
    # given: Team A runs six 1g.10gb on each GPU, Team B borrows the seventh of each
    team_c = Tenant.objects.get(slug="team-c")
    borrowed = []
    for _ in range(2):
        assert all(ask(pool, world.tenant_a).status == Status.PROVISIONING for _ in range(6))
        borrowed.append(ask(pool, world.tenant_b))
    assert [pinned(b) for b in borrowed] == [[(0, 6)], [(1, 6)]]
    # when: Team A asks for two more, within its guarantee: both borrowed slices get notice
    lender = ask(pool, world.tenant_a, count=2)
    assert lender.status == Status.QUEUED
    assert sorted(Allocation.objects.filter(reclaimed_for=lender).values_list("pk", flat=True)) == [
        b.pk for b in borrowed
    ]
    # then: no single GPU will have two free instances, so the room held is the freed instance of each GPU
    lender.refresh_from_db()
    gpus = dict(Gpu.objects.filter(node__pool=pool).values_list("index", "pk"))
    assert lender.reclaim_room == [
        {"gpu": gpus[k], "node": "ss-node-0", "index": k, "start": 6, "size": 1} for k in (0, 1)
    ]
    # when: the grace is over, both are taken back and torn down, and Team C asks for one (within its guarantee)
    due = Allocation.objects.get(pk=borrowed[0].pk).reclaim_at
    assert reclaim_due_borrowed(now=due + timedelta(seconds=1)) == {"reclaimed": 2}
    for allocation in borrowed:
        assert finish_release(allocation_id=allocation.pk).status == Status.RELEASED
    other = ask(pool, team_c)
    # then: it is pinned to neither freed instance; it waits, told for whom they are held
    assert other.status == Status.QUEUED and f"held for request #{lender.pk}" in other.status_message
    # when: the admission pass runs: the lender goes first, pinned to both
    assert admit_queued(pool_id=pool.pk)[0].pk == lender.pk
    lender.refresh_from_db()
    assert lender.status == Status.PROVISIONING and pinned(lender) == [(0, 6), (1, 6)]
    assert pool_fences(pool.pk) == []
