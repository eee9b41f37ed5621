"""request_reconfiguration (issue 12, static MIG): checks the plan against the GPU's published layout, is
idempotent, marks the node reconfiguring (placement skips it) and queues its first step after commit."""

from __future__ import annotations

from typing import Any

import pytest

from allocations import services
from allocations.mig.reconfig import Operation
from allocations.models import Gpu, MigReconfiguration, Node
from allocations.placement import read_pool
from allocations.services.reconfiguration import finish_reconfiguration, move_reconfiguration, request_reconfiguration
from tenants.audit_text import describe_event
from tenants.errors import InvalidInput
from tenants.models import AuditEvent
from tests.conftest import World

DESTROY_CREATE = [Operation("destroy", "3g.40gb", 4), Operation("create", "1g.10gb", 4)]


@pytest.fixture
def static_gpu(world: World) -> Gpu:
    """GPU 0 of h100-node-0 in a static-agent pool, publishing two free 3g.40gb."""
    services.update_node_pool(pool_id=world.pool.pk, mig_mode="static-agent", actor=world.root)
    gpu = Gpu.objects.get(node__name="h100-node-0", index=0)
    gpu.static_instances = [
        {"profile": "3g.40gb", "start": 0, "size": 4, "uuid": "MIG-a", "device": "gpu-0-mig-3g40gb-9-0"},
        {"profile": "3g.40gb", "start": 4, "size": 4, "uuid": "MIG-b", "device": "gpu-0-mig-3g40gb-9-4"},
    ]
    gpu.save()
    return gpu


def test_a_reconfiguration_marks_the_node_and_queues_its_first_step(
    static_gpu: Gpu, world: World, django_capture_on_commit_callbacks: Any
) -> None:
    # when
    with django_capture_on_commit_callbacks() as queued:
        reconfiguration = request_reconfiguration(
            gpu_id=static_gpu.pk, operations=DESTROY_CREATE, reason="make room", actor=world.root
        )
    # then
    assert reconfiguration.status == MigReconfiguration.Status.PENDING
    assert reconfiguration.plan == [
        {"action": "destroy", "profile": "3g.40gb", "start": 4},
        {"action": "create", "profile": "1g.10gb", "start": 4},
    ]
    assert reconfiguration.targets == [["3g.40gb", 0], ["1g.10gb", 4]]
    assert len(queued) == 1
    assert Node.objects.get(name="h100-node-0").state == Node.State.RECONFIGURING
    assert {e.verb for e in AuditEvent.objects.all()} >= {"reconfiguration_requested", "node_reconfiguring"}
    assert describe_event(AuditEvent.objects.get(verb="reconfiguration_requested")) == (
        "root asked for a MIG layout change of h100-node-0/gpu-0 (destroy 3g.40gb at slot 4, create 1g.10gb at "
        "slot 4) for make room"
    )
    # and placement leaves the node alone meanwhile
    assert {node for node, _ in read_pool(world.pool).by_position} == {"h100-node-1"}


def test_asking_twice_returns_the_same_reconfiguration(static_gpu: Gpu) -> None:
    first = request_reconfiguration(gpu_id=static_gpu.pk, operations=DESTROY_CREATE, reason="one")
    again = request_reconfiguration(gpu_id=static_gpu.pk, operations=DESTROY_CREATE, reason="two")
    assert again.pk == first.pk
    assert MigReconfiguration.objects.count() == 1


def test_another_plan_for_a_gpu_being_reconfigured_is_refused(static_gpu: Gpu) -> None:
    request_reconfiguration(gpu_id=static_gpu.pk, operations=DESTROY_CREATE, reason="one")
    with pytest.raises(InvalidInput, match="being reconfigured already"):
        request_reconfiguration(gpu_id=static_gpu.pk, operations=[Operation("destroy", "3g.40gb", 0)], reason="two")


