"""Fleet discovery against a real API server: list and watch Nodes, the driver's ResourceSlices and
ResourceClaims (allocations/cluster/watcher.py), written by the services (allocations/cluster/discovery.py).

Each test labels its nodes `fatia.test/run=<id>` and gives its pools selectors on that label, so nodes other
tests left in the session's cluster end up unmatched, not in these pools. The discovery threads talk to the API
server only; the test thread takes what they read (`pump`) and writes it, as the long-lived process does.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest
from kubernetes import client

from allocations import selectors, services
from allocations.cluster import sync as kube_sync
from allocations.cluster.fake_fleet import (
    gpu_uuid,
    publish_gpu_node,
    publish_slices,
    resource_slices_for_minors,
    set_device_counters,
)
from allocations.cluster.watcher import FleetDiscovery
from allocations.mig.catalog import load_catalog
from allocations.models import Allocation, ClaimedDevice, Gpu, Node, NodePool
from allocations.placement import plan_slices_for_scheduler, pool_capacity
from allocations.selectors import DashboardFilters
from tenants.models import AuditEvent
from tests.conftest import H100, World
from tests.kube.conftest import ControlPlane, KubeWorld, ready, wait_for
from tests.kube.test_control_plane import request_slice, wait_scheduled
from tests.kube.test_provisioning import placements, provision_and_wait, request

A100 = "NVIDIA A100-SXM4-40GB"
H200 = "NVIDIA H200"
RUN_LABEL = "fatia.test/run"


@pytest.fixture
def run_id() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture
def on_cluster(control_plane: ControlPlane, nvidia_device_classes: list[str], settings: Any) -> None:
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    settings.FATIA_KUBECONFIG = str(control_plane.portal_kubeconfig)


@pytest.fixture
def following(on_cluster: None) -> Iterator[FleetDiscovery]:
    """Discovery's threads following the cluster (the portal's identity); the test pumps."""
    discovery = FleetDiscovery(resync_s=3600)
    discovery.start()
    yield discovery
    discovery.stop()


def pump_until(discovery: FleetDiscovery, what: str, probe: Callable[[], Any], timeout: float = 30) -> Any:
    """Take what the threads read (and write it) until `probe` holds."""

    def step() -> Any:
        discovery.pump(timeout=0.2)
        return probe()

    return wait_for(what, step, timeout=timeout)


def pool_for(world: World, model_name: str, slug: str, run_id: str) -> NodePool:
    product = "NVIDIA-" + model_name.removeprefix("NVIDIA ").replace(" ", "-")
    return services.create_node_pool(
        name=slug,
        slug=slug,
        gpu_model=model_name,
        node_selector=f"nvidia.com/gpu.product={product},{RUN_LABEL}={run_id}",
        actor=world.root,
    )


def gpus_of(name: str) -> list[tuple[int, str, str]]:
    return list(Gpu.objects.filter(node__name=name).order_by("index").values_list("index", "uuid", "product"))


def test_a_three_model_fleet_is_discovered_with_gpus_by_minor(
    world: World, admin: client.ApiClient, on_cluster: None, run_id: str
) -> None:
    # given: pools for H100 and A100 by selector (none for H200), and one node of each model whose GPUs have
    # minors out of order and with gaps
    h100_pool = pool_for(world, H100, "h100-disc", run_id)
    a100_pool = pool_for(world, A100, "a100-disc", run_id)
    catalog = load_catalog()
    labels = {RUN_LABEL: run_id}
    h100 = publish_gpu_node(admin, catalog.model(H100), f"h100-{run_id}", [3, 0, 1], labels=labels)
    a100 = publish_gpu_node(admin, catalog.model(A100), f"a100-{run_id}", [6, 2], labels=labels)
    h200 = publish_gpu_node(admin, catalog.model(H200), f"h200-{run_id}", [0], labels=labels)

    # when
    report = FleetDiscovery().sync_once()

    # then
    assert {h100.name, a100.name} <= set(report.joined)
    assert h200.name in report.unmatched
    assert Node.objects.get(name=h100.name).pool_id == h100_pool.pk
    assert Node.objects.get(name=a100.name).pool_id == a100_pool.pk
    unmatched = Node.objects.get(name=h200.name)
    assert (unmatched.pool_id, unmatched.pool_note) == (None, "No pool's node selector matches its labels.")
    assert gpus_of(h100.name) == [(m, gpu_uuid(h100.name, m), H100) for m in (0, 1, 3)]
    assert gpus_of(a100.name) == [(m, gpu_uuid(a100.name, m), A100) for m in (2, 6)]
    assert gpus_of(h200.name) == [(0, gpu_uuid(h200.name, 0), H200)]
    node = Node.objects.get(name=h100.name)
    assert (node.driver_version, node.dynamic_mig) == ("580.95.5", True)
    # and: a second pass finds nothing new
    assert FleetDiscovery().sync_once().joined == []


def test_nodes_added_removed_and_relabelled_move_in_and_out_of_their_pool(
    world: World, admin: client.ApiClient, following: FleetDiscovery, run_id: str
) -> None:
    # given: discovery follows the cluster; an H100 pool by selector
    pool = pool_for(world, H100, "h100-disc", run_id)
    pump_until(following, "the first lists", lambda: following.view.ready)

    # when: a node is added
    node = publish_gpu_node(admin, load_catalog().model(H100), f"h100-{run_id}", [1, 0], labels={RUN_LABEL: run_id})
    # then: it joins, with its GPUs
    pump_until(following, "the node to join", lambda: Gpu.objects.filter(node__name=node.name).count() == 2)
    assert Node.objects.get(name=node.name).pool_id == pool.pk

    # when: it is relabelled out of the pool's selector
    core = client.CoreV1Api(admin)
    core.patch_node(node.name, body={"metadata": {"labels": {RUN_LABEL: "elsewhere"}}})
    # then
    pump_until(following, "the node to leave", lambda: Node.objects.get(name=node.name).pool_id is None)

    # when: relabelled back, then deleted
    core.patch_node(node.name, body={"metadata": {"labels": {RUN_LABEL: run_id}}})
    pump_until(following, "the node to rejoin", lambda: Node.objects.get(name=node.name).pool_id == pool.pk)
    core.delete_node(node.name)
    # then
    pump_until(following, "the node to be gone", lambda: Node.objects.get(name=node.name).state == Node.State.GONE)
    verbs = AuditEvent.objects.filter(object_type="node", object_id=str(Node.objects.get(name=node.name).pk))
    assert list(verbs.order_by("pk").values_list("verb", flat=True)) == [
        "node_joined",
        "node_left",
        "node_joined",
        "node_gone",
    ]


# --- what discovery finds changes where slices go ----------------------------------------------------------------


@pytest.fixture
def discovered_world(
    world: World,
    admin: client.ApiClient,
    on_cluster: None,
    namespace: Callable[[str], str],
    settings: Any,
    run_id: str,
) -> KubeWorld:
    """A pool by selector whose one node (two H100s, minors 1 and 0) discovery found, tenants onboarded."""
    settings.FATIA_KUBE_NAMESPACE_PREFIX = f"t{run_id[:6]}-"
    pool = pool_for(world, H100, "h100-disc", run_id)
    publish_gpu_node(admin, load_catalog().model(H100), f"h100-{run_id}", [1, 0], labels={RUN_LABEL: run_id})
    FleetDiscovery().sync_once()
    kw = KubeWorld(world, pool, [], settings.FATIA_KUBE_NAMESPACE_PREFIX)
    for tenant in (world.tenant_a, world.tenant_b):
        services.set_tenant_quota(
            tenant_id=tenant.pk, pool_id=pool.pk, compute_slices_limit=14, memory_slices_limit=16, actor=world.root
        )
        kube_sync.onboard_tenant(tenant_id=tenant.pk)
        wait_for(f"namespace of {tenant.slug}", partial(ready, admin, kw.namespace(tenant.slug)))
    return kw


def test_a_claim_made_outside_the_portal_is_shown_and_avoided(
    discovered_world: KubeWorld, admin: client.ApiClient, namespace: Callable[[str], str], run_id: str
) -> None:
    # given: with the database alone, a 4g.40gb (slot 0 only) would go to GPU 0
    kw = discovered_world
    node = f"h100-{run_id}"
    assert [
        (s.gpu_index, s.start) for s in plan_slices_for_scheduler(pool=kw.pool, profile="4g.40gb", count=1) or []
    ] == [(0, 0)]
    # when: someone's claim (not the portal's) takes a 3g.40gb on GPU 0, allocated by the scheduler
    ns = namespace("outside")
    request_slice(admin, ns, "train", "3g.40gb", gpu_uuid(node, 0))
    wait_scheduled(admin, ns, "train")
    FleetDiscovery().sync_once()
    # then: discovery keeps it as occupancy outside Fatia
    device = ClaimedDevice.objects.outside_fatia().get(namespace=ns)
    assert (device.claim_name, device.gpu, device.profile, device.start, device.size) == (
        "train",
        Gpu.objects.get(node__name=node, index=0),
        "3g.40gb",
        0,
        4,
    )
    # and: the dashboard shows it; to a member without its owner
    filters = DashboardFilters(pool_id=kw.pool.pk)
    gpu0 = selectors.dashboard_nodes(kw.world.alice, kw.pool.pk, filters).nodes[0].gpus[0]
    assert [(s.label, s.profile, s.start, s.namespace, s.claim_name) for s in gpu0.slices] == [
        ("outside Fatia", "3g.40gb", 0, "", "")
    ]
    # when: a 4g.40gb is requested through the portal
    allocation = provision_and_wait(request(kw, "4g.40gb").pk)
    # then: it was planned on GPU 1 and the scheduler allocated it there
    assert allocation.status == Allocation.Status.ACTIVE
    assert placements(allocation) == [(node, 1, 0, "gpu-1-mig-4g40gb-5-0")]


def test_changing_a_nodes_published_counters_changes_the_prediction(
    discovered_world: KubeWorld, admin: client.ApiClient, run_id: str
) -> None:
    # given: two 3g.40gb fit on a GPU by NVIDIA's figures
    kw = discovered_world
    node = f"h100-{run_id}"
    assert pool_capacity(kw.pool)["3g.40gb"] == 4
    # when: the node's driver publishes a new generation of slices in which a 3g.40gb takes 100 of the 132
    # multiprocessors
    resource = client.ResourceV1Api(admin)
    old = [s.metadata.name for s in resource.list_resource_slice(field_selector=f"spec.nodeName={node}").items]
    uid = client.CoreV1Api(admin).read_node(node).metadata.uid
    bodies = resource_slices_for_minors(load_catalog().model(H100), node, uid, [1, 0], generation=2)
    set_device_counters(bodies, "3g.40gb", {"multiprocessors": "100"})
    publish_slices(admin, bodies)
    for name in old:
        resource.delete_resource_slice(name)
    report = FleetDiscovery().sync_once()
    # then: the GPUs changed, one 3g.40gb fits per GPU, and two on one GPU are not planned
    assert report.gpus_changed == [node]
    assert pool_capacity(kw.pool)["3g.40gb"] == 2
    first = provision_and_wait(request(kw, "3g.40gb").pk)
    second = provision_and_wait(request(kw, "3g.40gb", tenant_b=True).pk)
    gpus = {placements(first)[0][1], placements(second)[0][1]}
    assert gpus == {0, 1}
    # and: the scheduler agrees: a third has no room anywhere
    third = provision_and_wait(request(kw, "3g.40gb").pk)
    assert third.status == Allocation.Status.QUEUED
