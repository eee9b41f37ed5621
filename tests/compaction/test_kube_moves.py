"""Compaction moves on the Kubernetes backend (issue 14), with the adapter faked at its boundary (fake_kube.py):
a new claim pinned at the destination and allocated there before the old claim and holder pod go; the allocation
takes the new claim's name; each step audited, idempotent and resumable; a new claim that is refused, lands
elsewhere or is never allocated is rolled back and the move fails with the reason."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from celery.exceptions import Retry

from allocations import services
from allocations.cluster import kube
from allocations.cluster import moves as cluster_moves
from allocations.cluster import sync as kube_sync
from allocations.cluster.reconcile import ReconcileReport, reconcile_cluster
from allocations.models import Allocation, Gpu, MovePlan, Node, NodePool, Notification, SliceMove, SlicePlacement
from allocations.services.compaction import preview_compaction, start_compaction
from allocations.services.moves import step_move_plan
from allocations.tasks import advance_move_plan_task
from tenants.errors import InvalidInput
from tenants.models import AuditEvent
from tests.compaction.fake_kube import FakeKube, install
from tests.compaction.kube_world import NODE, on_cluster
from tests.compaction.world import Small, small_pool, where
from tests.conftest import H100, World

Step = SliceMove.Step


@pytest.fixture
def small(world: World) -> Small:
    return small_pool(world)


@pytest.fixture
def cluster(small: Small, settings: Any, monkeypatch: pytest.MonkeyPatch) -> FakeKube:
    """The pool's GPUs with UUIDs, the fake adapter installed; the backend is switched to Kubernetes by `moved`
    once the test's requests are active (they are provisioned by the simulated backend, then given their claims)."""
    for gpu in Gpu.objects.filter(node__pool=small.pool):
        Gpu.objects.filter(pk=gpu.pk).update(uuid=f"GPU-{gpu.index}")
    fake = install(monkeypatch)
    fake.nodes = tuple(Node.objects.values_list("name", flat=True))  # every node is in the cluster
    return fake


def fragmented(small: Small, fake: FakeKube, settings: Any) -> tuple[Allocation, MovePlan, SliceMove]:
    """GPU 0 holds only a movable 1g.10gb, GPU 1 a busy 1g.10gb: the plan moves the first next to the second."""
    lone = small.active("1g.10gb", gpu=0, start=0, movable=True)
    busy = small.active("1g.10gb", gpu=1, start=0)
    on_cluster(fake, settings, lone, busy)
    plan = start_compaction(pool_id=small.pool.pk, actor=small.world.root)
    return lone, plan, plan.moves.get()


def step(plan: MovePlan) -> bool:
    """One run of the task's service; True when it waits for the cluster."""
    return step_move_plan(plan_id=plan.pk).wait


def device_at(start: int) -> str:
    return f"gpu-1-mig-1g10gb-19-{start}"


