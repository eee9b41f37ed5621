"""Showback: slice-hours and GPU-equivalent-hours per tenant, on the page and as CSV."""

from __future__ import annotations

import csv as csv_module
import io
import re
from datetime import UTC, date, datetime, timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from allocations import services
from allocations.dashboard import axis_ticks
from allocations.models import Allocation
from allocations.selectors import showback_for_user
from tests.conftest import World

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def held(world: World, actor, tenant, profile: str, count: int, start: datetime, end: datetime | None) -> Allocation:
    allocation, _ = services.request_allocation(
        tenant_id=tenant.pk,
        pool_id=world.pool.pk,
        profile=profile,
        count=count,
        lease_hours=8,
        purpose="showback",
        actor=actor,
    )
    status = Allocation.Status.ACTIVE if end is None else Allocation.Status.RELEASED
    # Test setup only: place the request in time, as if it had been activated and released then.
    Allocation.objects.filter(pk=allocation.pk).update(status=status, activated_at=start, ended_at=end)
    allocation.refresh_from_db()
    return allocation


def seed(world: World, now: datetime = NOW) -> None:
    # Team A: 2 x 1g.10gb (2 compute of 7, 2 slots of 8: 2/7 GPU) for 6 h yesterday, 18:00-24:00
    held(world, world.alice, world.tenant_a, "1g.10gb", 2, now - timedelta(hours=18), now - timedelta(hours=12))
    # Team B: 1 x 1g.10gb (1/7 GPU), still active, since 10:00 today
    held(world, world.charlie, world.tenant_b, "1g.10gb", 1, now - timedelta(hours=2), None)


def test_root_sees_each_tenants_hours_per_day(world: World):
    # given
    seed(world)
    # when
    showback = showback_for_user(world.root, days=2, now=NOW)
    # then
    assert showback.days == [NOW.date() - timedelta(days=1), NOW.date()]
    assert [
        (t.tenant_name, t.slice_hours, t.gpu_equivalent_hours, t.daily, t.daily_slice_hours) for t in showback.tenants
    ] == [
        ("Team A", 12.0, round(6 * 2 / 7, 2), [round(6 * 2 / 7, 2), 0.0], [12.0, 0.0]),
        ("Team B", 2.0, round(2 / 7, 2), [0.0, round(2 / 7, 2)], [0.0, 2.0]),
    ]


def test_alice_sees_only_her_tenants_usage(world: World):
    # given
    seed(world)
    # when
    showback = showback_for_user(world.alice, days=7, now=NOW)
    # then
    assert [t.tenant_name for t in showback.tenants] == ["Team A"]


def test_the_usage_page_and_csv_export(world: World):
    # given
    seed(world, timezone.now())
    # when
    page = client_for(world.charlie).get("/dashboard/usage/", {"days": "7"})
    csv = client_for(world.charlie).get("/dashboard/usage.csv", {"days": "7"})
    # then
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-tenant="Team B"' in html
    assert "Team A" not in html
    assert csv["Content-Type"] == "text/csv; charset=utf-8"
    assert csv["Content-Disposition"] == 'attachment; filename="fatia-showback-7d.csv"'
    lines = csv.content.decode().splitlines()
    assert lines[0] == "day,tenant,gpu_equivalent_hours,slice_hours,used_slice_hours"
    assert len(lines) == 1 + 7
    assert all(",Team B," in line for line in lines[1:])


def csv_rows(response) -> list[list[str]]:
    return list(csv_module.reader(io.StringIO(response.content.decode())))


def test_the_csv_has_one_row_per_tenant_and_day_with_a_date_in_every_day_cell(world: World):
    """Issue 9: the CSV put `total` rows in the `day` column."""
    # given
    with time_machine.travel(NOW, tick=False):
        seed(world)
        # when
        response = client_for(world.root).get("/dashboard/usage.csv", {"days": "7"})

    # then: per-day rows only, so a column's sum is the period's total
    def row(day: str, tenant: str, busy: str, hours: tuple[str, str]) -> list[str]:
        return [day, tenant, *(hours if day == busy else ("0.00", "0.00")), "no data"]

    days = [f"2026-11-{d}" for d in range(24, 31)]
    assert csv_rows(response) == [
        ["day", "tenant", "gpu_equivalent_hours", "slice_hours", "used_slice_hours"],
        *[row(d, "Team A", "2026-11-29", ("1.71", "12.00")) for d in days],
        *[row(d, "Team B", "2026-11-30", ("0.29", "2.00")) for d in days],
    ]
    for line in csv_rows(response)[1:]:
        date.fromisoformat(line[0])


