"""What fits in a static-MIG pool (issue 12): free pre-created instances and what fits after a layout change, in
the capacity API, the dashboard's pool card and GET /metrics' figures (simulated backend; the fleet's instances
set as discovery records them). The same figures from the fake static slices: tests/kube/test_static_mig.py."""

from __future__ import annotations

from typing import Any

import pytest

from allocations import metrics as fleet_metrics
from allocations.mig.catalog import load_catalog
from allocations.models import ClaimedDevice, Gpu, Node, NodePool, SlicePlacement
from allocations.selectors import fleet_pool_summaries
from allocations.static_capacity import gpu_static_fits
from tests.conftest import H100, World
from tests.dashboard.test_dashboard import active_slices, client_for

pytestmark = pytest.mark.django_db

MODEL = load_catalog().model(H100)


def instance(gpu: Gpu, profile: str, start: int) -> dict[str, Any]:
    size = MODEL.profile(profile).memory_slices
    return {"profile": profile, "start": start, "size": size, "uuid": f"MIG-{gpu.pk}-{start}", "device": f"d-{start}"}


def test_a_gpu_counts_its_free_instances_now_and_the_fit_of_its_held_ones_after_a_change() -> None:
    # given: two 3g.40gb, the one at slot 0 held
    instances = [("3g.40gb", 0), ("3g.40gb", 4)]
    # when
    free, after = gpu_static_fits(MODEL, instances, {("3g.40gb", 0)}, whole_gpu_only=False)
    manager_free, manager_after = gpu_static_fits(MODEL, instances, {("3g.40gb", 0)}, whole_gpu_only=True)
    empty_free, empty_after = gpu_static_fits(MODEL, instances, set(), whole_gpu_only=True)
    # then: one free 3g.40gb now; after a change slots 4-7 take one 3g.40gb, or 3 x 1g.10gb (starts 4, 5, 6),
    # or one 2g.20gb (starts 0, 2, 4); nothing that needs slot 0
    assert free == {"3g.40gb": 1}
    assert (after["3g.40gb"], after["1g.10gb"], after["2g.20gb"], after.get("4g.40gb", 0), after.get("7g.80gb", 0)) == (
        1, 3, 1, 0, 0,
    )  # fmt: skip
    # MIG-manager mode: a GPU holding anything keeps its layout; an empty one is rebuilt at will
    assert manager_free == manager_after == {"3g.40gb": 1}
    assert empty_free == {"3g.40gb": 2}
    assert (empty_after["1g.10gb"], empty_after["7g.80gb"], empty_after["3g.40gb"]) == (7, 1, 2)


@pytest.fixture
def static_pool(world: World) -> SlicePlacement:
    """Alice holds a 3g.40gb; its GPU has a second, free 3g.40gb; each of the 15 other GPUs a free 7g.80gb. The
    pool is then switched to static agent mode (as if it had always been: the service refuses it with a live
    request). Returns the held placement."""
    held = SlicePlacement.objects.select_related("gpu").get(
        allocation=active_slices(world, world.alice, world.tenant_a, profile="3g.40gb")
    )
    for gpu in Gpu.objects.filter(node__pool=world.pool):
        Gpu.objects.filter(pk=gpu.pk).update(static_instances=[instance(gpu, "7g.80gb", 0)])
    other = 4 if held.start == 0 else 0
    Gpu.objects.filter(pk=held.gpu.pk).update(
        static_instances=[instance(held.gpu, "3g.40gb", held.start), instance(held.gpu, "3g.40gb", other)]
    )
    NodePool.objects.filter(pk=world.pool.pk).update(mig_mode=NodePool.MigMode.STATIC_AGENT)
    return held


def ones_beside(held: SlicePlacement) -> int:
    """1g.10gb that fit beside the held 3g.40gb: starts 4, 5, 6 when it holds slots 0-3; 0-3 when it holds 4-7."""
    return 3 if held.start == 0 else 4


