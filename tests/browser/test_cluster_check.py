"""The cluster check page in a real browser, at 1440 px and 390 px: reached from the Admin menu, the button
queues a check, and the worker's report reads as a table (cards on a phone) with nothing scrolling sideways.
The adapter is faked at its boundary (tests/kube/fake_cluster.py); the task runs in the test, as a worker
would run it."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from allocations import tasks
from tests.conftest import World
from tests.kube.fake_cluster import FakeCluster, node_slices

WIDTHS = {"1440": {"width": 1440, "height": 900}, "390": {"width": 390, "height": 844}}

# Each body cell's data-label must name its column (the phone's cards show it).
UNLABELLED_CELLS = """() => {
  const heads = [...document.querySelectorAll("#check-results thead th")].map((th) => th.textContent.trim());
  const wrong = [];
  for (const row of document.querySelectorAll("#check-results tbody tr")) {
    [...row.children].forEach((cell, i) => {
      if (cell.tagName === "TD" && cell.getAttribute("data-label") !== heads[i]) wrong.push(heads[i]);
    });
  }
  return wrong;
}"""


def shoot(page: Page, screenshot, name: str) -> None:
    """A screenshot at each width; at 390 px nothing may scroll sideways."""
    for width, size in WIDTHS.items():
        page.set_viewport_size(size)
        screenshot(page, f"{name}-{width}")
        assert (name, width, page.evaluate("document.documentElement.scrollWidth")) == (name, width, size["width"])
    page.set_viewport_size(WIDTHS["1440"])


def test_an_admin_runs_the_cluster_check_and_reads_the_report(
    world: World, signed_in, screenshot, monkeypatch, settings
):
    # given: a cluster with a GPU node whose driver publishes nothing and one on static MIG
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    settings.FATIA_KUBE_NAMESPACE_PREFIX = "fatia-"
    FakeCluster(
        gpu_nodes=("gpu-node-a", "gpu-node-b", "gpu-node-c"),
        slices=node_slices("gpu-node-a") + node_slices("gpu-node-b", mode="static"),
    ).install(monkeypatch)
    page = signed_in(world.root)
    nav = page.get_by_role("navigation", name="Main")

    # when: from the Admin menu
    nav.get_by_text("Admin", exact=True).click()
    nav.get_by_role("link", name="Cluster check", exact=True).click()

    # then
    expect(page.get_by_role("heading", level=1)).to_have_text("Cluster check")
    expect(page.get_by_text("No check has run yet.", exact=False)).to_be_visible()
    shoot(page, screenshot, "cluster-check-empty")

    # when: the admin asks for a check
    page.get_by_role("button", name="Run the check").click()

    # then: it waits for a worker, and the button waits with it
    expect(page.get_by_role("status").first).to_have_text(
        "Done: The check is queued; this page shows its report when a worker has run it."
    )
    expect(page.locator("#check-waiting")).to_contain_text("Asked for by root at ")
    expect(page.get_by_role("button", name="Run the check")).to_be_disabled()
    shoot(page, screenshot, "cluster-check-waiting")

    # when: a worker runs it; the page reloads itself
    tasks.check_cluster_task()

    # then
    results = page.locator("#check-results")
    expect(results).to_be_visible(timeout=10_000)
    expect(page.locator("#check-summary")).to_contain_text("WARN 0 blocking problems, 1 warning.")
    slices = results.get_by_role("row", name="Driver ResourceSlices")
    expect(slices).to_contain_text("WARN")
    expect(slices).to_contain_text("2 of 3 GPU nodes publish the driver's ResourceSlices (GPU driver 580.95.5).")
    expect(slices).to_contain_text("No slices: gpu-node-c.")
    expect(results.get_by_role("row", name="MIG mode")).to_contain_text("1 node DynamicMIG, 1 node static MIG.")
    expect(results.locator("tbody tr")).to_have_count(11)
    expect(page.get_by_role("button", name="Run the check")).to_be_enabled()
    assert page.evaluate(UNLABELLED_CELLS) == []
    shoot(page, screenshot, "cluster-check-report")
