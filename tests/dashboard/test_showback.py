"""Showback: slice-hours and GPU-equivalent-hours per tenant, on the page and as CSV."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.test import Client
from django.utils import timezone

from allocations import services
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
    assert lines[0] == "day,tenant,gpu_equivalent_hours,slice_hours"
    assert len(lines) == 1 + 7 + 1
    assert all(",Team B," in line for line in lines[1:])
    assert lines[-1].startswith("total,Team B,")
