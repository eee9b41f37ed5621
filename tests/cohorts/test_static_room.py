"""The lender's room in a static-MIG pool (issue 15, allocations/cohorts/fence.py): the pre-created instances a
reclaim frees are held for the lender (or, when it needs a layout change, the whole GPU), no other request is
pinned to them meanwhile, and the lender gets them at the admission pass (PostgreSQL; the Kubernetes adapter
faked at its boundary, tests/compaction/fake_kube.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from allocations import services
from allocations.cluster.static_compaction import plan_static_rescue
from allocations.cluster.static_placement import choose_static
from allocations.cluster.sync import start_provisioning
from allocations.cohorts.fence import HeldSlot, pool_fences
from allocations.models import Allocation, Cohort, Gpu, NodePool, Quota, SlicePlacement
from allocations.services.cohort_reclaim import reclaim_due_borrowed
from allocations.services.lifecycle import finish_release
from allocations.services.queue import admit_queued
from tenants.models import Membership, Tenant
from tests.compaction.fake_kube import FakeKube, install
from tests.compaction.kube_world import held_at, static_world
from tests.compaction.world import Small, small_pool
from tests.conftest import World
from tests.factories import MembershipFactory, TenantFactory, UserFactory
from tests.queue.helpers import H100

pytestmark = pytest.mark.django_db
Status = Allocation.Status


@pytest.fixture
def pool(world: World, settings: Any, monkeypatch: pytest.MonkeyPatch) -> NodePool:
    """One H100 carved into seven 1g.10gb, static (agent mode), on Kubernetes. Cohort: Team A guaranteed 7 / 8,
    Team B nothing (it borrows), Team C 1 / 1; everyone's requests approved at once."""
    pool = services.create_node_pool(name="Static cohort", slug="sc", gpu_model=H100, actor=world.root)
    services.register_node(pool_id=pool.pk, name="sc-node-0", gpu_count=1, actor=world.root)
    gpu = Gpu.objects.get(node__pool=pool)
    Gpu.objects.filter(pk=gpu.pk).update(
        uuid="GPU-0",
        static_instances=[
            {"profile": "1g.10gb", "start": s, "uuid": f"MIG-0-{s}", "device": f"gpu-0-mig-1g10gb-19-{s}"}
            for s in range(7)
        ],
    )
    NodePool.objects.filter(pk=pool.pk).update(mig_mode=NodePool.MigMode.STATIC_AGENT)
    team_c = TenantFactory(name="Team C", slug="team-c")
    MembershipFactory(user=UserFactory(username="dora"), tenant=team_c, role=Membership.Role.MEMBER)
    for tenant, guarantee in ((world.tenant_a, 7), (world.tenant_b, 0), (team_c, 1)):
        services.set_tenant_quota(
            tenant_id=tenant.pk,
            pool_id=pool.pk,
            compute_slices_limit=guarantee,
            memory_slices_limit=guarantee + (guarantee > 1),
            actor=world.root,
        )
    Tenant.objects.update(auto_approve_max_compute_slices=7)
    cohort = Cohort.objects.create(pool=pool, name="static", reclaim_grace_minutes=30)
    Quota.objects.filter(pool=pool).update(cohort=cohort)
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    install(monkeypatch).nodes = ("sc-node-0",)
    return NodePool.objects.get(pk=pool.pk)


def ask(pool: NodePool, tenant: Tenant) -> Allocation:
    """A 1g.10gb of `tenant`'s, approved at once, then provisioned: PROVISIONING (pinned) or QUEUED."""
    allocation, _ = services.request_allocation(
        tenant_id=tenant.pk, pool_id=pool.pk, profile="1g.10gb", count=1, lease_hours=8, purpose="static room",
        actor=Membership.objects.filter(tenant=tenant).first().user,
    )  # fmt: skip
    assert allocation.status == Status.APPROVED
    return start_provisioning(allocation_id=allocation.pk)


def start(allocation: Allocation) -> int:
    return SlicePlacement.objects.values_list("start", flat=True).get(allocation=allocation)


