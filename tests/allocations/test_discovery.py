"""Fleet discovery's services (allocations/cluster/discovery.py) and the pure parts under them: slices as the
driver publishes them (fake_fleet's format, NVIDIA's example) become Node, Gpu and GpuFigures rows; pools take
nodes by their node selector. No API server here: tests/kube/test_discovery.py runs the real watch."""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from allocations import selectors, services
from allocations.cluster import discovery, kube
from allocations.cluster.discovery import ClaimView, DiscoveredNode
from allocations.cluster.fake_fleet import gfd_labels, gpu_uuid, resource_slices_for_minors
from allocations.cluster.labels import InvalidSelector, parse_selector
from allocations.cluster.published import DriverPools, Published, summarize
from allocations.mig.catalog import load_catalog
from allocations.models import Allocation, ClaimedDevice, Gpu, GpuFigures, Node, NodePool
from tenants.errors import InvalidInput
from tenants.models import AuditEvent
from tests.conftest import H100, World

A100 = "NVIDIA A100-SXM4-40GB"
EXAMPLE = Path(__file__).parents[1] / "kube" / "data" / "nvidia-dra-dynamic-mig-2x-h100-80gb.json"
H100_SELECTOR = "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3"


def published(model_name: str, node: str, minors: list[int], *, generation: int = 1) -> Published:
    """What discovery assembles from the driver's slices for `node` (fake_fleet's bodies, as the API returns them)."""
    pools = DriverPools()
    bodies = resource_slices_for_minors(load_catalog().model(model_name), node, "uid", minors, generation=generation)
    for i, body in enumerate(bodies):
        body = json.loads(json.dumps(body))
        body["metadata"]["name"] = f"{node}-slice-{generation}-{i}"
        pools.put(summarize(kube.slice_info(body)))
    view = pools.published(node)
    assert view is not None
    return view


def gpu_node(model_name: str, name: str, minors: list[int], **extra: str) -> DiscoveredNode:
    model = load_catalog().model(model_name)
    return DiscoveredNode(name, {**gfd_labels(model, len(minors)), **extra}, published(model_name, name, minors))


def verbs(node_name: str) -> list[str]:
    node = Node.objects.get(name=node_name)
    return list(
        AuditEvent.objects.filter(object_type="node", object_id=str(node.pk))
        .order_by("pk")
        .values_list("verb", flat=True)
    )


@pytest.fixture
def h100_pool(world: World) -> NodePool:
    return services.create_node_pool(
        name="H100 discovered", slug="h100-disc", gpu_model=H100, node_selector=H100_SELECTOR, actor=world.root
    )


# --- label selectors -----------------------------------------------------------------------------------------


def test_a_selector_matches_as_kubernetes_label_selectors_do() -> None:
    selector = parse_selector("nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3, zone in (a, b),!drain,pool!=x")
    assert str(selector) == "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3,zone in (a,b),!drain,pool!=x"
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "zone": "b"}
    assert selector.matches(labels) is True
    assert selector.matches({**labels, "drain": "yes"}) is False
    assert selector.matches({**labels, "zone": "c"}) is False
    assert selector.matches({**labels, "pool": "x"}) is False


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("=x", "Expected a label key, found '='."),
        ("gpu in x", "Expected '(' after gpu in."),
        ("gpu x", "After 'gpu': expected '=', '==', '!=', 'in', 'notin' or ',', found 'x'."),
        ("a,", "The selector ends with a comma."),
        ("a=b c", "Expected ',' between requirements, found 'c'."),
        (
            "gpu=NVIDIA H100",
            "Expected ',' between requirements, found 'H100'.",
        ),
    ],
)
def test_a_malformed_selector_says_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(InvalidSelector) as raised:
        parse_selector(text)
    assert str(raised.value) == message


# --- what the driver publishes ---------------------------------------------------------------------------------


