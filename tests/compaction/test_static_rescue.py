"""Compaction in a static-MIG pool (issue 14; allocations/cluster/static_compaction.py, cluster/moves.py): a request
that fits no GPU even by reconfiguring gets a plan of at most 2 moves of movable slices to FREE pre-created
instances of their profile elsewhere; each move is a new claim pinned by the instance's uuid, then the old claim
and holder pod deleted; the request is then provisioned on the freed GPU (a reconfiguration there). The Kubernetes
adapter is faked at its boundary (fake_kube.py); the real scheduler's side of a uuid pin is the static tests' in
tests/kube/test_static_mig.py."""

from __future__ import annotations

from typing import Any

import pytest

from allocations import services
from allocations.cluster import kube
from allocations.cluster import sync as kube_sync
from allocations.cluster.static_compaction import plan_static_rescue
from allocations.cluster.sync import start_provisioning
from allocations.mig.reconfig import Operation
from allocations.models import Allocation, Gpu, MigReconfiguration, MovePlan, NodePool, SliceMove, SlicePlacement
from allocations.services.compaction import movable_allocation_ids, start_compaction
from allocations.services.moves import step_move_plan
from allocations.services.reconfiguration import operations_of
from tenants.errors import InvalidInput
from tests.compaction.fake_kube import FakeKube, install
from tests.compaction.kube_world import NODE, device, held_at, mig_uuid, static_world
from tests.compaction.world import Small, small_pool, where
from tests.conftest import World

pytestmark = pytest.mark.django_db

Step = SliceMove.Step


@pytest.fixture
def small(world: World) -> Small:
    return small_pool(world)


@pytest.fixture
def fake(small: Small, monkeypatch: pytest.MonkeyPatch) -> FakeKube:
    for gpu in Gpu.objects.filter(node__pool=small.pool):
        Gpu.objects.filter(pk=gpu.pk).update(uuid=f"GPU-{gpu.index}")
    cluster = install(monkeypatch)
    cluster.nodes = (NODE,)
    return cluster


def approved(small: Small, profile: str) -> Allocation:
    allocation, _ = services.request_allocation(
        tenant_id=small.world.tenant_a.pk,
        pool_id=small.pool.pk,
        profile=profile,
        count=1,
        lease_hours=2,
        purpose="static compaction",
        actor=small.world.alice,
    )
    if allocation.status == Allocation.Status.PENDING:
        services.approve_allocation(allocation_id=allocation.pk, actor=small.world.mallory)
    return Allocation.objects.get(pk=allocation.pk)


def step(plan: MovePlan) -> bool:
    return step_move_plan(plan_id=plan.pk).wait


def test_a_refused_request_moves_one_slice_to_a_free_instance_and_is_provisioned_on_the_freed_gpu(
    small: Small, fake: FakeKube, settings: Any
) -> None:
    # given: slot 0 of every GPU is held, so a 4g.40gb (slot 0 only) fits nowhere, even by reconfiguring; only
    # GPU 0's slice is movable
    static_world(small, fake, settings, "static-agent", {(0, 0): True, (1, 0): False, (2, 0): False})
    lone = held_at(0, 0)
    request = approved(small, "4g.40gb")

    # when
    waiting = start_provisioning(allocation_id=request.pk)

    # then: it waits for a rescue plan of one move, to GPU 1's first free 1g.10gb (a GPU that holds something)
    assert waiting.status == Allocation.Status.APPROVED
    assert "1 movable slice(s) of other requests move" in waiting.status_message
    plan = MovePlan.objects.get(for_allocation=request)
    assert plan.trigger == MovePlan.Trigger.RESCUE
    [move] = plan.moves.all()
    assert (move.allocation_id, move.from_gpu.index, move.from_start, move.to_gpu.index, move.to_start) == (
        lone.pk,
        0,
        0,
        1,
        1,
    )

    # when: the owner is told, then the new claim is applied
    assert step(plan) is False
    assert step(plan) is True
    # then: it pins the free instance by its uuid, without steering; the destination is reserved with that uuid
    ns, old, new = lone.namespace, f"mig-alloc-{lone.uuid}", f"mig-alloc-{lone.uuid}-m1"
    assert "mig-0: device.attributes['gpu.nvidia.com'].uuid == 'MIG-1-1'" in kube.claim_selectors(
        fake.claims[(ns, new)]
    )
    assert fake.calls["apply_steering"] == 0
    reserved = SlicePlacement.objects.get(allocation=lone, gpu__index=1)
    assert (reserved.start, reserved.mig_uuid, reserved.device_name) == (1, "MIG-1-1", device(1, 1))

    # when: the scheduler allocates it there, and the last step runs
    fake.allocate(ns, new, NODE, device(1, 1))
    step(plan)
    step(plan)
    assert step_move_plan(plan_id=plan.pk).plan.status == MovePlan.Status.DONE
    # then: the old claim and pod are gone; the allocation's specs are the new claim's (reconcile compares them)
    assert fake.names(old) == ([new], [new])
    assert where(lone) == [(1, 1)]
    [spec], _ = kube_sync.cluster_specs(Allocation.objects.get(pk=lone.pk))
    assert spec == fake.claims[(ns, new)]

    # when: the plan's end provisions the request again
    again = start_provisioning(allocation_id=request.pk)
    # then: GPU 0 holds nothing now: its free instances are destroyed and a 4g.40gb created for the request
    assert again.status == Allocation.Status.APPROVED
    [reconfiguration] = MigReconfiguration.objects.filter(allocation=request)
    assert reconfiguration.gpu.index == 0
    assert operations_of(reconfiguration.plan)[-1] == Operation("create", "4g.40gb", 0)


