"""The slot view in a real browser, wide and narrow: each slice shows what its node's agent reports (memory used,
a bar for it, SM utilisation), inside its slot, and the tooltip says it in words."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from allocations.models import SlicePlacement
from allocations.nodeagent import services
from tests.dashboard.test_dashboard import active_slices
from tests.nodeagent.payloads import T0, FakeNode


@pytest.mark.parametrize("width", [1440, 390])
def test_the_owner_sees_memory_and_utilisation_inside_each_slice(world, signed_in, screenshot, width):
    # given: alice's 3g.40gb and 1g.10gb on node 0, reported busy by the node's agent
    big = active_slices(world, world.alice, world.tenant_a, profile="3g.40gb")
    small = active_slices(world, world.alice, world.tenant_a, profile="1g.10gb")
    placements = list(SlicePlacement.objects.filter(allocation__in=[big, small]).select_related("gpu__node"))
    node = placements[0].gpu.node
    gpus = [{"product": "NVIDIA H100 80GB HBM3", "minor": i, "instances": []} for i in range(8)]
    for n, p in enumerate(placements):
        assert p.gpu.node_id == node.pk
        gpus[p.gpu.index]["instances"].append(
            {
                "profile": p.profile,
                "start": p.start,
                "sm_util": 40.0 + 30 * n,
                "processes": [{"pid": 100 + n, "used_mib": 8192 if p.profile == "3g.40gb" else 6144}],
            }
        )
    credential = services.issue_agent_credential(node_id=node.pk, actor=world.root)[0]
    agent = FakeNode(node.name, {"gpus": gpus})
    services.record_inventory(credential=credential, payload=agent.inventory())
    services.record_telemetry(credential=credential, payload=agent.telemetry(T0, T0 + 5))

    # when
    page = signed_in(world.alice)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/dashboard/")

    # then
    for p in placements:
        slot = page.locator(f'button[data-placement-id="{p.pk}"]')
        figures = slot.locator(".slot__figures")
        expected = "8.0 GiB · 40 %" if p.profile == "3g.40gb" else "6.0 GiB · 70 %"
        expect(figures).to_have_text(expected)
        slot_box, meter_box = slot.bounding_box(), slot.locator(".slot__meter").bounding_box()
        assert slot_box is not None and meter_box is not None
        # the bar lies inside its slot, as wide as the share of memory used (within a pixel of rounding)
        assert (
            slot_box["x"] <= meter_box["x"] and meter_box["x"] + meter_box["width"] <= slot_box["x"] + slot_box["width"]
        )
    big_slot = page.locator(
        f'button[data-placement-id="{placements[0].pk if placements[0].profile == "3g.40gb" else placements[1].pk}"]'
    )
    big_slot.focus()
    expect(page.get_by_role("tooltip").filter(has_text="Memory used 8.0 of 39.5 GiB")).to_be_visible()
    screenshot(page, f"dashboard-slice-usage-{width}")
