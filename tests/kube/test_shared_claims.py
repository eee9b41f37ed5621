"""Shares of whole GPUs on the real control plane (issue 13): the portal's claims ask for GPU memory (DRA
consumable capacity) with NVIDIA's sharing config, the real kube-scheduler puts several tenants' claims on one
GPU and refuses to over-commit its memory, discovery records each share, release frees it."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from kubernetes import client

from allocations import services
from allocations.cluster import kube
from allocations.cluster.fake_fleet import create_ready_node, publish_slices
from allocations.cluster.fake_shared import SHAREABLE_GPUS, shared_gfd_labels, shared_resource_slices
from allocations.cluster.reconcile import reconcile_cluster
from allocations.cluster.watcher import FleetDiscovery
from allocations.models import Allocation, ClaimedDevice, Gpu, Node, NodePool, Quota
from tests.allocations.test_concurrency import PARALLEL, run_in_parallel
from tests.conftest import World
from tests.kube.conftest import ControlPlane, wait_for
from tests.kube.shared_world import L4, L4_MIB, SharedWorld, approve, make_shared_world, share_request
from tests.kube.test_provisioning import claim_json, objects_of, provision_and_wait, settled

Status = Allocation.Status
GPU_CONFIG = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}
ATTRS = "device.attributes['gpu.nvidia.com']"
LONG = {"interval": "Long"}


@pytest.fixture
def time_sliced(world: World, control_plane: ControlPlane, admin: client.ApiClient, settings: Any) -> SharedWorld:
    return make_shared_world(world, control_plane, admin, settings, kind=NodePool.Kind.SHARED, interval="Long")


def results_of(admin: client.ApiClient, sw: SharedWorld, allocation: Allocation) -> list[dict[str, Any]]:
    """The scheduler's results for each claim of the allocation, in claim order."""
    ns = sw.namespace(allocation.tenant.slug)
    found = []
    for name in allocation.kube_claim_names:
        [result] = claim_json(admin, ns, name)["status"]["allocation"]["devices"]["results"]
        found.append(result)
    return found


def test_discovery_puts_the_shareable_gpus_in_the_pool_whose_selector_matches(time_sliced: SharedWorld) -> None:
    # given: a node of two L4s published in the driver's consumable-shares format, a time-sliced pool selecting it
    sw = time_sliced
    # then: fleet discovery made it the pool's, with each GPU's uuid, product and memory as published
    assert Node.objects.get(name=sw.node.name).pool_id == sw.pool.pk
    gpus = Gpu.objects.filter(node__name=sw.node.name).order_by("index")
    assert [(g.index, g.uuid, g.product, g.memory_mib) for g in gpus] == [
        (0, sw.node.gpu_uuids[0], L4, L4_MIB),
        (1, sw.node.gpu_uuids[1], L4, L4_MIB),
    ]


def test_a_node_whose_driver_publishes_its_gpus_without_consumable_shares_joins_no_shared_pool(
    time_sliced: SharedWorld, admin: client.ApiClient
) -> None:
    # given: a second node of L4s with the pool's label, whose driver runs without consumable shares: its GPUs are
    # published whole, `memory` without a request policy, no allowMultipleAllocations
    sw = time_sliced
    name = f"{sw.node.name}-plain"
    selector_key, run = sw.pool.node_selector.split("=")
    uid = create_ready_node(admin, name, {**shared_gfd_labels(SHAREABLE_GPUS[L4], 2), selector_key: run})
    bodies = shared_resource_slices(SHAREABLE_GPUS[L4], name, uid, 2)
    for device in bodies[0]["spec"]["devices"]:
        del device["allowMultipleAllocations"]
        del device["capacity"]["memory"]["requestPolicy"]
    publish_slices(admin, bodies)

    # when
    FleetDiscovery(resync_s=3600).sync_once()

    # then: it stays out of the time-sliced pool, saying why; the shareable node stays in
    plain = Node.objects.get(name=name)
    assert plain.pool_id is None
    assert plain.pool_note == (
        f"Its GPUs are not published as shareable (allowMultipleAllocations), which the shared pool(s) "
        f"{sw.pool.slug} need: run NVIDIA's DRA driver with consumable shares (--consumable-shares=memory) and "
        "Kubernetes' DRAConsumableCapacity on (docs/sharing.md)."
    )
    assert Node.objects.get(name=sw.node.name).pool_id == sw.pool.pk


