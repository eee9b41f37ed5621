"""Steering kube-scheduler to the slot our placement policy chose (FATIA_KUBE_STEER_SLOTS).

A claim can pin the GPU but not the slot; the scheduler takes the first device whose counters fit. Where our
policy wants another slot (a 3g.40gb at slot 4, where it strands nothing, instead of 0), the devices the scheduler
would take first are tainted with DeviceTaintRules while the claim waits, and the GPU takes no other claim
meanwhile. Against the real control plane: the scheduler lands where we planned, and the taints go away.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
from kubernetes import client

from allocations import services
from allocations.cluster import kube
from allocations.cluster import sync as kube_sync
from allocations.cluster.reconcile import reconcile_cluster
from allocations.models import Allocation
from tenants.models import AuditEvent
from tests.kube.conftest import KubeWorld, wait_for
from tests.kube.test_concurrent_provisioning import allocated_devices, recorded_devices
from tests.kube.test_provisioning import placements, provision_and_wait, request, settled

Status = Allocation.Status


@pytest.fixture(autouse=True)
def steer_slots(settings: Any) -> None:
    settings.FATIA_KUBE_STEER_SLOTS = "always"


def steering_rules(admin: client.ApiClient, allocation: Allocation) -> list[tuple[str, str, str]]:
    """(pool, device, taint value) of the DeviceTaintRules labelled with the allocation."""
    rules = client.ResourceV1Api(admin).list_device_taint_rule(
        label_selector=f"{kube.LABEL_ALLOCATION}={allocation.uuid}"
    )
    return sorted((r.spec.device_selector.pool, r.spec.device_selector.device, r.spec.taint.value) for r in rules.items)


def test_a_3g_is_steered_to_slot_4_and_the_taints_go_once_it_is_allocated(
    kube_world: KubeWorld, admin: client.ApiClient
) -> None:
    # given: an empty node; our policy puts a 3g.40gb at slot 4 (at 0 it would strand slot 7 for good)
    kw = kube_world
    node = kw.nodes[0].name
    three = kube_sync.start_provisioning(allocation_id=request(kw, "3g.40gb").pk)
    [(_, gpu, start, device)] = placements(three)
    assert start == 4
    assert list(three.placements.values_list("blocked_starts", flat=True)) == [[0]]

    # when: provisioned (taints, claim, pod)
    kube_sync.apply_steering(allocation_id=three.pk)
    kube_sync.apply_claim(allocation_id=three.pk)
    kube_sync.apply_holder_pod(allocation_id=three.pk)

    # then: the device first fit would take is tainted, for this allocation
    assert steering_rules(admin, three) == [(node, f"gpu-{gpu}-mig-3g40gb-9-0", str(three.uuid))]

    # when: the scheduler allocates the claim
    wait_for("the claim to be allocated", lambda: settled(three.pk))

    # then: exactly where planned, and the taints are gone
    active = Allocation.objects.get(pk=three.pk)
    assert active.status == Status.ACTIVE
    assert allocated_devices(admin, kw, active) == [(node, device)] == recorded_devices(active)
    assert not AuditEvent.objects.filter(verb="placement_differs").exists()
    assert steering_rules(admin, active) == []
    assert list(active.placements.values_list("blocked_starts", flat=True)) == [[]]
    audit = AuditEvent.objects.get(verb="provision", object_id=str(three.pk))
    assert audit.after["steer_past"] == [f"{node}/gpu-{gpu}:0"]


def test_a_gpu_with_a_steered_claim_waiting_takes_no_other_claim(kube_world: KubeWorld) -> None:
    # given: a 3g.40gb steered to slot 4 of a GPU, its claim not allocated yet
    kw = kube_world
    three = kube_sync.start_provisioning(allocation_id=request(kw, "3g.40gb").pk)
    [(_, gpu, _, _)] = placements(three)

    # when: a second 3g.40gb is planned (first fit at slot 0 of that GPU would break the steering)
    second = kube_sync.start_provisioning(allocation_id=request(kw, "3g.40gb").pk)

    # then: it goes to the other GPU
    [(_, other_gpu, _, _)] = placements(second)
    assert other_gpu == 1 - gpu


def test_steering_taints_left_by_a_dead_worker_are_deleted_by_reconcile(
    kube_world: KubeWorld, admin: client.ApiClient
) -> None:
    # given: a steered 3g.40gb, active; then its taints are applied again, as a worker that died after
    # activation but before deleting them would have left them
    kw = kube_world
    allocation = request(kw, "3g.40gb")
    planned = kube_sync.start_provisioning(allocation_id=allocation.pk)
    spec = kube_sync.steering_spec(planned)
    assert spec is not None
    active = provision_and_wait(allocation.pk)
    assert active.status == Status.ACTIVE
    kube.apply_steering(spec)
    assert len(steering_rules(admin, active)) == 1

    # when
    report = reconcile_cluster()

    # then
    assert report.steering_deleted == [str(active.uuid)]
    wait_for("the taints to be gone", lambda: steering_rules(admin, active) == [])


def test_adaptive_steers_a_request_that_arrives_alone_and_not_a_burst(
    kube_world: KubeWorld, admin: client.ApiClient, settings: Any
) -> None:
    # given: steering adaptive (the default)
    settings.FATIA_KUBE_STEER_SLOTS = "adaptive"
    kw = kube_world
    node = kw.nodes[0].name
    # when: a 3g.40gb arrives alone
    alone = provision_and_wait(request(kw, "3g.40gb").pk)
    # then: the cluster allocated it at slot 4, steered past slot 0
    [(_, gpu, start, device)] = placements(alone)
    assert (alone.status, start) == (Status.ACTIVE, 4)
    assert allocated_devices(admin, kw, alone) == [(node, device)]

    # when: two 3g.40gb approved together (a burst), then provisioned
    burst = [request(kw, "3g.40gb"), request(kw, "3g.40gb", tenant_b=True)]
    for allocation in burst:
        services.provision_allocation(allocation_id=allocation.pk)
    for allocation in burst:
        wait_for("the claim to be allocated", partial(settled, allocation.pk))

    # then: neither is steered: first fit, beside the steered one and then on the other GPU, where the cluster put them
    first, second = (Allocation.objects.get(pk=a.pk) for a in burst)
    assert [(g, s) for _, g, s, _ in placements(first) + placements(second)] == [(gpu, 0), (1 - gpu, 0)]
    for allocation in (first, second):
        assert allocation.status == Status.ACTIVE
        assert allocated_devices(admin, kw, allocation) == recorded_devices(allocation)
        assert list(allocation.placements.values_list("blocked_starts", flat=True)) == [[]]
        assert "a burst" in AuditEvent.objects.get(verb="provision", object_id=str(allocation.pk)).after["steering"]
