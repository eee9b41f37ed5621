"""Several claims waiting on one GPU at once, with the real kube-scheduler choosing the order and the slot.

A claim pins the profile and the GPU, not the slot (NVIDIA's MIG devices carry no placement attribute). The
portal predicts the slot the scheduler takes (allocations/mig/scheduler.py) and lets a GPU hold several
unallocated claims only while every order of allocating them fits them all; when the scheduler takes them in
another order than predicted, the recorded placements follow the cluster and the waiting plans are predicted
again. These tests hold the portal's record against the claims' real allocations.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from allocations import services
from allocations.cluster import sync as kube_sync
from allocations.costs import gpu_model_for
from allocations.mig.layout import geometry
from allocations.models import Allocation, SlicePlacement
from allocations.placement import PoolBusy
from tenants.models import AuditEvent
from tests.kube.conftest import KubeWorld, wait_for
from tests.kube.test_provisioning import claim_json, placements, provision_and_wait, request, settled

Status = Allocation.Status


@pytest.fixture(autouse=True)
def first_fit_slots(settings: Any) -> None:
    """These tests are about claims the scheduler places by first fit; steering a claim to another slot
    (test_steering.py) gives it its GPU alone while it waits, which would change what they set up."""
    settings.FATIA_KUBE_STEER_SLOTS = "off"


def allocated_devices(admin: client.ApiClient, kw: KubeWorld, allocation: Allocation) -> list[tuple[str, str]]:
    """(node, device) per request of the allocation's claim, as the scheduler allocated them."""
    claim = claim_json(admin, kw.namespace(allocation.tenant.slug), allocation.kube_name)
    return [(r["pool"], r["device"]) for r in claim["status"]["allocation"]["devices"]["results"]]


def recorded_devices(allocation: Allocation) -> list[tuple[str, str]]:
    return [(node, device) for node, _, _, device in placements(allocation)]


def assert_recorded_layouts_are_valid(kw: KubeWorld) -> None:
    geom = geometry(gpu_model_for(kw.pool.gpu_model))
    by_gpu: dict[int, list[tuple[str, int, bool]]] = {}
    live = SlicePlacement.objects.filter(allocation__status__in=Allocation.QUOTA_HOLDING, gpu__node__pool=kw.pool)
    for p in live:
        by_gpu.setdefault(p.gpu_id, []).append((p.profile, p.start, False))
    for gpu_id, instances in by_gpu.items():
        assert geom.is_valid([(name, start) for name, start, _ in instances]), (gpu_id, instances)


def test_claims_planned_before_any_is_allocated_land_where_predicted_whatever_the_order(
    kube_world: KubeWorld, admin: client.ApiClient
) -> None:
    # given: a 4g.40gb planned and its claim and pod applied, not yet seen allocated by the portal
    kw = kube_world
    big = request(kw, "4g.40gb")
    big = services.provision_allocation(allocation_id=big.pk)
    [(_, x, big_start, _)] = placements(big)
    assert big_start == 0

    # when: two 3g.40gb follow before the portal has seen any claim allocated
    threes = [services.provision_allocation(allocation_id=request(kw, "3g.40gb").pk) for _ in range(2)]

    # then: neither goes next to the waiting 4g (a 3g allocated first at slot 0 would leave it no room);
    # both wait on the other GPU, at slots 0 and 4, in whichever order the scheduler takes them
    assert [a.status for a in threes] == [Status.PROVISIONING, Status.PROVISIONING]
    plans = [placements(a)[0] for a in threes]
    assert {gpu for _, gpu, _, _ in plans} == {1 - x}
    assert sorted(start for _, _, start, _ in plans) == [0, 4]

    # when: a 1g.10gb comes now; then it waits (the GPU with the 4g would not be safe, the other GPU holds
    # as many waiting claims as a GPU may) instead of failing or taking slots promised to another claim
    small = request(kw, "1g.10gb")
    with pytest.raises(PoolBusy):
        services.provision_allocation(allocation_id=small.pk)
    assert Allocation.objects.get(pk=small.pk).status == Status.APPROVED

    # when: the scheduler allocates the three claims
    for allocation in (big, *threes):
        wait_for("the claim to be allocated", lambda a=allocation: settled(a.pk))

    # then: all active, each recorded exactly as the cluster allocated it
    for allocation in (big, *threes):
        active = Allocation.objects.get(pk=allocation.pk)
        assert active.status == Status.ACTIVE
        assert recorded_devices(active) == allocated_devices(admin, kw, active)
    assert_recorded_layouts_are_valid(kw)

    # when: the 1g.10gb is provisioned again (the task's retry)
    active_small = provision_and_wait(small.pk)

    # then: it sits beside the 4g, where predicted
    assert active_small.status == Status.ACTIVE
    assert placements(active_small)[0][1:3] == (x, 4)
    assert recorded_devices(active_small) == allocated_devices(admin, kw, active_small)
    assert not AuditEvent.objects.filter(verb="placement_differs", object_id=str(small.pk)).exists()
    # (the two 3g.40gb may have been allocated in either order: a "placement_differs" then records the swap)