def test_a_move_makes_the_new_claim_at_the_destination_before_the_old_one_goes(
    small: Small, cluster: FakeKube, settings: Any
) -> None:
    # given
    lone, plan, move = fragmented(small, cluster, settings)
    ns = lone.namespace
    old = f"mig-alloc-{lone.uuid}"
    new = f"{old}-m1"
    assert (move.from_gpu.index, move.to_gpu.index) == (0, 1)

    # when: the owner is told, then the new claim is applied
    assert step(plan) is False
    assert step(plan) is True  # applied, not allocated yet: the task looks again shortly

    # then: a claim of the next generation pinned to GPU 1, its own holder pod there; the old claim untouched
    claim = cluster.claims[(ns, new)]
    assert kube.claim_selectors(claim) == (
        "mig-0: device.attributes['gpu.nvidia.com'].profile == '1g.10gb'",
        "mig-0: device.attributes['gpu.nvidia.com'].parentUUID == 'GPU-1'",
    )
    assert (cluster.pods[(ns, new)].node_name, cluster.pods[(ns, new)].claim_names) == (NODE, (new,))
    assert cluster.names(f"mig-alloc-{lone.uuid}") == ([old, new], [old, new])
    # the slot is pinned by steering: the devices the scheduler would take before the destination are tainted
    first_fit = 1  # GPU 1 holds a 1g.10gb at 0
    expected = tuple(device_at(s) for s in range(first_fit, move.to_start))
    assert cluster.steering.get(str(lone.uuid), ()) == expected
    # the destination is reserved meanwhile: no other request is planned there
    assert sorted(where(lone)) == [(0, 0), (1, move.to_start)]

    # when: the scheduler allocates it where planned
    cluster.allocate(ns, new, NODE, device_at(move.to_start))
    assert step(plan) is False
    move.refresh_from_db()
    assert move.step == Step.PLACED
    assert str(lone.uuid) not in cluster.steering

    # when: the last step
    assert step(plan) is False

    # then: the old claim and holder pod are gone, the allocation points to the new claim
    assert cluster.names(f"mig-alloc-{lone.uuid}") == ([new], [new])
    lone.refresh_from_db()
    assert (lone.claim_generation, lone.claim_name, lone.kube_name) == (1, new, new)
    assert lone.claim_names == [new]
    assert where(lone) == [(1, move.to_start)]
    assert lone.placements.get().device_name == device_at(move.to_start)
    move.refresh_from_db()
    assert move.step == Step.DONE
    assert step_move_plan(plan_id=plan.pk).plan.status == MovePlan.Status.DONE
    # audited step by step; the owner told before and after, with the new claim's name
    verbs = list(
        AuditEvent.objects.filter(object_id=str(lone.pk), verb__startswith="move")
        .order_by("pk")
        .values_list("verb", flat=True)
    )
    assert verbs == ["move_announced", "move_claimed", "move_placed", "move"]
    moved = AuditEvent.objects.get(object_id=str(lone.pk), verb="move")
    assert (moved.before["claim"], moved.after["claim"]) == (old, new)
    texts = list(
        Notification.objects.filter(kind=Notification.Kind.ALLOCATION_MOVE)
        .order_by("pk")
        .values_list("text", flat=True)
    )
    assert len(texts) == 2
    assert f"claim {new} (it was {old})" in texts[1]
    # and the allocation's specs are the new claim's, as the reconcile pass will compare them
    [spec], pod = kube_sync.cluster_specs(lone)
    assert spec == cluster.claims[(ns, new)]
    assert pod.name == new


def test_every_step_run_twice_does_its_work_once(small: Small, cluster: FakeKube, settings: Any) -> None:
    # given
    lone, plan, move = fragmented(small, cluster, settings)
    ns = lone.namespace
    new = f"mig-alloc-{lone.uuid}-m1"
    # when: each step is delivered twice (a redelivered or resent task)
    step(plan)
    step(plan)
    step(plan)
    step(plan)
    cluster.allocate(ns, new, NODE, device_at(move.to_start))
    step(plan)
    step(plan)  # PLACED -> DONE already; a second copy of that step must not touch the new claim
    step(plan)
    assert cluster_moves.advance_move_on_cluster(move_id=move.pk).plan.status == MovePlan.Status.DONE
    # then
    assert cluster.names(f"mig-alloc-{lone.uuid}") == ([new], [new])
    assert AuditEvent.objects.filter(object_id=str(lone.pk), verb__startswith="move").count() == 4
    assert Notification.objects.filter(kind=Notification.Kind.ALLOCATION_MOVE).count() == 2
    assert where(lone) == [(1, move.to_start)]
    lone.refresh_from_db()
    assert lone.claim_generation == 1


def test_a_worker_that_died_mid_step_resumes_where_the_cluster_is(
    small: Small, cluster: FakeKube, settings: Any
) -> None:
    # given: the new claim is applied, then the worker dies before it could apply the holder pod
    lone, plan, move = fragmented(small, cluster, settings)
    ns = lone.namespace
    old, new = f"mig-alloc-{lone.uuid}", f"mig-alloc-{lone.uuid}-m1"
    step(plan)
    cluster.fail_on["apply_holder_pod"] = kube.KubeUnavailable("connection reset")
    with pytest.raises(kube.KubeUnavailable):
        step(plan)
    assert cluster.names(f"mig-alloc-{lone.uuid}") == ([old, new], [old])
    # when: the task runs again: the claim exists already, the pod is applied
    assert step(plan) is True
    assert cluster.names(f"mig-alloc-{lone.uuid}") == ([old, new], [old, new])
    cluster.allocate(ns, new, NODE, device_at(move.to_start))
    step(plan)
    # and: the last step dies after the old pod was deleted, before the old claim was
    cluster.fail_on["delete_resource_claim"] = kube.KubeUnavailable("timed out")
    with pytest.raises(kube.KubeUnavailable):
        step(plan)
    assert cluster.names(f"mig-alloc-{lone.uuid}") == ([old, new], [new])
    move.refresh_from_db()
    assert move.step == Step.PLACED
    # then: the next run deletes what is left and records the move once
    step(plan)
    assert cluster.names(f"mig-alloc-{lone.uuid}") == ([new], [new])
    assert step_move_plan(plan_id=plan.pk).plan.status == MovePlan.Status.DONE
    assert AuditEvent.objects.filter(object_id=str(lone.pk), verb="move").count() == 1


