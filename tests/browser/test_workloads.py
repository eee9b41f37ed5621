"""The manifests panel of an active request and the advisor of the request form in a real browser, at 1440 and
390 px (issue 17): a vLLM manifest is shown and copied; the advisor's answer fills the request form."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from allocations import services
from tests.conftest import World

DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}


def both_widths(page: Page, screenshot, name: str) -> None:
    """Photograph at 1440 and 390 px; on the phone nothing may scroll sideways."""
    page.set_viewport_size(DESKTOP)
    screenshot(page, f"{name}-1440")
    page.set_viewport_size(PHONE)
    assert int(page.evaluate("document.documentElement.scrollWidth")) <= PHONE["width"]
    screenshot(page, f"{name}-390")
    page.set_viewport_size(DESKTOP)


def test_alice_gets_a_vllm_manifest_for_her_slice_and_copies_it(world: World, signed_in, screenshot):
    # given
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="1g.10gb",
        count=1,
        lease_hours=8,
        purpose="serve a small model",
        actor=world.alice,
    )
    services.provision_allocation(allocation_id=allocation.pk)
    page = signed_in(world.alice)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.goto(f"/requests/{allocation.pk}/")
    expect(page.locator("#manifest-yaml")).to_contain_text("kind: Pod")
    # when
    page.get_by_label("Workload").select_option("vllm")
    page.get_by_label("vLLM model").fill("Qwen/Qwen2.5-0.5B-Instruct")
    page.get_by_label("vLLM arguments").fill("--max-model-len 4096")
    page.get_by_role("button", name="Show manifest").click()
    # then
    manifest = page.locator("#manifest-yaml")
    expect(manifest).to_contain_text("kind: Deployment")
    expect(manifest).to_contain_text(f"resourceClaimName: {allocation.claim_name}")
    expect(manifest).to_contain_text("- --max-model-len")
    expect(page.locator("#manifest-download")).to_have_attribute(
        "href",
        f"/requests/{allocation.pk}/manifests.yaml?kind=vllm&model=Qwen%2FQwen2.5-0.5B-Instruct&args=--max-model-len+4096",
    )
    # when
    page.locator("#manifests").get_by_role("button", name="Copy manifest").click()
    # then
    copied = page.evaluate("navigator.clipboard.readText()")
    assert "kind: Service" in copied and allocation.claim_name in copied
    page.locator("#manifests").scroll_into_view_if_needed()
    both_widths(page, screenshot, "request-manifests-vllm")


def test_the_advisor_recommends_a_3g_40gb_for_an_8b_model_and_fills_the_form(world: World, signed_in, screenshot):
    # given
    page = signed_in(world.alice)
    page.goto("/requests/new/")
    # when
    page.get_by_label("Model", exact=True).select_option("llama-3.1-8b")
    page.get_by_label("Context length (tokens)").fill("8192")
    page.get_by_label("Concurrent sequences (or batch)").fill("4")
    page.get_by_role("button", name="Estimate").click()
    # then
    result = page.locator("#advisor-result")
    expect(result).to_contain_text("needs about")
    row = page.locator(f'[data-advice-pool="{world.pool.pk}"]')
    expect(row).to_contain_text("3g.40gb")
    expect(row).to_contain_text("3 compute slices, 4 memory slots, 0.50 GPU-equivalents")
    both_widths(page, screenshot, "request-advisor")
    # when
    row.get_by_role("button", name="Use this").click()
    # then: the request form has the pool and the profile, and its live cost shows them
    expect(page.get_by_label("MIG profile")).to_have_value("3g.40gb")
    expect(page.locator("#cost-compute")).to_have_text("3")
    expect(page.locator("#cost-memory")).to_have_text("4")