def test_nvidias_example_gives_two_gpus_with_their_uuids_minors_and_figures() -> None:
    # given: the slices NVIDIA's driver published for a node with two H100s
    pools = DriverPools()
    for body in json.loads(EXAMPLE.read_text()):
        pools.put(summarize(kube.slice_info(body)))
    # when
    view = pools.published("gpu-node-1")
    # then
    assert view is not None
    assert (view.generation, view.driver_version, view.dynamic_mig) == (1, "580.95.5", True)
    assert [(g.minor, g.uuid, g.product, g.memory_mib, g.pci_bus_id) for g in view.gpus] == [
        (0, "GPU-5f0e2a7c-3b1d-4c8e-9a61-0d2b7e4f9c13", "NVIDIA H100 80GB HBM3", 81152, "0000:18:00.0"),
        (1, "GPU-a81c4d92-6e07-4b3f-8d25-71c9e0b6a548", "NVIDIA H100 80GB HBM3", 81152, "0000:2a:00.0"),
    ]
    figures = view.gpus[0].figures
    assert figures is not None and figures is view.gpus[1].figures  # one copy for identical GPUs
    assert dict(figures.counters)["jpeg-engines"] == 7
    assert figures.memory_slices == 8
    assert len(figures.devices) == 25
    me = next(d for d in figures.devices if d.suffix == "mig-1g10gb-me-20-3")
    assert (me.profile, me.profile_id, me.start, me.size) == ("1g.10gb+me", 20, 3, 1)
    assert dict(me.counters) == {
        "multiprocessors": 16,
        "copy-engines": 1,
        "decoders": 1,
        "encoders": 0,
        "jpeg-engines": 1,
        "ofa-engines": 1,
        "memory": 9984,
    }
    big = next(d for d in figures.devices if d.profile == "3g.40gb" and d.start == 4)
    assert (big.suffix, big.size) == ("mig-3g40gb-9-4", 4)


def test_only_the_highest_generation_counts_and_only_once_complete() -> None:
    # given: generation 1 complete, then the driver restarts and publishes generation 2 slice by slice
    model = load_catalog().model(H100)
    pools = DriverPools()
    first = resource_slices_for_minors(model, "n1", "uid", [0, 1], generation=1)
    for i, body in enumerate(first):
        body["metadata"]["name"] = f"g1-{i}"
        pools.put(summarize(kube.slice_info(body)))
    one = pools.published("n1")
    assert one is not None and one.generation == 1
    second = resource_slices_for_minors(model, "n1", "uid", [0, 1, 2], generation=2)
    for i, body in enumerate(second[:-1]):
        body["metadata"]["name"] = f"g2-{i}"
        pools.put(summarize(kube.slice_info(body)))
        # then: while generation 2 is incomplete, generation 1 stands (not a mix of both)
        assert pools.published("n1") is one
    second[-1]["metadata"]["name"] = "g2-last"
    pools.put(summarize(kube.slice_info(second[-1])))
    two = pools.published("n1")
    assert two is not None and (two.generation, [g.minor for g in two.gpus]) == (2, [0, 1, 2])
    # and: a slice of the old generation arriving late changes nothing
    first[0]["metadata"]["name"] = "g1-late"
    pools.put(summarize(kube.slice_info(first[0])))
    assert pools.published("n1") is two


# --- nodes join pools by selector ------------------------------------------------------------------------------


def test_a_gpu_node_joins_the_pool_whose_selector_matches_with_its_gpus_by_minor(h100_pool: NodePool) -> None:
    # given: GPUs with minors 5, 0, 3 (published in that order; UUIDs in no relation to the minors)
    node = gpu_node(H100, "h100-a", [5, 0, 3])
    # when
    report = discovery.sync_fleet(nodes=[node])
    # then
    assert report.joined == ["h100-a"]
    row = Node.objects.get(name="h100-a")
    assert (row.pool_id, row.state, row.driver_version, row.dynamic_mig, row.pool_note) == (
        h100_pool.pk,
        Node.State.READY,
        "580.95.5",
        True,
        "",
    )
    assert row.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    gpus = list(Gpu.objects.filter(node=row).order_by("index").values_list("index", "uuid", "product", "pci_bus_id"))
    assert gpus == [
        (0, gpu_uuid("h100-a", 0), H100, "0000:18:00.0"),
        (3, gpu_uuid("h100-a", 3), H100, "0000:5d:00.0"),
        (5, gpu_uuid("h100-a", 5), H100, "0000:ab:00.0"),
    ]
    assert sorted(gpu_uuid("h100-a", m) for m in (0, 3, 5)) != [g[1] for g in gpus]  # UUID order is not minor order
    assert GpuFigures.objects.count() == 1
    assert set(Gpu.objects.filter(node=row).values_list("figures__digest", flat=True)) == {
        GpuFigures.objects.get().digest
    }
    assert verbs("h100-a") == ["node_joined"]
    assert AuditEvent.objects.get(verb="node_joined").after == {"pool": "h100-disc"}


def test_a_second_sync_with_nothing_new_writes_nothing(h100_pool: NodePool) -> None:
    node = gpu_node(H100, "h100-a", [0, 1])
    discovery.sync_fleet(nodes=[node])
    events = AuditEvent.objects.count()
    # when
    report = discovery.sync_fleet(nodes=[gpu_node(H100, "h100-a", [0, 1])], everything=True)
    # then: the simulated nodes of the world are gone (not in this cluster), h100-a untouched
    assert report.updated == ["h100-node-0", "h100-node-1"]
    assert report.gone == ["h100-node-0", "h100-node-1"]
    assert AuditEvent.objects.count() == events + 2
    again = discovery.sync_fleet(nodes=[gpu_node(H100, "h100-a", [0, 1])], everything=True)
    assert (again.updated, again.gone) == ([], [])


