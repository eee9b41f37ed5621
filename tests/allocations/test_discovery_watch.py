"""The discovery process (allocations/cluster/watcher.py) with the Kubernetes adapter faked at its boundary:
list then watch from the list's resourceVersion, resume a broken watch where it stopped, list again on 410
Gone, and write what the events change. tests/kube/test_discovery.py runs it against a real API server."""

from __future__ import annotations

import json
import queue
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from allocations import services
from allocations.cluster import kube, watcher
from allocations.cluster.fake_fleet import gfd_labels, resource_slices_for_minors
from allocations.cluster.watcher import FleetDiscovery
from allocations.mig.catalog import load_catalog
from allocations.models import ClaimedDevice, Gpu, Node
from allocations.services.tenant_namespaces import assign_namespace
from tests.conftest import H100, World


def slices_of(node: str, minors: list[int]) -> list[kube.SliceInfo]:
    bodies = resource_slices_for_minors(load_catalog().model(H100), node, "uid", minors)
    out = []
    for i, body in enumerate(bodies):
        body = json.loads(json.dumps(body))
        body["metadata"]["name"] = f"{node}-{i}"
        out.append(kube.slice_info(body))
    return out


def h100_node(name: str) -> kube.NodeInfo:
    return kube.NodeInfo(name, gfd_labels(load_catalog().model(H100), 2))


class FakeAdapter:
    """Lists what `objects` holds; each watch plays the next script of its collection: a list of events,
    or an exception to raise after them. When the scripts run out, discovery is stopped."""

    def __init__(self, objects: dict[str, list[Any]], scripts: dict[str, list[list[Any]]]) -> None:
        self.objects = objects
        self.scripts = scripts
        self.calls: list[tuple[str, ...]] = []
        self.versions = 0
        self.discovery: FleetDiscovery | None = None

    def list_collection(self, kind: str, each: Callable[[Any], None]) -> str:
        self.versions += 1
        self.calls.append(("list", kind))
        for obj in self.objects.get(kind, []):
            each(obj)
        return f"{kind}-rv{self.versions}"

    def watch_collection(self, kind: str, resource_version: str, *, timeout_s: int) -> Iterator[kube.WatchEvent]:
        self.calls.append(("watch", kind, resource_version))
        scripts = self.scripts.get(kind, [])
        if not scripts:
            assert self.discovery is not None
            self.discovery.stop()
            return
        for step in scripts.pop(0):
            if isinstance(step, Exception):
                raise step
            yield step


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watcher, "RETRY_S", (0.0,))


def follow(adapter: FakeAdapter, kind: str) -> FleetDiscovery:
    discovery = FleetDiscovery(adapter, resync_s=3600)
    adapter.discovery = discovery
    discovery._follow(kind)  # the collection's thread, run here until the scripts are played
    return discovery


def test_a_410_gone_leads_to_a_new_list_and_a_watch_from_its_version() -> None:
    # given: the first watch finds its resourceVersion compacted away
    adapter = FakeAdapter({"nodes": [h100_node("n1")]}, {"nodes": [[kube.KubeGone("too old", status=410)]]})
    # when
    discovery = follow(adapter, "nodes")
    # then
    assert adapter.calls == [
        ("list", "nodes"),
        ("watch", "nodes", "nodes-rv1"),
        ("list", "nodes"),
        ("watch", "nodes", "nodes-rv2"),
    ]
    assert discovery.lists["nodes"] == 2
    assert [type(m).__name__ for m in drain(discovery)] == ["_Listed", "_Listed"]


def test_a_watch_that_ends_or_breaks_resumes_from_the_last_version_it_saw() -> None:
    # given: a watch that gives an event and a bookmark, then ends; another that breaks after an event
    node = h100_node("n1")
    adapter = FakeAdapter(
        {"nodes": []},
        {
            "nodes": [
                [kube.WatchEvent("ADDED", node, "7"), kube.WatchEvent("BOOKMARK", None, "9")],
                [kube.WatchEvent("MODIFIED", node, "12"), kube.KubeUnavailable("connection reset")],
            ]
        },
    )
    # when
    discovery = follow(adapter, "nodes")
    # then: no list again, each watch from where the last one stopped (the bookmark's version included)
    assert adapter.calls == [
        ("list", "nodes"),
        ("watch", "nodes", "nodes-rv1"),
        ("watch", "nodes", "9"),
        ("watch", "nodes", "12"),
    ]
    assert [getattr(m, "event", None) and m.event.kind for m in drain(discovery)] == [None, "ADDED", "MODIFIED"]


