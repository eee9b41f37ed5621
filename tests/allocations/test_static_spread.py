"""A static-MIG request spread over GPUs of one node (issue 12; allocations/cluster/static_spread.py and
static_provisioning.py): the cheapest split, one reconfiguration per GPU in GPU order, provisioned when all are
over, the others undone and the quota given back when one fails. No cluster call: the reconfigurations are
finished through their service as the orchestration would (the Kubernetes end to end is in
tests/kube/test_static_mig.py)."""

from __future__ import annotations

from typing import Any

import pytest

from allocations import services
from allocations.cluster.static_provisioning import inverse
from allocations.cluster.static_spread import choose_static_spread
from allocations.cluster.sync import start_provisioning
from allocations.mig.reconfig import Operation
from allocations.models import Allocation, Gpu, MigReconfiguration, Node, NodePool, Quota
from allocations.services.reconfiguration import finish_reconfiguration
from tests.allocations.test_reconfiguration_service import _approved, _static_pool
from tests.conftest import World

pytestmark = pytest.mark.django_db

Status = MigReconfiguration.Status


def published(profile: str, start: int, size: int, uuid: str) -> dict[str, Any]:
    return {"profile": profile, "start": start, "size": size, "uuid": uuid, "device": f"d-{uuid}"}


def quota_used(world: World) -> tuple[int, int]:
    quota = Quota.objects.get(tenant=world.tenant_a, pool=world.pool)
    return quota.compute_slices_used, quota.memory_slices_used


@pytest.fixture
def spread_pool(world: World, settings: Any, django_capture_on_commit_callbacks: Any) -> None:
    """Every GPU publishes a free 7g.80gb, but GPU 3 of node 1 only a free 1g.10gb at slot 6."""
    _static_pool(world, settings, django_capture_on_commit_callbacks)


def test_the_cheapest_split_over_one_nodes_gpus_wins(world: World, spread_pool: None) -> None:
    # given: a 4g.40gb starts at slot 0 only, so two need two GPUs. Node 0: 2 + 2 operations (destroy the
    # 7g.80gb, create); node 1: 2 on GPU 0 and 1 on GPU 3 (a create beside the free 1g.10gb)
    pool = NodePool.objects.get(pk=world.pool.pk)
    # when
    spread = choose_static_spread(pool=pool, profile="4g.40gb", count=2)
    # then
    assert spread is not None
    assert [(c.gpu.node.name, c.gpu.index) for c in spread.choices] == [("h100-node-1", 0), ("h100-node-1", 3)]
    assert spread.operations == 3
    assert [c.plan.operations for c in spread.choices] == [
        (Operation("destroy", "7g.80gb", 0), Operation("create", "4g.40gb", 0)),
        (Operation("create", "4g.40gb", 0),),
    ]
    # and nine 7g.80gb never fit one node of eight GPUs
    assert choose_static_spread(pool=pool, profile="7g.80gb", count=9) is None


def test_free_instances_on_two_gpus_are_pinned_without_a_reconfiguration(world: World, spread_pool: None) -> None:
    # given: GPUs 0 and 1 of node 0 each publish a free 4g.40gb (and a free 3g.40gb)
    for index in (0, 1):
        Gpu.objects.filter(node__name="h100-node-0", index=index).update(
            static_instances=[
                published("4g.40gb", 0, 4, f"MIG-4g-{index}"),
                published("3g.40gb", 4, 4, f"MIG-3g-{index}"),
            ]
        )
    allocation = _approved(world, "4g.40gb", count=2)
    # when
    provisioned = start_provisioning(allocation_id=allocation.pk)
    # then
    assert provisioned.status == Allocation.Status.PROVISIONING
    placed = sorted((p.gpu.node.name, p.gpu.index, p.start, p.mig_uuid) for p in provisioned.placements.all())
    assert placed == [("h100-node-0", 0, 0, "MIG-4g-0"), ("h100-node-0", 1, 0, "MIG-4g-1")]
    assert not MigReconfiguration.objects.exists()
    assert quota_used(world) == (8, 8)