def test_gpu_nodes_no_pool_takes_are_kept_with_the_reason(h100_pool: NodePool) -> None:
    # when: an A100 node, and an H100 node that a second pool's selector also matches
    services.create_node_pool(
        name="Any GPU", slug="any", gpu_model=H100, node_selector="nvidia.com/gpu.present=true", actor=_root()
    )
    report = discovery.sync_fleet(nodes=[gpu_node(A100, "a100-a", [0]), gpu_node(H100, "h100-b", [0])])
    # then
    assert report.unmatched == ["a100-a", "h100-b"]
    notes = dict(Node.objects.filter(name__in=["a100-a", "h100-b"]).values_list("name", "pool_note"))
    assert notes == {
        "a100-a": "Its GPUs (NVIDIA A100-SXM4-40GB) are not the model of the pool(s) whose selector matches: any.",
        "h100-b": "Several pools' node selectors match it: h100-disc, any. Make them exclusive.",
    }
    assert Node.objects.filter(name__in=["a100-a", "h100-b"], pool__isnull=True).count() == 2
    assert verbs("a100-a") == ["node_unmatched"]


def test_a_relabelled_node_leaves_its_pool_and_a_new_selector_takes_it(world: World, h100_pool: NodePool) -> None:
    # given
    discovery.sync_fleet(nodes=[gpu_node(H100, "h100-a", [0, 1])])
    # when: its product label changes (a node re-imaged as something else, say)
    relabelled = gpu_node(H100, "h100-a", [0, 1], **{"nvidia.com/gpu.product": "NVIDIA-H100-NEW"})
    report = discovery.sync_fleet(nodes=[relabelled])
    # then
    assert report.left == ["h100-a"]
    row = Node.objects.get(name="h100-a")
    assert (row.pool_id, row.pool_note) == (None, "No pool's node selector matches its labels.")
    # when: the admin widens the pool's selector
    services.update_node_pool(
        pool_id=h100_pool.pk,
        node_selector="nvidia.com/gpu.product in (NVIDIA-H100-80GB-HBM3,NVIDIA-H100-NEW)",
        actor=world.root,
    )
    # then: it is back in the pool, from the labels discovery stored
    row.refresh_from_db()
    assert row.pool_id == h100_pool.pk
    assert verbs("h100-a") == ["node_joined", "node_left", "node_joined"]


def test_a_node_that_leaves_the_cluster_is_gone_and_back_when_it_returns(h100_pool: NodePool) -> None:
    node = gpu_node(H100, "h100-a", [0, 1])
    discovery.sync_fleet(nodes=[node])
    # when
    gone = discovery.sync_fleet(nodes=[], gone=["h100-a"])
    back = discovery.sync_fleet(nodes=[node])
    # then
    assert (gone.gone, back.back) == (["h100-a"], ["h100-a"])
    assert Node.objects.get(name="h100-a").state == Node.State.READY
    assert verbs("h100-a") == ["node_joined", "node_gone", "node_back"]


def test_a_node_whose_gpus_change_is_audited_with_what_changed(h100_pool: NodePool) -> None:
    # given
    discovery.sync_fleet(nodes=[gpu_node(H100, "h100-a", [0, 1])])
    # when: GPU 1 is gone, GPU 2 appears
    report = discovery.sync_fleet(nodes=[gpu_node(H100, "h100-a", [0, 2])])
    # then
    assert report.gpus_changed == ["h100-a"]
    assert list(Gpu.objects.filter(node__name="h100-a").order_by("index").values_list("index", flat=True)) == [0, 2]
    event = AuditEvent.objects.get(verb="gpus_changed")
    assert event.after == {
        "added": [f"gpu-2 {gpu_uuid('h100-a', 2)}"],
        "removed": [f"gpu-1 {gpu_uuid('h100-a', 1)}"],
        "changed": [],
        "driver_version": "580.95.5",
        "dynamic_mig": True,
    }


def test_a_node_registered_by_hand_keeps_its_pool_and_gets_its_published_gpus(world: World) -> None:
    # given: the world's simulated pool, no selector, and its node as the cluster publishes it
    node = gpu_node(H100, "h100-node-0", list(range(8)))
    # when
    discovery.sync_fleet(nodes=[node])
    # then
    row = Node.objects.get(name="h100-node-0")
    assert row.pool_id == world.pool.pk
    assert list(Gpu.objects.filter(node=row).order_by("index").values_list("uuid", flat=True)) == [
        gpu_uuid("h100-node-0", i) for i in range(8)
    ]


