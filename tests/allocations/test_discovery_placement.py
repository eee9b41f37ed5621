"""What discovery finds changes where slices go (issue 10): devices held by claims the portal did not make are
occupancy for placement, the order-safety check and the what-if; a node's published figures (counters,
placements) decide its prediction where they and the catalog disagree; a profile with no figures at all is not
offered. The dashboard shows both. Kubernetes backend, no API server: the services are fed what the fake
driver publishes (tests/kube/test_discovery.py does the same against a real one)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from allocations import selectors, services
from allocations.cluster import discovery, kube
from allocations.cluster.discovery import ClaimView, DiscoveredNode
from allocations.cluster.fake_fleet import gfd_labels, resource_slices_for_minors, set_device_counters
from allocations.cluster.published import DriverPools, summarize
from allocations.mig.catalog import load_catalog
from allocations.models import Allocation, Gpu, NodePool, SlicePlacement
from allocations.placement import PoolBusy, offered_profiles, plan_slices_for_scheduler, pool_capacity
from tenants.errors import InvalidInput
from tests.conftest import H100, World

B200 = "NVIDIA B200"


@pytest.fixture(autouse=True)
def on_kubernetes(settings: Any) -> None:
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    settings.FATIA_KUBECONFIG = "unused: nothing here talks to a cluster"


def discovered(model_name: str, name: str, minors: list[int], change: Any = None) -> DiscoveredNode:
    """A node as discovery sees it; `change(bodies)` edits the slices first (another driver's figures)."""
    model = load_catalog().model(model_name)
    bodies = resource_slices_for_minors(model, name, "uid", minors)
    if change is not None:
        change(bodies)
    pools = DriverPools()
    for i, body in enumerate(bodies):
        body = json.loads(json.dumps(body))
        body["metadata"]["name"] = f"{name}-{i}"
        pools.put(summarize(kube.slice_info(body)))
    return DiscoveredNode(name, gfd_labels(model, len(minors)), pools.published(name))


def pool_of(world: World, model_name: str, slug: str) -> NodePool:
    product = "NVIDIA-" + model_name.removeprefix("NVIDIA ").replace(" ", "-")
    return services.create_node_pool(
        name=slug, slug=slug, gpu_model=model_name, node_selector=f"nvidia.com/gpu.product={product}", actor=world.root
    )


def outside(node: str, *devices: str) -> None:
    discovery.sync_claimed_devices(
        claims=[ClaimView("ml", "train", "uid-ml", None, tuple((node, d) for d in devices))], everything=True
    )


def planned(pool: NodePool, profile: str, count: int = 1) -> list[tuple[str, int, int]] | None:
    slices = plan_slices_for_scheduler(pool=pool, profile=profile, count=count)
    return None if slices is None else [(s.node_name, s.gpu_index, s.start) for s in slices]


# --- outside Fatia ----------------------------------------------------------------------------------------------


def test_placement_avoids_devices_held_by_claims_the_portal_did_not_make(world: World) -> None:
    # given: a discovered node with two H100s; someone's claim holds a 3g.40gb at slot 0 of GPU 0
    pool = pool_of(world, H100, "h100-disc")
    discovery.sync_fleet(nodes=[discovered(H100, "n1", [0, 1])])
    assert planned(pool, "4g.40gb") == [("n1", 0, 0)]
    outside("n1", "gpu-0-mig-3g40gb-9-0")
    # when / then: a 4g.40gb (slot 0 only) goes to GPU 1, and the what-if counts the held slots
    assert planned(pool, "4g.40gb") == [("n1", 1, 0)]
    assert pool_capacity(pool)["4g.40gb"] == 1
    assert pool_capacity(pool)["3g.40gb"] == 3


def test_a_whole_gpu_held_outside_fatia_takes_every_slot_of_it(world: World) -> None:
    pool = pool_of(world, H100, "h100-disc")
    discovery.sync_fleet(nodes=[discovered(H100, "n1", [0])])
    outside("n1", "gpu-0")
    assert planned(pool, "1g.10gb") is None
    assert pool_capacity(pool)["1g.10gb"] == 0


def test_the_order_safety_check_counts_what_the_cluster_holds_outside_the_database(world: World) -> None:
    # given: one H100; our request's 3g.40gb waits for the scheduler, planned at slot 0 (3g.40gb goes at 0 or 4)
    pool = pool_of(world, H100, "h100-disc")
    discovery.sync_fleet(nodes=[discovered(H100, "n1", [0])])
    services.set_tenant_quota(
        tenant_id=world.tenant_a.pk, pool_id=pool.pk, compute_slices_limit=14, memory_slices_limit=16, actor=world.root
    )
    waiting, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=pool.pk,
        profile="3g.40gb",
        count=1,
        lease_hours=1,
        purpose="w",
        actor=world.mallory,
    )
    Allocation.objects.filter(pk=waiting.pk).update(status=Allocation.Status.PROVISIONING)
    SlicePlacement.objects.create(
        allocation=waiting,
        gpu=Gpu.objects.get(node__name="n1", index=0),
        profile="3g.40gb",
        start=0,
        size=4,
        device_name="gpu-0-mig-3g40gb-9-0",
    )
    # when: the cluster holds only what the database knows, a 1g.10gb is safe next to it in any order (taken
    # first, it gets slot 0 and the 3g.40gb goes to 4)
    assert planned(pool, "1g.10gb") == [("n1", 0, 4)]
    # when: a claim the portal did not make holds a 2g.20gb at slots 4-5
    outside("n1", "gpu-0-mig-2g20gb-14-4")
    # then: a 1g.10gb taken first would leave the waiting 3g.40gb no room: the GPU waits for it (PoolBusy: the
    # provisioning task tries again once the scheduler has allocated the 3g.40gb)
    with pytest.raises(PoolBusy):
        planned(pool, "1g.10gb")