def test_a_spread_is_reconfigured_gpu_by_gpu_and_provisioned_when_all_are_done(
    world: World, spread_pool: None, django_capture_on_commit_callbacks: Any
) -> None:
    # given
    allocation = _approved(world, "4g.40gb", count=2)
    # when
    with django_capture_on_commit_callbacks() as queued:
        waiting = start_provisioning(allocation_id=allocation.pk)
    # then: one reconfiguration per GPU, asked for in GPU order, the node marked, the request waiting
    assert waiting.status == Allocation.Status.APPROVED
    first, second = MigReconfiguration.objects.filter(allocation=allocation).order_by("pk")
    assert [(r.gpu.node.name, r.gpu.index) for r in (first, second)] == [("h100-node-1", 0), ("h100-node-1", 3)]
    assert len(queued) == 2
    assert f"reconfiguration #{first.pk}, #{second.pk}" in waiting.status_message
    assert Node.objects.get(name="h100-node-1").state == Node.State.RECONFIGURING
    assert quota_used(world) == (8, 8)

    # when: the first is over, the second not yet
    finish_reconfiguration(reconfiguration_id=first.pk, instances=[published("4g.40gb", 0, 4, "MIG-new-0")])
    still = start_provisioning(allocation_id=allocation.pk)
    # then: still waiting, nothing asked again, the node still being changed
    assert still.status == Allocation.Status.APPROVED
    assert MigReconfiguration.objects.count() == 2
    assert Node.objects.get(name="h100-node-1").state == Node.State.RECONFIGURING

    # when: the second is over too
    finish_reconfiguration(
        reconfiguration_id=second.pk,
        instances=[published("4g.40gb", 0, 4, "MIG-new-3"), published("1g.10gb", 6, 1, "MIG-free")],
    )
    provisioned = start_provisioning(allocation_id=allocation.pk)
    # then: both new instances pinned by uuid, the quota unchanged (exactly the request's)
    assert provisioned.status == Allocation.Status.PROVISIONING
    placed = sorted((p.gpu.node.name, p.gpu.index, p.start, p.mig_uuid) for p in provisioned.placements.all())
    assert placed == [("h100-node-1", 0, 0, "MIG-new-0"), ("h100-node-1", 3, 0, "MIG-new-3")]
    assert Node.objects.get(name="h100-node-1").state == Node.State.READY
    assert quota_used(world) == (8, 8)


def test_one_failed_gpu_undoes_the_others_change_and_fails_the_request_with_its_quota_back(
    world: World, spread_pool: None
) -> None:
    # given: a spread over two GPUs, the first changed, the second failed
    allocation = _approved(world, "4g.40gb", count=2)
    start_provisioning(allocation_id=allocation.pk)
    first, second = MigReconfiguration.objects.filter(allocation=allocation).order_by("pk")
    finish_reconfiguration(reconfiguration_id=first.pk, instances=[published("4g.40gb", 0, 4, "MIG-new-0")])
    finish_reconfiguration(reconfiguration_id=second.pk, instances=None, error="NVML said no.")
    # when
    failed = start_provisioning(allocation_id=allocation.pk)
    # then: the request failed with the reason, its quota back; the first GPU's change is being undone
    assert failed.status == Allocation.Status.FAILED
    assert "NVML said no." in failed.status_message
    assert "being undone" in failed.status_message and "quota was given back" in failed.status_message
    assert quota_used(world) == (0, 0)
    undo = MigReconfiguration.objects.get(allocation__isnull=True)
    assert undo.gpu_id == first.gpu_id and undo.status == Status.PENDING
    assert undo.plan == [
        {"action": "destroy", "profile": "4g.40gb", "start": 0},
        {"action": "create", "profile": "7g.80gb", "start": 0},
    ]
    assert undo.targets == [["7g.80gb", 0]]
    # and provisioning again changes nothing
    assert start_provisioning(allocation_id=allocation.pk).status == Allocation.Status.FAILED
    assert MigReconfiguration.objects.count() == 3


def test_the_inverse_plan_takes_the_steps_back_in_reverse() -> None:
    plan = [Operation("destroy", "7g.80gb", 0), Operation("create", "4g.40gb", 0), Operation("create", "2g.20gb", 4)]
    assert inverse(plan) == [
        Operation("destroy", "2g.20gb", 4),
        Operation("destroy", "4g.40gb", 0),
        Operation("create", "7g.80gb", 0),
    ]


def test_in_mig_manager_mode_a_spread_changes_one_gpu_at_most(world: World, spread_pool: None) -> None:
    # given: two 4g.40gb need two GPUs changed, and the MIG manager applies a whole node's config at a time
    NodePool.objects.filter(pk=world.pool.pk).update(mig_mode=NodePool.MigMode.STATIC_MANAGER)
    allocation = _approved(world, "4g.40gb", count=2)
    # when
    waiting = start_provisioning(allocation_id=allocation.pk)
    # then: no two changes of one node at once; the request waits in the pool's queue (issue 15: a free 4g.40gb
    # may appear), and withdrawn it gives its quota back
    assert waiting.status == Allocation.Status.QUEUED
    assert not MigReconfiguration.objects.exists()
    services.release_allocation(allocation_id=allocation.pk, actor=world.root)
    assert quota_used(world) == (0, 0)
    # and when one GPU already has a free 4g.40gb, the other alone is changed
    world.pool.refresh_from_db()
    Gpu.objects.filter(node__name="h100-node-0", index=0).update(
        static_instances=[published("4g.40gb", 0, 4, "MIG-4g"), published("3g.40gb", 4, 4, "MIG-3g")]
    )
    again = _approved(world, "4g.40gb", count=2)
    start_provisioning(allocation_id=again.pk)
    [change] = MigReconfiguration.objects.filter(allocation=again)
    assert (change.gpu.node.name, change.gpu.index) == ("h100-node-0", 1)