def test_in_mig_manager_mode_the_gpu_is_emptied_and_never_with_more_than_two_moves(
    small: Small, fake: FakeKube, settings: Any
) -> None:
    # given: the manager rebuilds whole GPUs, so GPU 0 must hold nothing; it holds two movable slices
    held = {(0, 0): True, (0, 3): True, (1, 0): False, (2, 0): False}
    static_world(small, fake, settings, "static-manager", held)
    pool = NodePool.objects.get(pk=small.pool.pk)
    movable = movable_allocation_ids(pool)
    # when
    plan = plan_static_rescue(pool=pool, profile="4g.40gb", movable=movable, max_moves=2)
    # then: both move, to distinct free instances of GPU 1 (a GPU that holds something already)
    assert plan is not None
    assert [(m.from_gpu, m.from_start, m.to_gpu, m.to_start) for m in plan.moves] == [(0, 0, 1, 1), (0, 3, 1, 2)]
    # and one move is not enough
    assert plan_static_rescue(pool=pool, profile="4g.40gb", movable=movable, max_moves=1) is None

    # when: one of the two may not move any more
    Allocation.objects.filter(pk=held_at(0, 3).pk).update(movable=False)
    queued = start_provisioning(allocation_id=approved(small, "4g.40gb").pk)
    # then: no plan; the request waits in the pool's queue as before
    assert queued.status == Allocation.Status.QUEUED
    assert not MovePlan.objects.exists()


def test_a_destination_taken_meanwhile_fails_the_move_and_keeps_the_old_claim(
    small: Small, fake: FakeKube, settings: Any
) -> None:
    # given: a rescue plan, announced
    static_world(small, fake, settings, "static-agent", {(0, 0): True, (1, 0): False, (2, 0): False, (2, 1): False})
    lone = held_at(0, 0)
    start_provisioning(allocation_id=approved(small, "4g.40gb").pk)
    plan = MovePlan.objects.get()
    step(plan)
    # when: another request holds the destination instance first
    SlicePlacement.objects.filter(allocation=held_at(2, 1)).update(gpu=small.gpu(1), mig_uuid=mig_uuid(1, 1))
    step(plan)
    # then: no new claim; the move and the plan FAILED with the reason; the slice stays where it was
    ns = lone.namespace
    assert fake.names(f"mig-alloc-{lone.uuid}") == ([f"mig-alloc-{lone.uuid}"], [f"mig-alloc-{lone.uuid}"])
    plan.refresh_from_db()
    assert plan.status == MovePlan.Status.FAILED
    assert plan.moves.get().reason == f"{NODE}/gpu-1:1 is no longer a free pre-created 1g.10gb."
    assert where(lone) == [(0, 0)]
    assert (ns, f"mig-alloc-{lone.uuid}-m1") not in fake.claims


def test_whole_gpu_compaction_is_still_refused_in_a_static_pool(small: Small, fake: FakeKube, settings: Any) -> None:
    static_world(small, fake, settings, "static-agent", {(0, 0): True, (1, 0): True})
    with pytest.raises(InvalidInput) as refused:
        start_compaction(pool_id=small.pool.pk, actor=small.world.root)
    assert "slices move there only to make room for a refused request" in refused.value.errors["pool"][0]