def test_members_see_outside_slices_without_owner_staff_with_namespace_and_claim(world: World) -> None:
    # given
    pool = pool_of(world, H100, "h100-disc")
    discovery.sync_fleet(nodes=[discovered(H100, "n1", [0])])
    outside("n1", "gpu-0-mig-3g40gb-9-4")
    filters = selectors.DashboardFilters(pool_id=pool.pk)
    # when
    [member_slice] = selectors.dashboard_nodes(world.alice, pool.pk, filters).nodes[0].gpus[0].slices
    [staff_slice] = selectors.dashboard_nodes(world.root, pool.pk, filters).nodes[0].gpus[0].slices
    # then
    assert (member_slice.label, member_slice.profile, member_slice.start, member_slice.size) == (
        "outside Fatia",
        "3g.40gb",
        4,
        4,
    )
    assert (member_slice.namespace, member_slice.claim_name) == ("", "")
    assert (staff_slice.namespace, staff_slice.claim_name) == ("ml", "train")
    # and: the page says so, without the owner for members
    page = world.client(world.alice)
    page.force_login(world.alice)
    html = page.get(f"/dashboard/?pool={pool.pk}").content.decode()
    assert "outside Fatia" in html and "ml/train" not in html
    staff = world.client(world.root)
    staff.force_login(world.root)
    assert "<code>ml/train</code>" in staff.get(f"/dashboard/?pool={pool.pk}").content.decode()
    # and: the pool's summary counts the held slots as not free
    [summary] = selectors.dashboard_overview(world.alice, filters)
    assert summary.fits_now["3g.40gb"] == 1


# --- the cluster's figures win --------------------------------------------------------------------------------


