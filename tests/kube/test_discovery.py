"""Fleet discovery against a real API server: list and watch Nodes, the driver's ResourceSlices and
ResourceClaims (allocations/cluster/watcher.py), written by the services (allocations/cluster/discovery.py).

Each test labels its nodes `fatia.test/run=<id>` and gives its pools selectors on that label, so nodes other
tests left in the session's cluster end up unmatched, not in these pools. The discovery threads talk to the API
server only; the test thread takes what they read (`pump`) and writes it, as the long-lived process does.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from allocations import services
from allocations.cluster.fake_fleet import gpu_uuid, publish_gpu_node
from allocations.cluster.watcher import FleetDiscovery
from allocations.mig.catalog import load_catalog
from allocations.models import Gpu, Node, NodePool
from tenants.models import AuditEvent
from tests.conftest import H100, World
from tests.kube.conftest import ControlPlane, wait_for

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