def test_the_instance_a_reclaim_frees_is_held_for_the_lender_and_pinned_to_it_at_admission(pool: NodePool, world):
    # given: Team A runs five 1g.10gb within its guarantee; Team B borrows the two other instances
    for _ in range(5):
        assert ask(pool, world.tenant_a).status == Status.PROVISIONING
    borrowed = [ask(pool, world.tenant_b) for _ in range(2)]
    assert all(b.status == Status.PROVISIONING and b.borrowed_compute_slices == 1 for b in borrowed)
    # when: Team A asks for a sixth: the pool is full, so a borrowed one gets notice
    lender = ask(pool, world.tenant_a)
    assert lender.status == Status.QUEUED
    [noticed] = Allocation.objects.filter(reclaimed_for=lender)
    # then: the room held for it is the very instance the noticed one holds
    lender.refresh_from_db()
    gpu, room = Gpu.objects.get(node__pool=pool), start(noticed)
    assert lender.reclaim_room == [{"gpu": gpu.pk, "node": "sc-node-0", "index": 0, "start": room, "size": 1}]
    # when: the grace is over: the borrowed slice is taken back, and the cluster's teardown of it is done
    assert reclaim_due_borrowed(now=noticed.reclaim_at + timedelta(seconds=1)) == {"reclaimed": 1}
    assert finish_release(allocation_id=noticed.pk).status == Status.RELEASED
    # and: Team A asks for a seventh (within its guarantee): the freed instance is the only one
    other = ask(pool, world.tenant_a)
    # then: it is not pinned there; it waits, told for whom the instance is held
    assert other.status == Status.QUEUED, other.status_message
    assert f"held for request #{lender.pk}" in other.status_message
    assert not SlicePlacement.objects.filter(allocation=other).exists()
    # when: the admission pass runs: the lender goes first, pinned to its room
    admitted = admit_queued(pool_id=pool.pk)
    assert admitted[0].pk == lender.pk
    lender.refresh_from_db()
    assert lender.status == Status.PROVISIONING and start(lender) == room
    assert SlicePlacement.objects.get(allocation=lender).mig_uuid == f"MIG-0-{room}"
    assert lender.pk not in [f.lender_id for f in pool_fences(pool.pk)]


def test_a_gpu_whose_reconfiguration_is_held_for_a_lender_is_planned_for_nobody_else(pool: NodePool):
    gpu = Gpu.objects.get(node__pool=pool)
    # given: no instance is held, so a 3g.40gb fits there by reconfiguring the GPU
    assert choose_static(pool=pool, profile="3g.40gb", count=1) is not None
    # when: a lender's room is that GPU's reconfiguration (held whole), or one of its free instances
    whole = [HeldSlot(gpu.pk, "sc-node-0", 0, 0, 8)]
    one = [HeldSlot(gpu.pk, "sc-node-0", 0, 3, 1)]
    # then: no plan touches the GPU held whole; around a held instance, plans leave it alone
    assert choose_static(pool=pool, profile="1g.10gb", count=1, fenced=whole) is None
    assert choose_static(pool=pool, profile="3g.40gb", count=1, fenced=whole) is None
    around = choose_static(pool=pool, profile="1g.10gb", count=7, fenced=one)
    assert around is None
    six = choose_static(pool=pool, profile="1g.10gb", count=6, fenced=one)
    assert six is not None and 3 not in [s for _, s in six.plan.targets]


@pytest.fixture
def small(world: World) -> Small:
    return small_pool(world)


@pytest.fixture
def fake(small: Small, monkeypatch: pytest.MonkeyPatch) -> FakeKube:
    """As tests/compaction/test_static_rescue.py's: one node, its GPUs with uuids."""
    for gpu in Gpu.objects.filter(node__pool=small.pool):
        Gpu.objects.filter(pk=gpu.pk).update(uuid=f"GPU-{gpu.index}")
    cluster = install(monkeypatch)
    cluster.nodes = ("small-node-0",)
    return cluster


def test_a_static_rescue_moves_no_slice_to_an_instance_held_for_a_lender(
    small: Small, fake: FakeKube, settings: Any
) -> None:
    # given (tests/compaction/test_static_rescue.py): slot 0 of every GPU held, only GPU 0's movable; the rescue of a
    # 4g.40gb moves it to GPU 1's first free 1g.10gb, start 1
    static_world(small, fake, settings, "static-agent", {(0, 0): True, (1, 0): False, (2, 0): False})
    pool, movable = NodePool.objects.get(pk=small.pool.pk), {held_at(0, 0).pk}
    gpu_1, gpu_2 = small.gpu(1).pk, small.gpu(2).pk

    def rescue(*held: HeldSlot) -> list[tuple[int, int]]:
        plan = plan_static_rescue(pool=pool, profile="4g.40gb", movable=movable, max_moves=2, held=held)
        return [] if plan is None else [(m.to_gpu, m.to_start) for m in plan.moves]

    assert rescue() == [(1, 1)]
    # when: that instance is held for a lender: the next free one
    assert rescue(HeldSlot(gpu_1, "small-node-0", 1, 1, 1)) == [(1, 2)]
    # when: GPU 1 is held whole and GPU 2's free instances are held: no plan at all
    assert rescue(HeldSlot(gpu_1, "small-node-0", 1, 0, 8), HeldSlot(gpu_2, "small-node-0", 2, 1, 6)) == []