def test_a_new_claim_allocated_elsewhere_is_rolled_back_and_the_move_fails(
    small: Small, cluster: FakeKube, settings: Any
) -> None:
    # given
    lone, plan, move = fragmented(small, cluster, settings)
    ns = lone.namespace
    old, new = f"mig-alloc-{lone.uuid}", f"mig-alloc-{lone.uuid}-m1"
    step(plan)
    step(plan)
    elsewhere = 6 if move.to_start != 6 else 5
    # when: the scheduler took another slot
    cluster.allocate(ns, new, NODE, device_at(elsewhere))
    step(plan)
    # then: the new claim, its pod and steering are deleted, the old claim kept, the move and plan FAILED
    assert cluster.names(f"mig-alloc-{lone.uuid}") == ([old], [old])
    assert str(lone.uuid) not in cluster.steering
    move.refresh_from_db()
    plan.refresh_from_db()
    assert move.step == Step.FAILED
    assert move.reason == (
        f"The scheduler allocated the new claim at {NODE}/{device_at(elsewhere)}, not at {NODE}/gpu-1:{move.to_start}."
    )
    assert plan.status == MovePlan.Status.FAILED
    assert plan.status_message == f"Moving request #{lone.pk} failed: {move.reason}"
    assert where(lone) == [(0, 0)]
    lone.refresh_from_db()
    assert (lone.claim_generation, lone.claim_name) == (0, old)
    failed = AuditEvent.objects.get(object_id=str(lone.pk), verb="move_failed")
    assert failed.after["reason"] == move.reason
    # a late copy of the step changes nothing
    step(plan)
    assert cluster.names(f"mig-alloc-{lone.uuid}") == ([old], [old])


def test_a_new_claim_the_cluster_refuses_fails_the_move(small: Small, cluster: FakeKube, settings: Any) -> None:
    lone, plan, move = fragmented(small, cluster, settings)
    old = f"mig-alloc-{lone.uuid}"
    step(plan)
    cluster.fail_on["apply_resource_claim"] = kube.KubeRejected("exceeded quota: fatia-devices", status=403)
    assert step(plan) is False
    move.refresh_from_db()
    assert (move.step, move.reason) == (Step.FAILED, "The cluster refused the new claim: exceeded quota: fatia-devices")
    assert cluster.names(f"mig-alloc-{lone.uuid}") == ([old], [old])
    assert where(lone) == [(0, 0)]


def test_a_new_claim_never_allocated_fails_the_move_after_the_timeout(
    small: Small, cluster: FakeKube, settings: Any
) -> None:
    lone, plan, move = fragmented(small, cluster, settings)
    step(plan)
    assert step(plan) is True
    # when: the claim waited longer than FATIA_KUBE_ALLOCATION_TIMEOUT_S
    SliceMove.objects.filter(pk=move.pk).update(
        updated_at=move.updated_at - timedelta(seconds=settings.FATIA_KUBE_ALLOCATION_TIMEOUT_S + 1)
    )
    assert step(plan) is False
    move.refresh_from_db()
    assert move.step == Step.FAILED
    assert "did not allocate the new claim" in move.reason
    assert cluster.names(f"mig-alloc-{lone.uuid}") == ([f"mig-alloc-{lone.uuid}"],) * 2


def test_a_request_that_stops_being_movable_before_its_new_claim_is_placed_is_skipped(
    small: Small, cluster: FakeKube, settings: Any
) -> None:
    lone, plan, move = fragmented(small, cluster, settings)
    step(plan)
    step(plan)  # the new claim is applied
    Allocation.objects.filter(pk=lone.pk).update(movable=False)
    step(plan)
    move.refresh_from_db()
    assert move.step == Step.SKIPPED
    assert cluster.names(f"mig-alloc-{lone.uuid}") == ([f"mig-alloc-{lone.uuid}"],) * 2
    assert where(lone) == [(0, 0)]
    assert step_move_plan(plan_id=plan.pk).plan.status == MovePlan.Status.DONE