def test_two_tenants_shares_land_on_one_gpu_each_in_its_namespace_with_the_pools_time_slicing(
    time_sliced: SharedWorld, admin: client.ApiClient
) -> None:
    # given
    sw = time_sliced
    a = approve(sw, share_request(sw, memory_mib=8192))
    b = approve(sw, share_request(sw, memory_mib=8192, tenant_b=True))

    # when: provisioned as the tasks do it, the real scheduler allocating the claims
    a, b = provision_and_wait(a.pk), provision_and_wait(b.pk)

    # then: both active, on GPU 0 of the node, each consuming 8 GiB of it under a share ID of its own
    assert (a.status, b.status) == (Status.ACTIVE, Status.ACTIVE)
    [ra], [rb] = results_of(admin, sw, a), results_of(admin, sw, b)
    assert (ra["pool"], ra["device"]) == (rb["pool"], rb["device"]) == (sw.node.name, "gpu-0")
    assert ra["consumedCapacity"] == rb["consumedCapacity"] == {"memory": "8Gi"}
    assert ra["shareID"] and rb["shareID"] and ra["shareID"] != rb["shareID"]
    # and: each claim in its tenant's namespace asks for 8 GiB of that GPU, with the pool's time-slicing
    claim = claim_json(admin, sw.namespace("team-b"), b.kube_name)
    assert claim["spec"]["devices"]["requests"] == [
        {
            "name": "share",
            "exactly": {
                "deviceClassName": "gpu.nvidia.com",
                "selectors": [{"cel": {"expression": f"{ATTRS}.uuid == '{sw.node.gpu_uuids[0]}'"}}],
                "allocationMode": "ExactCount",
                "count": 1,
                "capacity": {"requests": {"memory": "8Gi"}},
            },
        }
    ]
    assert claim["spec"]["devices"]["config"] == [
        {
            "requests": ["share"],
            "opaque": {
                "driver": "gpu.nvidia.com",
                "parameters": {**GPU_CONFIG, "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": LONG}},
            },
        }
    ]
    assert [(p.gpu.index, p.memory_mib, p.profile) for p in a.placements.select_related("gpu")] == [(0, 8192, "share")]

    # when: fleet discovery lists the claims
    FleetDiscovery(resync_s=3600).sync_once()

    # then: one row per share on GPU 0, with its share ID and the memory it consumed (no MIG memory slots), tied
    # to its request
    gpu0 = Gpu.objects.get(node__name=sw.node.name, index=0).pk
    rows = ClaimedDevice.objects.filter(node_name=sw.node.name).order_by("namespace")
    assert [
        (r.namespace, r.device, r.gpu_id, r.size, r.share_id, r.consumed_memory_mib, r.allocation_uuid) for r in rows
    ] == [
        (sw.namespace("team-a"), "gpu-0", gpu0, 0, ra["shareID"], 8192, a.uuid),
        (sw.namespace("team-b"), "gpu-0", gpu0, 0, rb["shareID"], 8192, b.uuid),
    ]


def test_an_mps_request_for_two_shares_has_a_claim_each_with_its_memory_limit_and_thread_share(
    world: World, control_plane: ControlPlane, admin: client.ApiClient, settings: Any
) -> None:
    # given: an MPS pool
    sw = make_shared_world(world, control_plane, admin, settings, kind=NodePool.Kind.MPS, gpu_count=1)
    allocation = approve(sw, share_request(sw, memory_mib=6000, count=2, thread_percentage=30))

    # when
    active = provision_and_wait(allocation.pk)

    # then: two claims, one holder pod referencing both, both shares allocated on the one GPU
    assert active.status == Status.ACTIVE
    names = [f"{active.kube_name}-share-0", f"{active.kube_name}-share-1"]
    assert active.kube_claim_names == names
    ns = sw.namespace("team-a")
    assert objects_of(admin, ns, active) == (names, [active.kube_name])
    results = results_of(admin, sw, active)
    assert [(r["device"], r["consumedCapacity"]) for r in results] == [("gpu-0", {"memory": "6000Mi"})] * 2
    # and: NVIDIA's MPS settings: the share's memory as the pinned limit, its active-thread percentage
    for name in names:
        assert claim_json(admin, ns, name)["spec"]["devices"]["config"][0]["opaque"]["parameters"] == {
            **GPU_CONFIG,
            "sharing": {
                "strategy": "MPS",
                "mpsConfig": {"defaultActiveThreadPercentage": 30, "defaultPinnedDeviceMemoryLimit": "6000Mi"},
            },
        }