@pytest.mark.parametrize(
    ("operations", "message"),
    [
        ([], "at least one operation"),
        ([Operation("resize", "3g.40gb", 0)], "the action is create or destroy"),  # type: ignore[arg-type]
        ([Operation("create", "5g.50gb", 0)], "no MIG profile '5g.50gb'"),
        ([Operation("destroy", "1g.10gb", 2)], "no 1g.10gb instance at 2 to destroy"),
        ([Operation("create", "1g.10gb", 4)], "Operation 1: 1g.10gb at 4"),  # on top of the 3g.40gb at 4
        ([Operation("destroy", "3g.40gb", 4), Operation("create", "2g.20gb", 5)], "Operation 2: 2g.20gb at 5"),
    ],
)
def test_an_operation_that_is_no_valid_step_is_refused(static_gpu: Gpu, operations: Any, message: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        request_reconfiguration(gpu_id=static_gpu.pk, operations=operations, reason="bad")
    assert message in caught.value.errors["operations"][0]
    assert not MigReconfiguration.objects.exists()
    assert Node.objects.get(name="h100-node-0").state == Node.State.READY


def test_a_dynamic_pool_or_an_unknown_gpu_is_refused(world: World) -> None:
    gpu = Gpu.objects.get(node__name="h100-node-0", index=0)
    with pytest.raises(InvalidInput, match="DynamicMIG"):
        request_reconfiguration(gpu_id=gpu.pk, operations=DESTROY_CREATE, reason="dynamic")
    with pytest.raises(InvalidInput, match="No GPU"):
        request_reconfiguration(gpu_id=10**9, operations=DESTROY_CREATE, reason="none")


def test_a_step_moves_only_from_the_status_it_expects_and_finishing_makes_the_node_ready(static_gpu: Gpu) -> None:
    # given
    reconfiguration = request_reconfiguration(gpu_id=static_gpu.pk, operations=DESTROY_CREATE, reason="r")
    Status = MigReconfiguration.Status
    # when: two runs take the same step; only the first moves it
    moved = move_reconfiguration(
        reconfiguration_id=reconfiguration.pk, expected=Status.PENDING, status=Status.APPLYING, step="apply-1"
    )
    stale = move_reconfiguration(
        reconfiguration_id=reconfiguration.pk, expected=Status.PENDING, status=Status.APPLYING, step="apply-1"
    )
    # then
    assert moved is not None and moved.status == Status.APPLYING
    assert stale is None
    # when: finished with what the node now publishes
    published = [{"profile": "3g.40gb", "start": 0, "size": 4, "uuid": "MIG-a", "device": "d"}]
    done = finish_reconfiguration(reconfiguration_id=reconfiguration.pk, instances=published)
    # then
    assert done.status == Status.DONE and done.finished_at is not None
    static_gpu.refresh_from_db()
    assert static_gpu.static_instances == published
    assert Node.objects.get(name="h100-node-0").state == Node.State.READY
    # and finishing again changes nothing
    assert finish_reconfiguration(reconfiguration_id=reconfiguration.pk, instances=None).status == Status.DONE


# --- provisioning in a static-agent pool (allocations/cluster/static_provisioning.py; no cluster call) ---------


def _approved(world: World, profile: str, count: int = 1) -> Any:
    from allocations.models import Allocation

    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile=profile,
        count=count,
        lease_hours=2,
        purpose="static",
        actor=world.alice,
    )
    if allocation.status == Allocation.Status.PENDING:
        services.approve_allocation(allocation_id=allocation.pk, actor=world.mallory)
    return Allocation.objects.get(pk=allocation.pk)


def _static_pool(world: World, settings: Any, django_capture_on_commit_callbacks: Any) -> None:
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    services.update_node_pool(pool_id=world.pool.pk, mig_mode="static-agent", actor=world.root)
    # Every GPU publishes one free 7g.80gb, except GPU 3 of node 1, with a free 1g.10gb at slot 6 and a held 3g.
    Gpu.objects.filter(node__pool=world.pool).update(
        static_instances=[{"profile": "7g.80gb", "start": 0, "size": 8, "uuid": "MIG-x", "device": "d"}]
    )
    Gpu.objects.filter(node__name="h100-node-1", index=3).update(
        static_instances=[
            {"profile": "1g.10gb", "start": 6, "size": 1, "uuid": "MIG-free", "device": "gpu-3-mig-1g10gb-19-6"},
        ]
    )