def test_the_reconcile_pass_leaves_a_move_under_way_alone(small: Small, cluster: FakeKube, settings: Any) -> None:
    # given: the new claim is applied and steered, the allocation has two placements meanwhile
    lone, plan, move = fragmented(small, cluster, settings)
    ns = lone.namespace
    old, new = f"mig-alloc-{lone.uuid}", f"mig-alloc-{lone.uuid}-m1"
    step(plan)
    step(plan)
    steered = dict(cluster.steering)
    # when
    report = reconcile_cluster()
    # then: nothing deleted, re-created or followed
    assert report == ReconcileReport()
    assert cluster.names(f"mig-alloc-{lone.uuid}") == ([old, new], [old, new])
    assert cluster.steering == steered
    # and once the move is done, the new claim is the allocation's own: nothing to fix either
    cluster.allocate(ns, new, NODE, device_at(move.to_start))
    step(plan)
    step(plan)
    assert reconcile_cluster() == ReconcileReport()
    assert cluster.names(f"mig-alloc-{lone.uuid}") == ([new], [new])


def test_the_task_waits_for_the_scheduler_with_a_retry(small: Small, cluster: FakeKube, settings: Any) -> None:
    _, plan, _ = fragmented(small, cluster, settings)
    advance_move_plan_task(plan.pk)
    with pytest.raises(Retry):
        advance_move_plan_task(plan.pk)


def test_on_kubernetes_only_requests_of_one_slice_move_and_static_pools_are_refused(
    small: Small, cluster: FakeKube, settings: Any, world: World
) -> None:
    # given: GPU 0 holds only a movable request of two slices
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=small.pool.pk,
        profile="1g.10gb",
        count=2,
        lease_hours=4,
        purpose="two",
        actor=world.alice,
    )
    if allocation.status == Allocation.Status.PENDING:
        services.approve_allocation(allocation_id=allocation.pk, actor=world.mallory)
    services.provision_allocation(allocation_id=allocation.pk)
    for start, placement in enumerate(allocation.placements.order_by("pk")):
        SlicePlacement.objects.filter(pk=placement.pk).update(gpu=small.gpu(0), start=start)
    Allocation.objects.filter(pk=allocation.pk).update(movable=True)
    small.active("1g.10gb", gpu=1, start=0)
    assert preview_compaction(pool=small.pool).moves  # the simulated backend would move it
    # when
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    # then
    assert preview_compaction(pool=small.pool).moves == []
    # and a static-MIG pool is not compacted
    static = services.create_node_pool(
        name="Static", slug="static", gpu_model=H100, actor=world.root, mig_mode=NodePool.MigMode.STATIC_AGENT
    )
    with pytest.raises(InvalidInput, match="static MIG"):
        start_compaction(pool_id=static.pk, actor=world.root)


def test_a_request_refused_for_scattered_slots_on_kubernetes_waits_for_a_rescue_plan(
    small: Small, cluster: FakeKube, settings: Any, world: World
) -> None:
    # given: GPU 0 holds a busy 3g.40gb at 0 and a movable 1g.10gb at 4; GPU 1 is full; GPU 2 has room for the 1g
    small.active("3g.40gb", gpu=0, start=0)
    blocker = small.active("1g.10gb", gpu=0, start=4, movable=True)
    small.active("4g.40gb", gpu=1, start=0)
    small.active("3g.40gb", gpu=1, start=4)
    small.active("1g.10gb", gpu=2, start=0)
    small.active("3g.40gb", gpu=2, start=4)
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    refused = small.approved("3g.40gb")
    # when
    waiting = kube_sync.start_provisioning(allocation_id=refused.pk)
    # then: it waits APPROVED for a plan that moves the blocker, instead of queueing
    assert waiting.status == Allocation.Status.APPROVED
    plan = MovePlan.objects.get(for_allocation=refused)
    assert plan.trigger == MovePlan.Trigger.RESCUE
    assert [(m.allocation_id, m.from_gpu.index, m.to_gpu.index) for m in plan.moves.all()] == [(blocker.pk, 0, 2)]
