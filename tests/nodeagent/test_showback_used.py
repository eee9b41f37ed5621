"""Showback's "used" beside "held": exact slice-hours from seeded minute and hour rollups, only inside the request's
window, and "no data" (not 0) without telemetry; on the usage page and in both CSVs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from allocations.models import Allocation, SlicePlacement
from allocations.selectors import showback_for_user
from allocations.services import reclaim
from tests.conftest import World
from tests.dashboard.test_showback import client_for, csv_rows, held
from tests.nodeagent.seed import active_at, hour, minutes, report

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
START = NOW - timedelta(hours=8)  # 04:00
END = NOW - timedelta(hours=2)  # 10:00


def seed(world: World) -> Allocation:
    """Team A: 2 slices held 04:00-10:00 (12 slice-hours). Slice 1 reported 04:00-07:00, in use 04:00-05:00;
    slice 2 in use 04:00-05:00 by minutes and 07:00-08:00 by an hourly rollup only, and in use 03:00-04:00 for
    someone before (not Team A's). Used 3 of 5 observed slice-hours. Team B: 1 slice since 10:00, no agent."""
    allocation = active_at(world, START, count=2)
    first, second = SlicePlacement.objects.filter(allocation=allocation).select_related("gpu").order_by("pk")
    for p in (first, second):
        report(p, at=START + timedelta(seconds=30))
    reclaim.record_slice_devices(now=START + timedelta(minutes=1))
    minutes(first, START, START + timedelta(hours=1), processes=1, memory_mib=2048)
    minutes(first, START + timedelta(hours=1), START + timedelta(hours=3))
    minutes(second, START - timedelta(hours=1), START, processes=3)
    minutes(second, START, START + timedelta(hours=1), memory_mib=4096)
    hour(second, START, memory_mib=4096)  # its minutes are still there: they count, not this
    hour(second, START + timedelta(hours=3), processes=1)
    # Test setup only: the request ended at 10:00.
    Allocation.objects.filter(pk=allocation.pk).update(status=Allocation.Status.RELEASED, ended_at=END)
    held(world, world.charlie, world.tenant_b, "1g.10gb", 1, NOW - timedelta(hours=2), None)
    return allocation


def test_used_slice_hours_are_exact_and_stay_inside_the_requests_window(world: World):
    # given
    seed(world)

    # when
    showback = showback_for_user(world.root, days=1, now=NOW)

    # then
    assert [
        (t.tenant_name, t.slice_hours, t.used_slice_hours, t.observed_slice_hours, t.used_share)
        for t in showback.tenants
    ] == [("Team A", 12.0, 3.0, 5.0, 60), ("Team B", 2.0, None, 0.0, None)]
    assert [t.daily_used_slice_hours for t in showback.tenants] == [[3.0], [None]]


def test_an_hourly_rollup_counts_only_the_part_of_the_hour_inside_the_window(world: World):
    # given: the request held until 07:30 only
    seed(world)
    Allocation.objects.filter(tenant=world.tenant_a).update(ended_at=START + timedelta(hours=3, minutes=30))

    # when
    team_a = showback_for_user(world.root, days=1, now=NOW).tenants[0]

    # then: half of the 07:00 hour
    assert (team_a.used_slice_hours, team_a.observed_slice_hours) == (2.5, 4.5)


def test_a_tenant_sees_only_its_own_used_figures(world: World):
    seed(world)
    assert [(t.tenant_name, t.used_slice_hours) for t in showback_for_user(world.charlie, days=1, now=NOW).tenants] == [
        ("Team B", None)
    ]


def test_the_usage_page_and_csvs_show_used_and_no_data(world: World):
    # given
    seed(world)

    # when
    with time_machine.travel(NOW, tick=False):
        html = client_for(world.root).get("/dashboard/usage/", {"days": "7"}).content.decode()
        totals = client_for(world.root).get("/dashboard/usage.csv", {"days": "7", "rows": "totals"})
        daily = client_for(world.root).get("/dashboard/usage.csv", {"days": "7"})

    # then
    assert (
        '<td class="num" data-label="Slice-hours used">3.00</td><td class="num" data-label="Used share">'
        '<span title="of 5.00 slice-hours the node agents reported">60 %</span></td>'
    ) in html
    assert '<td class="num" data-label="Slice-hours used"><span class="muted">no data</span></td>' in html
    assert csv_rows(totals)[1:] == [
        ["2026-11-24", "2026-11-30", "Team A", "1.71", "12.00", "3.00"],
        ["2026-11-24", "2026-11-30", "Team B", "0.29", "2.00", "no data"],
    ]
    rows = csv_rows(daily)
    assert rows[7] == ["2026-11-30", "Team A", "1.71", "12.00", "3.00"]
    assert rows[6] == ["2026-11-29", "Team A", "0.00", "0.00", "no data"]


def test_the_request_page_shows_what_the_request_used(world: World):
    # given
    mine = seed(world)
    theirs = Allocation.objects.get(tenant=world.tenant_b)

    # when
    html = client_for(world.alice).get(f"/requests/{mine.pk}/").content.decode()
    other = client_for(world.charlie).get(f"/requests/{theirs.pk}/").content.decode()

    # then
    assert (
        '<dd id="slice-hours-used">3.00 of 5.00 reported slice-hours (60 %) had a process or memory in use</dd>'
    ) in html
    assert (
        '<dd id="slice-hours-used"><span class="muted">no data</span>: no node agent reported on its slices</dd>'
        in (other)
    )