def capacity(world: World) -> dict[str, Any]:
    response = world.client(world.alice).get(f"/api/v1/pools/{world.pool.pk}/capacity/")
    assert response.status_code == 200
    return dict(response.json())


def test_the_capacity_api_says_what_is_free_now_and_what_fits_after_a_layout_change(
    world: World, static_pool: SlicePlacement
) -> None:
    # when
    body = capacity(world)
    # then: free now = pre-created instances nobody holds (no 1g.10gb exists anywhere)
    assert body["mig_mode"] == "static-agent"
    now, after = body["fits_now"], body["fits_after_reconfiguration"]
    assert (now["3g.40gb"], now["7g.80gb"], now["1g.10gb"]) == (1, 15, 0)
    # after a change: 15 free GPUs (7 x 1g.10gb, 2 x 3g.40gb, 1 x 7g.80gb each) and the held GPU's free half
    assert (after["1g.10gb"], after["3g.40gb"], after["7g.80gb"]) == (15 * 7 + ones_beside(static_pool), 15 * 2 + 1, 15)
    assert set(now) == set(after) == set(world.pool.profiles)


def test_manager_mode_changes_only_gpus_holding_nothing(world: World, static_pool: SlicePlacement) -> None:
    # given
    NodePool.objects.filter(pk=world.pool.pk).update(mig_mode=NodePool.MigMode.STATIC_MANAGER)
    # when
    body = capacity(world)
    # then: the held GPU keeps its layout (its free 3g.40gb counts, nothing more)
    after = body["fits_after_reconfiguration"]
    assert body["mig_mode"] == "static-manager"
    assert (after["1g.10gb"], after["3g.40gb"], after["7g.80gb"]) == (15 * 7, 15 * 2 + 1, 15)


def test_a_reconfiguring_node_and_a_gpu_claimed_outside_count_nothing(
    world: World, static_pool: SlicePlacement
) -> None:
    # given: the node without the held GPU is being reconfigured; one GPU of the other is claimed whole outside
    busy = Node.objects.exclude(pk=static_pool.gpu.node_id).get(pool=world.pool)
    Node.objects.filter(pk=busy.pk).update(state=Node.State.RECONFIGURING)
    whole = Gpu.objects.filter(node_id=static_pool.gpu.node_id).exclude(pk=static_pool.gpu_id).order_by("index").first()
    assert whole is not None
    ClaimedDevice.objects.create(
        namespace="ml", claim_name="whole", claim_uid="u1", node_name="n", gpu=whole, device="gpu-x", size=8
    )
    # when
    body = capacity(world)
    # then: 8 - 1 (claimed) - 1 (held) = 6 free GPUs on the ready node, plus the held GPU's free half
    now, after = body["fits_now"], body["fits_after_reconfiguration"]
    assert (now["7g.80gb"], now["3g.40gb"]) == (6, 1)
    assert (after["7g.80gb"], after["1g.10gb"]) == (6, 6 * 7 + ones_beside(static_pool))


def test_a_dynamic_pool_has_no_after_reconfiguration_figure(world: World) -> None:
    body = capacity(world)
    assert body["mig_mode"] == "dynamic"
    assert body["fits_after_reconfiguration"] is None
    assert body["fits_now"]["1g.10gb"] == 112


def test_the_dashboard_and_the_metrics_show_both_figures(world: World, static_pool: SlicePlacement) -> None:
    # when
    api = capacity(world)
    [summary] = fleet_pool_summaries()
    [figures] = fleet_metrics.pool_figures()
    page = client_for(world.alice).get("/dashboard/")
    # then: the same numbers everywhere
    assert summary.fits_now == figures.fits_now == api["fits_now"]
    assert summary.fits_after_reconfiguration == figures.fits_after_reconfiguration == api["fits_after_reconfiguration"]
    html = page.content.decode()
    assert "After a layout change" in html
    after = 15 * 7 + ones_beside(static_pool)
    cells = f'<td class="num">0</td><td class="num" data-after>{after}<'
    assert f'<tr data-profile="1g.10gb"><th scope="row">1g.10gb</th>{cells}' in html