def drain(discovery: FleetDiscovery) -> list[Any]:
    out = []
    while True:
        try:
            out.append(discovery.queue.get_nowait())
        except queue.Empty:
            return out


def test_watch_events_reach_the_database_node_gone_slices_changed_claims(world: World) -> None:
    # given: a pool by selector, and a cluster of one H100 node with two GPUs
    pool = services.create_node_pool(
        name="H100 discovered",
        slug="h100-disc",
        gpu_model=H100,
        node_selector="nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3",
        actor=world.root,
    )
    claim = kube.ClaimInfo(
        "ml", "train", "u1", {}, (kube.AllocatedDevice("r", kube.DRIVER, "n1", "gpu-1-mig-3g40gb-9-4"),)
    )
    adapter = FakeAdapter({"nodes": [h100_node("n1")], "slices": slices_of("n1", [0, 1]), "claims": [claim]}, {})
    discovery = FleetDiscovery(adapter, resync_s=3600)
    for kind in watcher.KINDS:
        discovery._take(watcher._Listed(kind, [watcher._convert(kind, o) for o in adapter.objects[kind]]))
    # when: the lists are written
    report = discovery._flush()
    # then
    assert report.joined == ["n1"]
    assert Node.objects.get(name="n1").pool_id == pool.pk
    assert ClaimedDevice.objects.outside_fatia().get().gpu == Gpu.objects.get(node__name="n1", index=1)
    # when: the driver republishes with a third GPU, the claim goes, then the node
    for summary in slices_of("n1", [0, 1, 2]):
        discovery._take(watcher._Changed("slices", kube.WatchEvent("ADDED", watcher._convert("slices", summary), "20")))
    discovery._take(watcher._Changed("claims", kube.WatchEvent("DELETED", claim, "21")))
    report = discovery._flush()
    # then
    assert report.gpus_changed == ["n1"]
    assert Gpu.objects.filter(node__name="n1").count() == 3
    assert not ClaimedDevice.objects.exists()
    # when: a status heartbeat (same labels), then the node is deleted
    discovery._take(watcher._Changed("nodes", kube.WatchEvent("MODIFIED", h100_node("n1"), "22")))
    assert discovery._flush().updated == []
    discovery._take(watcher._Changed("nodes", kube.WatchEvent("DELETED", h100_node("n1"), "23")))
    # then
    assert discovery._flush().gone == ["n1"]
    assert Node.objects.get(name="n1").state == Node.State.GONE


# What kube-apiserver 1.37.2 answered a watch of nodes from a resourceVersion older than its watch cache (it had
# just restarted: `deploy/control-plane.sh stop-apiserver` + `start-apiserver`, then a watch from the version of
# a list made before). Its watch cache starts at the version it was started at, so every watch that resumes from
# an older one gets this, as does one whose version etcd compacted away.
TOO_OLD = (
    '{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
    '"message":"too old resource version: 286 (291)","reason":"Expired","code":410}}'
)


def test_the_adapter_reads_the_api_servers_410_event_as_gone() -> None:
    with pytest.raises(kube.KubeGone) as raised:
        kube._watch_event("nodes", json.loads(TOO_OLD), kube.node_info)
    assert (raised.value.status, raised.value.message) == (410, "nodes watch: too old resource version: 286 (291)")


def test_the_portals_claims_in_a_tenants_own_namespace_are_linked_to_their_request(world: World) -> None:
    # given: team A owns namespace "ml" (issue 17); the same label on a claim there and on one in "elsewhere"
    assign_namespace(tenant_id=world.tenant_a.pk, name="ml", actor=world.root)
    label = {kube.LABEL_ALLOCATION: str(uuid.uuid4())}

    def claim(ns: str, device: str) -> kube.ClaimInfo:
        return kube.ClaimInfo(ns, "c", ns, label, (kube.AllocatedDevice("r", kube.DRIVER, "n1", device),))

    adapter = FakeAdapter(
        {
            "nodes": [h100_node("n1")],
            "slices": slices_of("n1", [0, 1]),
            "claims": [claim("ml", "gpu-0-mig-1g10gb-19-0"), claim("elsewhere", "gpu-1-mig-1g10gb-19-0")],
        },
        {},
    )
    # when: discovery lists the cluster
    FleetDiscovery(adapter, resync_s=3600).sync_once()
    # then: the claim in the owned namespace is the request's; the other is outside Fatia, whatever its label says
    rows = dict(ClaimedDevice.objects.values_list("namespace", "allocation_uuid"))
    assert {ns: str(u) if u else None for ns, u in rows.items()} == {
        "ml": label[kube.LABEL_ALLOCATION],
        "elsewhere": None,
    }