def test_when_the_scheduler_takes_waiting_claims_in_another_order_the_record_follows_the_cluster(
    kube_world: KubeWorld, admin: client.ApiClient
) -> None:
    # given: GPU y taken whole, so that everything else goes to GPU x
    kw = kube_world
    whole = provision_and_wait(request(kw, "7g.80gb", tenant_b=True).pk)
    y = placements(whole)[0][1]
    x = 1 - y

    # given: a 1g.10gb planned at slot 0 of x whose holder pod is late (its claim is applied, its pod not)
    late = request(kw, "1g.10gb")
    late = kube_sync.start_provisioning(allocation_id=late.pk)
    kube_sync.apply_claim(allocation_id=late.pk)
    assert placements(late)[0][1:3] == (x, 0)

    # when: a 2g.20gb is planned after it (predicted at slot 2, after the 1g) and its pod is applied at once
    early = services.provision_allocation(allocation_id=request(kw, "2g.20gb").pk)
    assert placements(early)[0][1:3] == (x, 2)
    wait_for("the 2g claim to be allocated", lambda: settled(early.pk))

    # then: the scheduler, which has not seen the 1g's pod, gave the 2g slot 0; the record follows the
    # cluster, and the waiting 1g is predicted again at slot 2, where the scheduler will put it
    early = Allocation.objects.get(pk=early.pk)
    assert early.status == Status.ACTIVE
    assert allocated_devices(admin, kw, early) == [(kw.nodes[0].name, f"gpu-{x}-mig-2g20gb-14-0")]
    assert recorded_devices(early) == allocated_devices(admin, kw, early)
    assert placements(Allocation.objects.get(pk=late.pk))[0][1:3] == (x, 2)
    differs = AuditEvent.objects.get(verb="placement_differs", object_id=str(early.pk))
    node = kw.nodes[0].name
    assert differs.after["differences"] == [
        {"planned": f"{node}/gpu-{x}-mig-2g20gb-14-2", "allocated": f"{node}/gpu-{x}-mig-2g20gb-14-0"},
        {"replanned": f"{node}/gpu-{x}-mig-1g10gb-19-0", "to": f"{node}/gpu-{x}-mig-1g10gb-19-2"},
    ]
    assert_recorded_layouts_are_valid(kw)

    # when: the late pod arrives
    kube_sync.apply_holder_pod(allocation_id=late.pk)
    wait_for("the 1g claim to be allocated", lambda: settled(late.pk))

    # then: allocated where predicted the second time
    late = Allocation.objects.get(pk=late.pk)
    assert late.status == Status.ACTIVE
    assert recorded_devices(late) == allocated_devices(admin, kw, late) == [(node, f"gpu-{x}-mig-1g10gb-19-2")]
    assert AuditEvent.objects.filter(verb="placement_differs").count() == 1