def test_a_nodes_published_counters_change_the_prediction_and_the_what_if(world: World) -> None:
    # given: a discovered H100 as NVIDIA's catalog describes it: two 3g.40gb fit
    pool = pool_of(world, H100, "h100-disc")
    discovery.sync_fleet(nodes=[discovered(H100, "n1", [0])])
    assert pool_capacity(pool)["3g.40gb"] == 2

    # when: its driver publishes that a 3g.40gb takes 100 of the GPU's 132 multiprocessors
    def hungry(bodies: list[dict[str, Any]]) -> None:
        set_device_counters(bodies, "3g.40gb", {"multiprocessors": "100"})

    discovery.sync_fleet(nodes=[discovered(H100, "n1", [0], hungry)])

    # then: one 3g.40gb fits, and a second is not planned next to the first
    assert pool_capacity(pool)["3g.40gb"] == 1
    assert planned(pool, "3g.40gb", count=2) is None
    # and: the dashboard says this node's own figures apply, and why
    node = selectors.dashboard_nodes(world.root, pool.pk, selectors.DashboardFilters(pool_id=pool.pk)).nodes[0]
    assert node.cluster_figures == ("3g.40gb counters: multiprocessors 100 (catalog 60).",)
    [summary] = selectors.dashboard_overview(world.root, selectors.DashboardFilters(pool_id=pool.pk))
    assert summary.fits_now["3g.40gb"] == 1


def test_published_placements_decide_the_slot(world: World) -> None:
    # given: a driver that does not publish the 1g.10gb at slot 0 (say, slot 0 is held back on this node)
    pool = pool_of(world, H100, "h100-disc")

    def no_slot_0(bodies: list[dict[str, Any]]) -> None:
        for body in bodies:
            if "devices" in body["spec"]:
                body["spec"]["devices"] = [d for d in body["spec"]["devices"] if d["name"] != "gpu-0-mig-1g10gb-19-0"]

    discovery.sync_fleet(nodes=[discovered(H100, "n1", [0], no_slot_0)])
    # when / then: the scheduler's first 1g.10gb there is slot 1, and the plan says so
    assert planned(pool, "1g.10gb") == [("n1", 0, 1)]
    node = selectors.dashboard_nodes(world.root, pool.pk, selectors.DashboardFilters(pool_id=pool.pk)).nodes[0]
    assert node.cluster_figures == (
        "1g.10gb placements: published 1, 2, 3, 4, 5, 6 (size 1), catalog 0, 1, 2, 3, 4, 5, 6 (size 1).",
    )


def test_with_no_slices_and_no_nvidia_figures_a_profile_is_not_offered(world: World) -> None:
    # given: a B200 pool (the catalog lacks NVIDIA's figures for its whole GPU) with no node that published slices
    pool = pool_of(world, B200, "b200")
    services.set_tenant_quota(
        tenant_id=world.tenant_a.pk, pool_id=pool.pk, compute_slices_limit=14, memory_slices_limit=16, actor=world.root
    )
    assert offered_profiles(pool) == []
    # when / then: a request is refused with the reason
    with pytest.raises(InvalidInput) as raised:
        services.request_allocation(
            tenant_id=world.tenant_a.pk,
            pool_id=pool.pk,
            profile="1g.23gb",
            count=1,
            lease_hours=1,
            purpose="x",
            actor=world.alice,
        )
    assert raised.value.errors == {
        "profile": [
            "'1g.23gb' cannot be placed in b200 yet: no node publishes its figures and NVIDIA's are not in the "
            "catalog. Placeable now: none."
        ]
    }
    # when: a B200 node publishes its figures
    discovery.sync_fleet(nodes=[discovered(B200, "b1", [0, 1])])
    # then: every profile is offered there, and placed
    assert offered_profiles(pool) == list(pool.profiles)
    assert planned(pool, "7g.180gb") == [("b1", 0, 0)]


def test_the_simulated_backend_offers_every_profile_of_the_pool(world: World, settings: Any) -> None:
    settings.FATIA_CLUSTER_BACKEND = "simulated"
    pool = pool_of(world, B200, "b200")
    assert offered_profiles(pool) == list(pool.profiles)