def test_the_totals_csv_names_the_period_by_its_first_and_last_day(world: World):
    # given
    with time_machine.travel(NOW, tick=False):
        seed(world)
        # when
        response = client_for(world.root).get("/dashboard/usage.csv", {"days": "7", "rows": "totals"})
        mine = client_for(world.charlie).get("/dashboard/usage.csv", {"days": "7", "rows": "totals"})
    # then
    assert response["Content-Disposition"] == 'attachment; filename="fatia-showback-7d-totals.csv"'
    assert csv_rows(response) == [
        ["period_start", "period_end", "tenant", "gpu_equivalent_hours", "slice_hours", "used_slice_hours"],
        ["2026-11-24", "2026-11-30", "Team A", "1.71", "12.00", "no data"],
        ["2026-11-24", "2026-11-30", "Team B", "0.29", "2.00", "no data"],
    ]
    assert csv_rows(mine)[1:] == [["2026-11-24", "2026-11-30", "Team B", "0.29", "2.00", "no data"]]


@pytest.mark.parametrize(
    ("maximum", "ticks"),
    [
        (0.0, [0, 0.25, 0.5, 0.75, 1]),
        (1.71, [0, 0.5, 1, 1.5, 2]),
        (7.2, [0, 2, 4, 6, 8]),
        (100.0, [0, 25, 50, 75, 100]),
        (4350.0, [0, 2000, 4000, 6000, 8000]),
    ],
)
def test_the_chart_axis_has_round_ticks_from_zero_to_at_least_the_highest_day(maximum: float, ticks: list[float]):
    assert axis_ticks(maximum) == ticks


def test_the_chart_has_labelled_axes_and_a_table_of_its_numbers(world: World):
    """Issue 9: the chart had no axes and was hidden from screen readers."""
    # given
    with time_machine.travel(NOW, tick=False):
        seed(world)
        # when
        html = client_for(world.root).get("/dashboard/usage/", {"days": "7"}).content.decode()
    # then: a y axis titled and ticked, days under the bars, and a caption the chart is described by
    assert '<span class="usage-plot__y-title" aria-hidden="true">GPU-equivalent-hours</span>' in html
    assert re.findall(r'<span class="usage-plot__tick" style="bottom: ([\d.]+)%">([^<]+)</span>', html) == [
        ("0.0", "0"),
        ("25.0", "0.5"),
        ("50.0", "1"),
        ("75.0", "1.5"),
        ("100.0", "2"),
    ]
    assert re.findall(r'<span class="usage-plot__day">([^<]*)</span>', html) == [
        "11-24",
        "11-25",
        "11-26",
        "11-27",
        "11-28",
        "11-29",
        "11-30",
    ]
    assert 'role="img" aria-labelledby="chart-title" aria-describedby="chart-summary"' in html
    assert (
        '<figcaption class="usage-plot__x-title" id="chart-summary">Day (UTC), 2026-11-24 to 2026-11-30; bars stack '
        "each tenant’s GPU-equivalent-hours, the axis runs from 0 to 2. The table below has every number.</figcaption>"
    ) in html
    # the same numbers as a table: a row per day, a column per tenant and one for all of them
    table = html[html.index('<table class="table table--compact" id="showback-daily">') :]
    table = table[: table.index("</table>")]
    rows = [
        re.findall(r"<t[hd][^>]*>(?:<time[^>]*>)?([^<]*)", row) for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)
    ]
    assert rows == [
        ["Day (UTC)", "Team A", "Team B", "All shown tenants"],
        ["2026-11-24", "0.00", "0.00", "0.00"],
        ["2026-11-25", "0.00", "0.00", "0.00"],
        ["2026-11-26", "0.00", "0.00", "0.00"],
        ["2026-11-27", "0.00", "0.00", "0.00"],
        ["2026-11-28", "0.00", "0.00", "0.00"],
        ["2026-11-29", "1.71", "0.00", "1.71"],
        ["2026-11-30", "0.00", "0.29", "0.29"],
    ]
