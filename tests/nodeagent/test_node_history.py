"""The node page's history chart: server-drawn SVG per GPU with a text summary; platform admins see whole GPUs,
members only their tenants' slices, other tenants nothing of them."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from allocations.costs import gpu_model_for
from allocations.models import SlicePlacement
from allocations.nodeagent.models import DeviceState
from allocations.nodeagent.services import roll_up_hours
from allocations.services import reclaim
from tests.conftest import World
from tests.dashboard.test_dashboard import client_for
from tests.nodeagent.seed import active_at, minutes, report

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture
def busy(world: World) -> SlicePlacement:
    """Alice's slice, 4930 MiB and 50 % SM from 10:00 to 11:00; its whole GPU 20480 MiB and 70 % then."""
    allocation = active_at(world, NOW - timedelta(hours=3))
    placement = SlicePlacement.objects.select_related("gpu").get(allocation=allocation)
    report(placement, at=NOW - timedelta(hours=3) + timedelta(seconds=30))
    reclaim.record_slice_devices(now=NOW - timedelta(hours=3) + timedelta(minutes=1))
    minutes(placement, NOW - timedelta(hours=2), NOW - timedelta(hours=1), memory_mib=4930, utilisation=50.0)
    DeviceState.objects.create(
        node_id=placement.gpu.node_id,
        gpu_id=placement.gpu_id,
        kind=DeviceState.Kind.GPU,
        uuid="GPU-whole",
        gpu_uuid="GPU-whole",
        sampled_at=NOW,
        minute=NOW,
    )
    minutes(
        placement,
        NOW - timedelta(hours=2),
        NOW - timedelta(hours=1),
        memory_mib=20480,
        utilisation=70.0,
        kind=DeviceState.Kind.GPU,
        uuid="GPU-whole",
    )
    return placement


def page(world: World, user, placement: SlicePlacement, query: str = "") -> str:
    with time_machine.travel(NOW, tick=False):
        response = client_for(user).get(f"/dashboard/nodes/{placement.gpu.node_id}/{query}")
    assert response.status_code == 200
    return response.content.decode()


def summary(html: str, index: int) -> str:
    match = re.search(rf'<p class="small history-card__summary" id="history-summary-{index}">([^<]*)</p>', html)
    assert match is not None
    return match.group(1)


def test_the_owner_sees_a_chart_of_its_slice_with_a_text_summary(world: World, busy: SlicePlacement):
    # when
    html = page(world, world.alice, busy)

    # then
    total = gpu_model_for(world.pool.gpu_model).memory_mib / 1024
    assert summary(html, busy.gpu.index) == (
        f"GPU {busy.gpu.index}, your slices: memory used 4.8 GiB on average, 4.8 GiB at most, of {total:.0f} GiB; "
        "SM utilisation 50 % on average, 50 % at most; reports in 6 of 144 intervals."
    )
    assert html.count('class="history-svg"') == 1
    memory = re.findall(r'<polyline class="history-svg__memory" points="([^"]*)"', html)
    util = re.findall(r'<polyline class="history-svg__util" points="([^"]*)"', html)
    assert len(memory) == 1 and len(memory[0].split()) == 6
    # 50 % of a 120-unit-high plot is y 60
    assert util == [" ".join(f"{720 * (n + 0.5) / 144:.1f},60.0" for n in range(132, 138))]
    assert (
        summary(html, (busy.gpu.index + 1) % 8)
        == f"GPU {(busy.gpu.index + 1) % 8}, your slices: no reports in this period."
    )


def test_another_tenant_sees_nothing_of_that_slice(world: World, busy: SlicePlacement):
    html = page(world, world.charlie, busy)
    assert 'class="history-svg"' not in html
    assert summary(html, busy.gpu.index) == f"GPU {busy.gpu.index}, your slices: no reports in this period."
    assert "4.8 GiB" not in html


def test_a_platform_admin_sees_the_whole_gpu(world: World, busy: SlicePlacement):
    html = page(world, world.root, busy)
    assert summary(html, busy.gpu.index).startswith(
        f"GPU {busy.gpu.index}: memory used 20.0 GiB on average, 20.0 GiB at most, of "
    )
    assert summary(html, busy.gpu.index).endswith(
        "SM utilisation 70 % on average, 70 % at most; reports in 6 of 144 intervals."
    )


def test_the_seven_day_view_reads_hourly_history(world: World, busy: SlicePlacement):
    # given: only minutes so far; the retention task rolls them up into hours
    roll_up_hours(now=NOW - timedelta(minutes=30))

    # when
    html = page(world, world.alice, busy, "?history=7d")

    # then
    assert "per hour over the last 7 days" in html
    assert summary(html, busy.gpu.index).endswith(
        "SM utilisation 50 % on average, 50 % at most; reports in 1 of 168 intervals."
    )


def test_an_unknown_period_falls_back_to_a_day(world: World, busy: SlicePlacement):
    html = page(world, world.alice, busy, "?history=forever")
    assert "per 10 minutes over the last 24 hours" in html