def outside_claim(ns: str, gpu_uuid: str, memory_mib: int) -> None:
    """A claim and pod made outside the portal (no allocation label) for `memory_mib` of one GPU."""
    kube.apply_resource_claim(
        kube.ClaimSpec(
            namespace=ns,
            name="outside",
            allocation_uuid="",
            tenant_slug="outside",
            requests=(kube.DeviceRequestSpec(name="share", profile="", gpu_uuid=gpu_uuid, memory_mib=memory_mib),),
            device_class="gpu.nvidia.com",
        )
    )
    kube.apply_holder_pod(
        kube.HolderPodSpec(
            namespace=ns, name="outside", claim_names=("outside",), node_name="", allocation_uuid="", tenant_slug="x"
        )
    )


def unschedulable(admin: client.ApiClient, ns: str) -> bool:
    pod = client.CoreV1Api(admin).read_namespaced_pod("outside", ns)
    conditions = pod.status.conditions or []
    return any(c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable" for c in conditions)


def test_the_scheduler_refuses_a_share_that_would_over_commit_a_gpu_until_release_frees_the_memory(
    time_sliced: SharedWorld, admin: client.ApiClient, namespace: Any
) -> None:
    # given: 16 GiB of GPU 0 held through the portal
    sw = time_sliced
    held = provision_and_wait(approve(sw, share_request(sw, memory_mib=16384)).pk)
    assert results_of(admin, sw, held)[0]["device"] == "gpu-0"

    # when: a claim made outside the portal asks for 8 GiB more of that GPU (24 GiB > its 22.5 GiB)
    ns = namespace("outside")
    outside_claim(ns, sw.node.gpu_uuids[0], 8192)

    # then: the scheduler leaves it unallocated, its pod unschedulable
    wait_for("the outside pod to be found unschedulable", lambda: unschedulable(admin, ns))
    assert claim_json(admin, ns, "outside").get("status", {}).get("allocation") is None

    # when: the portal's share is released
    services.release_allocation(allocation_id=held.pk, actor=sw.world.alice)
    released = services.provisioning.teardown_allocation(allocation_id=held.pk)

    # then: its quota and placements are gone, and the scheduler gives the freed memory to the waiting claim
    assert released.status == Status.RELEASED
    assert released.placements.count() == 0
    quota = Quota.objects.get(tenant=sw.world.tenant_a, pool=sw.pool)
    assert (quota.compute_slices_used, quota.memory_slices_used) == (0, 0)
    assert objects_of(admin, sw.namespace("team-a"), released) == ([], [])

    def allocated() -> dict[str, Any] | None:
        allocation: dict[str, Any] | None = claim_json(admin, ns, "outside").get("status", {}).get("allocation")
        return allocation

    result = wait_for("the outside claim to be allocated", allocated)
    assert [(r["device"], r["consumedCapacity"]) for r in result["devices"]["results"]] == [
        ("gpu-0", {"memory": "8Gi"})
    ]


def test_the_portal_counts_memory_that_claims_made_outside_it_hold_on_a_gpu(
    time_sliced: SharedWorld, admin: client.ApiClient, namespace: Any
) -> None:
    # given: a claim made outside the portal holds 16 GiB of GPU 0, and discovery has seen it
    sw = time_sliced
    ns = namespace("outside")
    outside_claim(ns, sw.node.gpu_uuids[0], 16384)
    wait_for("the outside claim to be allocated", lambda: (c := kube.read_claim(ns, "outside")) and c.allocation)
    FleetDiscovery(resync_s=3600).sync_once()
    assert ClaimedDevice.objects.get(namespace=ns).consumed_memory_mib == 16384

    # when: a request for 8 GiB is provisioned (GPU 0 has 6.5 GiB left)
    active = provision_and_wait(approve(sw, share_request(sw, memory_mib=8192)).pk)

    # then: it was planned on GPU 1, where the scheduler allocated it
    assert [p.gpu.index for p in active.placements.select_related("gpu")] == [1]
    assert [r["device"] for r in results_of(admin, sw, active)] == ["gpu-1"]


def test_reconcile_leaves_active_shares_alone_and_recreates_a_share_claim_deleted_by_hand(
    time_sliced: SharedWorld, admin: client.ApiClient
) -> None:
    # given: an active request for two shares (two claims)
    sw = time_sliced
    active = provision_and_wait(approve(sw, share_request(sw, memory_mib=4096, count=2)).pk)
    ns = sw.namespace("team-a")

    # when: a pass runs
    report = reconcile_cluster()

    # then: the claims read back are what the portal applies (selectors included): nothing to do
    assert (report.recreated, report.moved, report.orphans, report.deleted_changed) == ([], [], [], [])

    # when: one share's claim is deleted by hand (its pod with it, as the pod cannot run without it)
    client.CoreV1Api(admin).delete_namespaced_pod(active.kube_name, ns, grace_period_seconds=0)
    client.ResourceV1Api(admin).delete_namespaced_resource_claim(active.kube_claim_names[1], ns)
    wait_for("the claim to be gone", lambda: kube.read_claim(ns, active.kube_claim_names[1]) is None)
    report = reconcile_cluster()

    # then: it is applied again with the pod, and the scheduler gives it 4 GiB of its GPU again
    assert report.recreated == [active.pk]
    assert objects_of(admin, ns, active) == (active.kube_claim_names, [active.kube_name])
    wait_for(
        "the claim to be allocated again",
        lambda: (c := kube.read_claim(ns, active.kube_claim_names[1])) and c.allocation,
    )
    assert [(r["device"], r["consumedCapacity"]) for r in results_of(admin, sw, active)] == [
        ("gpu-0", {"memory": "4Gi"})
    ] * 2


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_approvals_never_over_commit_a_gpus_memory(
    world: World, control_plane: ControlPlane, admin: client.ApiClient, settings: Any
) -> None:
    # given: two L4s (22.5 GiB each: five 4 GiB shares fit on each) and 20 pending requests for 4 GiB, 10 per tenant
    sw = make_shared_world(world, control_plane, admin, settings, kind=NodePool.Kind.SHARED)
    pending = [share_request(sw, memory_mib=4096, tenant_b=i % 2 == 1) for i in range(PARALLEL)]

    def approve_and_provision(i: int) -> str:
        approve(sw, pending[i])
        return services.provision_allocation(allocation_id=pending[i].pk).status

    # when: managers approve all 20 at once, each approval provisioned at once, as 20 workers would
    outcomes = run_in_parallel(approve_and_provision)

    # then: exactly ten were planned (five per GPU), the other ten failed for want of room, quota given back
    assert outcomes == Counter({Status.PROVISIONING: 10, Status.FAILED: 10})
    planned = [a for a in Allocation.objects.filter(pk__in=[p.pk for p in pending]) if a.status == Status.PROVISIONING]
    for allocation in planned:
        wait_for("the claim to be allocated", lambda a=allocation: settled(a.pk))
    active = list(Allocation.objects.filter(pk__in=[a.pk for a in planned], status=Status.ACTIVE).order_by("pk"))
    assert len(active) == 10

    # and: the cluster agrees with the record: each share on its planned GPU, 4 GiB consumed, five per GPU
    by_device: Counter[str] = Counter()
    for allocation in active:
        [result] = results_of(admin, sw, allocation)
        [placement] = allocation.placements.select_related("gpu")
        assert (result["device"], result["consumedCapacity"]) == (f"gpu-{placement.gpu.index}", {"memory": "4Gi"})
        by_device[result["device"]] += 1
    assert by_device == Counter({"gpu-0": 5, "gpu-1": 5})
    assert 5 * 4096 <= L4_MIB < 6 * 4096

    # and: the failed ones hold nothing, in the database or the cluster
    for allocation in Allocation.objects.filter(pk__in=[p.pk for p in pending], status=Status.FAILED):
        assert allocation.placements.count() == 0
        assert objects_of(admin, sw.namespace(allocation.tenant.slug), allocation) == ([], [])

    # and: each tenant's quota holds exactly what its active shares cost
    for tenant in (world.tenant_a, world.tenant_b):
        quota = Quota.objects.get(tenant=tenant, pool=sw.pool)
        mine = [a for a in active if a.tenant_id == tenant.pk]
        assert (quota.compute_slices_used, quota.memory_slices_used) == (
            sum(a.compute_slices for a in mine),
            sum(a.memory_slices for a in mine),
        )