def test_a_free_precreated_instance_is_planned_with_its_uuid(
    world: World, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    from allocations.cluster.sync import start_provisioning

    _static_pool(world, settings, django_capture_on_commit_callbacks)
    allocation = _approved(world, "1g.10gb")
    # when
    provisioned = start_provisioning(allocation_id=allocation.pk)
    # then
    assert provisioned.status == "provisioning"
    [placement] = provisioned.placements.all()
    assert (placement.gpu.node.name, placement.gpu.index, placement.start) == ("h100-node-1", 3, 6)
    assert (placement.mig_uuid, placement.device_name) == ("MIG-free", "gpu-3-mig-1g10gb-19-6")
    assert not MigReconfiguration.objects.exists()


def test_no_free_instance_requests_a_reconfiguration_and_a_lost_task_is_started_again(
    world: World, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from allocations.cluster.sync import start_provisioning

    _static_pool(world, settings, django_capture_on_commit_callbacks)
    allocation = _approved(world, "2g.20gb")
    # when
    with django_capture_on_commit_callbacks() as queued:
        waiting = start_provisioning(allocation_id=allocation.pk)
    # then: the cheapest plan creates the 2g.20gb next to the free 1g.10gb (elsewhere a 7g.80gb would have to go);
    # the request waits, saying so
    assert waiting.status == "approved"
    assert "Waiting for a MIG layout change" in waiting.status_message
    reconfiguration = MigReconfiguration.objects.get(allocation=allocation)
    assert [op["action"] for op in reconfiguration.plan] == ["create"]
    assert (reconfiguration.gpu.node.name, reconfiguration.gpu.index) == ("h100-node-1", 3)
    assert len(queued) == 1
    # when: provisioning runs again while the task is alive: nothing more
    with django_capture_on_commit_callbacks() as again:
        start_provisioning(allocation_id=allocation.pk)
    assert again == []
    # when: long past the step timeout (the task's message was lost), the stuck-request sweep provisions again
    MigReconfiguration.objects.filter(pk=reconfiguration.pk).update(step_started_at=timezone.now() - timedelta(hours=1))
    with django_capture_on_commit_callbacks() as restarted:
        start_provisioning(allocation_id=allocation.pk)
    assert len(restarted) == 1
    assert MigReconfiguration.objects.count() == 1


def test_no_gpu_with_room_even_after_a_reconfiguration_fails_the_request(
    world: World, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    from allocations.cluster.sync import start_provisioning

    _static_pool(world, settings, django_capture_on_commit_callbacks)
    services.set_tenant_quota(
        tenant_id=world.tenant_a.pk, pool_id=world.pool.pk, compute_slices_limit=80, memory_slices_limit=80,
        actor=world.root,
    )  # fmt: skip
    allocation = _approved(world, "7g.80gb", count=8)  # a node has 8 GPUs: 8 x 7g.80gb at most
    # given: after the approval, GPU 7 of each node left (a request no node could hold is refused when made)
    Gpu.objects.filter(node__pool=world.pool, index=7).delete()
    failed = start_provisioning(allocation_id=allocation.pk)
    assert failed.status == "failed"
    # (not queued: no layout of the pool could ever hold it, issue 15)
    assert "cannot hold 8 x 7g.80gb on one node even with every GPU free" in failed.status_message
    assert "where at most 7 x 7g.80gb fit" in failed.status_message  # what its owner may ask for instead
    assert not MigReconfiguration.objects.exists()


def test_the_dashboard_draws_free_precreated_instances_as_free_slots_of_their_profile(
    world: World, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    from django.test import Client

    # given: every GPU publishes a free 7g.80gb, but GPU 3 of node 1 a free 1g.10gb at slot 6
    _static_pool(world, settings, django_capture_on_commit_callbacks)
    client = Client()
    client.force_login(world.alice)
    # when
    html = client.get(f"/dashboard/pools/{world.pool.pk}/nodes/").content.decode()
    # then: 15 GPUs drawn as one free 7g.80gb each, one with a free 1g.10gb and 7 free memory slots
    assert html.count('data-precreated="7g.80gb"') == 15
    assert html.count('data-precreated="1g.10gb" data-start="6"') == 1
    assert html.count("data-free-slot=") == 7