def test_discovered_changes_move_the_dashboards_live_version(h100_pool: NodePool) -> None:
    # given
    discovery.sync_fleet(nodes=[gpu_node(H100, "h100-a", [0, 1])])
    before = selectors.fleet_versions().layouts[h100_pool.pk]
    # when: a GPU is added (no node field changes but its GPUs)
    discovery.sync_fleet(nodes=[gpu_node(H100, "h100-a", [0, 1, 2])])
    # then
    after = selectors.fleet_versions().layouts[h100_pool.pk]
    assert after != before
    # and: a claim made outside the portal moves it too
    discovery.sync_claimed_devices(
        claims=[ClaimView("ml", "job", "uid-1", None, (("h100-a", "gpu-2-mig-1g10gb-19-0"),))]
    )
    assert selectors.fleet_versions().layouts[h100_pool.pk] != after


# --- selectors on the API and the page --------------------------------------------------------------------------


def test_a_malformed_selector_is_a_400_with_a_field_message_and_nothing_changes(
    world: World, h100_pool: NodePool
) -> None:
    # when
    response = world.client(world.root).patch(
        f"/api/v1/pools/{h100_pool.pk}/", {"node_selector": "nvidia.com/gpu.product in NVIDIA"}, format="json"
    )
    # then
    assert response.status_code == 400
    assert response.json()["errors"] == {"node_selector": ["Expected '(' after nvidia.com/gpu.product in."]}
    h100_pool.refresh_from_db()
    assert h100_pool.node_selector == H100_SELECTOR


def test_an_admin_sets_a_selector_through_the_api_and_it_is_normalised(world: World, h100_pool: NodePool) -> None:
    response = world.client(world.root).patch(
        f"/api/v1/pools/{h100_pool.pk}/", {"node_selector": " zone in (b, a) ,nvidia.com/gpu.present "}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["node_selector"] == "zone in (a,b),nvidia.com/gpu.present"


def test_a_member_cannot_change_a_selector(world: World, h100_pool: NodePool) -> None:
    response = world.client(world.alice).patch(
        f"/api/v1/pools/{h100_pool.pk}/", {"node_selector": "a=b"}, format="json"
    )
    assert response.status_code == 403
    h100_pool.refresh_from_db()
    assert h100_pool.node_selector == H100_SELECTOR


def test_the_service_refuses_a_malformed_selector_with_the_field_named(world: World) -> None:
    with pytest.raises(InvalidInput) as raised:
        services.create_node_pool(name="X", slug="x", gpu_model=H100, node_selector="a b", actor=world.root)
    assert raised.value.errors == {
        "node_selector": ["After 'a': expected '=', '==', '!=', 'in', 'notin' or ',', found 'b'."]
    }
    assert not NodePool.objects.filter(slug="x").exists()


# --- claims ----------------------------------------------------------------------------------------------------


def test_devices_of_claims_the_portal_did_not_make_are_outside_fatia(world: World, h100_pool: NodePool) -> None:
    # given: a discovered node, a live request's claim on GPU 0 and someone else's claim on GPU 1
    discovery.sync_fleet(nodes=[gpu_node(H100, "h100-a", [0, 1])])
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="1g.10gb",
        count=1,
        lease_hours=1,
        purpose="x",
        actor=world.alice,
    )
    ours = ClaimView(
        "fatia-team-a", allocation.kube_name, "u1", str(allocation.uuid), (("h100-a", "gpu-0-mig-1g10gb-19-0"),)
    )
    theirs = ClaimView("ml", "train", "u2", None, (("h100-a", "gpu-1-mig-3g40gb-9-4"), ("h100-a", "gpu-1")))
    # when
    written = discovery.sync_claimed_devices(claims=[ours, theirs], everything=True)
    # then
    assert written == 3
    outside = ClaimedDevice.objects.outside_fatia().order_by("device")
    assert [(d.device, d.gpu.index if d.gpu else None, d.profile, d.start, d.size) for d in outside] == [
        ("gpu-1", 1, "", 0, 8),
        ("gpu-1-mig-3g40gb-9-4", 1, "3g.40gb", 4, 4),
    ]
    # when: the request ends; its claim (not deleted yet) is occupancy no request accounts for
    Allocation.objects.filter(pk=allocation.pk).update(status=Allocation.Status.FAILED)
    assert ClaimedDevice.objects.outside_fatia().count() == 3
    # when: the claims are gone from the cluster
    assert discovery.sync_claimed_devices(claims=[], everything=True) == 3
    assert not ClaimedDevice.objects.exists()


