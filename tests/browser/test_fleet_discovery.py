"""The fleet discovery page and pool node selectors in a real browser (issue 10), at 1440 and 390 px."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from allocations import services
from allocations.cluster import discovery
from allocations.cluster.fake_fleet import set_device_counters
from allocations.models import Node
from tests.allocations.test_discovery_placement import discovered, outside
from tests.conftest import H100, World

A100 = "NVIDIA A100-SXM4-40GB"
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1440, "height": 900}


def scroll_width(page: Page) -> int:
    return int(page.evaluate("document.documentElement.scrollWidth"))


@pytest.fixture
def fleet(world: World, settings: Any) -> None:
    """An H100 pool by selector with two discovered nodes (one publishing its own 3g.40gb figures), an A100
    node no pool takes, and a device held outside Fatia."""
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    settings.FATIA_KUBECONFIG = "unused: the page reads the database only"
    services.create_node_pool(
        name="H100 discovered",
        slug="h100-disc",
        gpu_model=H100,
        node_selector="nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3",
        actor=world.root,
    )

    def hungry(bodies: list[dict[str, Any]]) -> None:
        set_device_counters(bodies, "3g.40gb", {"multiprocessors": "100"})

    discovery.sync_fleet(
        nodes=[
            discovered(H100, "gpu-h100-a", [0, 1, 2, 3]),
            discovered(H100, "gpu-h100-b", [0, 1], hungry),
            discovered(A100, "gpu-a100-a", [0, 1]),
        ]
    )
    outside("gpu-h100-a", "gpu-1-mig-3g40gb-9-4")


def test_an_admin_sees_what_discovery_found(world: World, fleet: None, signed_in, screenshot) -> None:
    # given
    page = signed_in(world.root)
    nav = page.get_by_role("navigation", name="Main")
    # when
    nav.get_by_text("Admin", exact=True).click()
    nav.get_by_role("link", name="Fleet discovery", exact=True).click()
    # then
    expect(page.get_by_role("heading", level=1)).to_have_text("Fleet discovery")
    pool = page.get_by_role("region", name="H100 discovered")
    expect(pool).to_contain_text("Node selector: nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3")
    expect(pool).to_contain_text("2 nodes, 6 GPUs")
    row = pool.get_by_role("row", name="gpu-h100-a")
    expect(row).to_contain_text("580.95.5")
    expect(row).to_contain_text("on")
    expect(row).to_contain_text("1 device held outside Fatia")
    other = pool.get_by_role("row", name="gpu-h100-b")
    other.get_by_text("Cluster figures apply: 1 difference from the catalog").click()
    expect(other).to_contain_text("3g.40gb counters: multiprocessors 100 (catalog 60).")
    unmatched = page.get_by_role("region", name="GPU nodes in no pool")
    a100 = unmatched.get_by_role("row", name="gpu-a100-a")
    expect(a100).to_contain_text("No pool's node selector matches its labels.")
    a100.get_by_text("Cluster figures apply: 1 difference from the catalog").click()
    expect(a100).to_contain_text("1g.10gb counters: no NVIDIA figures in the catalog; the published ones apply.")
    for size, name in ((DESKTOP, "fleet-discovery-1440"), (PHONE, "fleet-discovery-390")):
        page.set_viewport_size(size)
        assert scroll_width(page) == size["width"]
        screenshot(page, name)


def test_an_admin_changes_a_pools_selector_and_a_node_joins(world: World, fleet: None, signed_in, screenshot) -> None:
    # given
    page = signed_in(world.root)
    page.goto("/manage/pools/")
    field = page.get_by_label("Node selector of H100 pool")
    # when: a malformed selector
    field.fill("nvidia.com/gpu.product in A100")
    page.locator("form", has=field).get_by_role("button", name="Save selector").click()
    # then: the field says why, nothing changed
    expect(page.get_by_text("Expected '(' after nvidia.com/gpu.product in.")).to_be_visible()
    expect(page.get_by_label("Node selector of H100 pool")).to_have_attribute("aria-invalid", "true")
    page.set_viewport_size(PHONE)
    assert scroll_width(page) == 390
    screenshot(page, "pools-selector-error-390")
    page.set_viewport_size(DESKTOP)
    assert Node.objects.get(name="gpu-a100-a").pool_id is None
    # when: the discovered pool's selector is narrowed to the 4-GPU nodes
    field = page.get_by_label("Node selector of H100 discovered")
    field.fill("nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3, nvidia.com/gpu.count=4")
    page.locator("form", has=field).get_by_role("button", name="Save selector").click()
    # then: the 2-GPU node leaves the pool at once
    expect(page.get_by_role("status").first).to_have_text(
        "Done: The node selector of H100 discovered is “nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3,"
        "nvidia.com/gpu.count=4”; 1 node is in the pool."
    )
    screenshot(page, "pools-selector-1440")
    assert Node.objects.get(name="gpu-h100-b").pool_id is None
