"""The dashboard's slot view shows what the node's agent reports for each slice: to those who may see the slice."""

from __future__ import annotations

import pytest

from allocations.models import Node, SlicePlacement
from allocations.nodeagent import services
from tests.dashboard.test_dashboard import active_slices, client_for, slot_buttons
from tests.nodeagent.payloads import T0, FakeNode

pytestmark = pytest.mark.django_db


@pytest.fixture
def reported(world):
    """Alice's active 3g.40gb, and node 0's agent reporting a GPU with that instance busy (8 GiB, 40 % SM)."""
    allocation = active_slices(world, world.alice, world.tenant_a, profile="3g.40gb")
    placement = SlicePlacement.objects.select_related("gpu__node").get(allocation=allocation)
    node = placement.gpu.node
    credential = services.issue_agent_credential(node_id=node.pk, actor=world.root)[0]
    instance = {
        "profile": "3g.40gb",
        "start": placement.start,
        "sm_util": 40.0,
        "processes": [{"pid": 77, "used_mib": 8192}],
    }
    gpus = [{"product": "NVIDIA H100 80GB HBM3", "minor": i, "instances": []} for i in range(8)]
    gpus[placement.gpu.index]["instances"].append(instance)
    agent = FakeNode(node.name, {"gpus": gpus})
    services.record_inventory(credential=credential, payload=agent.inventory())
    services.record_telemetry(credential=credential, payload=agent.telemetry(T0, T0 + 5))
    return placement


def test_the_slice_owner_sees_memory_used_and_utilisation(world, reported):
    # when
    html = client_for(world.alice).get("/dashboard/").content.decode()

    # then
    mine = [b for b in slot_buttons(html) if b.get("placement-id") == str(reported.pk)]
    assert len(mine) == 1
    assert '<span class="slot__figures">8.0 GiB · 40 %</span>' in html
    assert '<span class="slot__meter" style="width: 20%" aria-hidden="true"></span>' in html
    assert (
        "Memory used 8.0 of 39.5 GiB · SM utilisation 40 % of this instance (GPM) · 1 process · as of 12:00:05 UTC"
        in html
    )


def test_another_tenant_sees_the_slice_occupied_without_its_usage(world, reported):
    html = client_for(world.charlie).get("/dashboard/").content.decode()
    assert 'class="slot slot--occupied"' in html
    assert "slot__usage" not in html
    assert "Memory used" not in html


def test_a_silent_agent_shows_on_the_node(world, reported):
    Node.objects.filter(pk=reported.gpu.node_id).update(state=Node.State.AGENT_SILENT)
    html = client_for(world.root).get("/dashboard/").content.decode()
    assert '<span class="state state--agent-silent">Agent silent</span>' in html