def _root() -> Any:
    from django.contrib.auth.models import User

    return User.objects.get(username="root")


def test_claim_views_keep_the_allocation_label_only_in_the_portals_namespaces() -> None:
    from allocations.cluster.watcher import claim_view

    device = kube.AllocatedDevice("mig-0", "gpu.nvidia.com", "n1", "gpu-0-mig-1g10gb-19-0")
    label = {kube.LABEL_ALLOCATION: str(uuid.uuid4())}
    ours = claim_view(kube.ClaimInfo("fatia-team-a", "c", "u", label, (device,)), "fatia-")
    forged = claim_view(kube.ClaimInfo("ml", "c", "u", label, (device,)), "fatia-")
    unallocated = claim_view(kube.ClaimInfo("ml", "c", "u", {}, ()), "fatia-")
    assert ours is not None and ours.allocation_uuid == label[kube.LABEL_ALLOCATION]
    assert forged is not None and forged.allocation_uuid is None
    assert unallocated is None

    # and in a namespace a tenant owns (issue 17), where only the portal may claim NVIDIA devices, as in its own
    owned = claim_view(kube.ClaimInfo("ml", "c", "u", label, (device,)), "fatia-", {"ml"})
    assert owned is not None and owned.allocation_uuid == label[kube.LABEL_ALLOCATION]


# --- what discovery found, for the admin -----------------------------------------------------------------------


def test_fleet_report_lists_pools_nodes_unmatched_drivers_dynamic_mig_and_disagreements(
    world: World, h100_pool: NodePool
) -> None:
    # given: an H100 node in the pool, an A100 node in none (its 1g.10gb has no NVIDIA figures in the catalog)
    discovery.sync_fleet(nodes=[gpu_node(H100, "h100-a", [0, 1]), gpu_node(A100, "a100-a", [0])])
    out = io.StringIO()
    # when
    call_command("fleet_report", stdout=out)
    # then
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("Fleet discovery, last write 20")
    assert lines[1:] == [
        "2 pools, 4 nodes (1 in no pool), 1 with figures that differ from the catalog, 0 devices held outside Fatia",
        "",
        "Pool h100-disc (NVIDIA H100 80GB HBM3): selector nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3",
        "  1 node, 2 GPUs",
        "  h100-a: Ready, 2 GPUs (2 x NVIDIA H100 80GB HBM3), driver 580.95.5, DynamicMIG on",
        "",
        "Pool h100 (NVIDIA H100 80GB HBM3): selector (none: nodes registered by hand)",
        "  2 nodes, 16 GPUs",
        "  h100-node-0: Ready, 8 GPUs (none published), driver ?, DynamicMIG unknown",
        "  h100-node-1: Ready, 8 GPUs (none published), driver ?, DynamicMIG unknown",
        "",
        "GPU nodes in no pool: 1",
        "  a100-a: Ready, 1 GPU (1 x NVIDIA A100-SXM4-40GB), driver 580.95.5, DynamicMIG on",
        "    why no pool: No pool's node selector matches its labels.",
        "    cluster figures: 1g.10gb counters: no NVIDIA figures in the catalog; the published ones apply.",
    ]


def test_a_node_in_no_pool_has_no_slot_view(world: World, h100_pool: NodePool) -> None:
    discovery.sync_fleet(nodes=[gpu_node(A100, "a100-a", [0])])
    node = Node.objects.get(name="a100-a")
    client = world.client(world.root)
    client.force_login(world.root)
    assert client.get(f"/dashboard/nodes/{node.pk}/").status_code == 404


def test_discovery_events_read_as_sentences_in_the_audit_log(h100_pool: NodePool) -> None:
    from tenants.audit_text import describe_event

    discovery.sync_fleet(nodes=[gpu_node(H100, "h100-a", [0, 1])])
    discovery.sync_fleet(nodes=[gpu_node(H100, "h100-a", [0])])
    discovery.sync_fleet(nodes=[], gone=["h100-a"])
    events = AuditEvent.objects.filter(object_type="node", object_id=str(Node.objects.get(name="h100-a").pk))
    events = events.order_by("pk")
    assert [describe_event(e) for e in events] == [
        "Discovery: the node joined pool h100-disc",
        f"Discovery: the node's GPUs changed (added none; removed gpu-1 {gpu_uuid('h100-a', 1)}; changed none; "
        "driver 580.95.5; DynamicMIG yes)",
        "The node left the cluster",
    ]
