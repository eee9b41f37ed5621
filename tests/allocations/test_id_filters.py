"""`?tenant=` and `?allocation=` on /api/v1/quotas/ and /api/v1/lease-extensions/ are ids held within MAX_ID
(tenants/api/filters.py IdFilter): a huge one matches nothing. PostgreSQL compares one as a numeric, but SQLite
(the demo's database) cannot bind it and answered 500, so the bound is checked on the query itself too."""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models import QuerySet

from allocations.api.filters import LeaseExtensionFilter, QuotaFilter
from allocations.models import LeaseExtension, Quota
from tenants.api.filters import MAX_ID
from tests.conftest import World

HUGE = [str(2**70), str(-(2**70))]


def rows(data: Any) -> list[Any]:
    return data["results"] if isinstance(data, dict) else data


@pytest.mark.parametrize(("url", "name"), [("/api/v1/quotas/", "tenant"), ("/api/v1/lease-extensions/", "allocation")])
def test_a_huge_id_filter_is_an_empty_list_not_a_500(world: World, url: str, name: str) -> None:
    client = world.client(world.root)
    for value in HUGE:
        response = client.get(url, {name: value})
        assert response.status_code == 200, (value, response.content)
        assert rows(response.json()) == [], value


@pytest.mark.parametrize(
    ("filterset", "queryset", "name"),
    [(QuotaFilter, Quota.objects.all, "tenant"), (LeaseExtensionFilter, LeaseExtension.objects.all, "allocation")],
)
def test_the_query_binds_no_id_beyond_what_a_bigint_holds(
    world: World, filterset: Any, queryset: Any, name: str
) -> None:
    for value in HUGE:
        qs: QuerySet[Any] = filterset(data={name: value}, queryset=queryset()).qs
        _, params = qs.query.sql_with_params()
        assert params, value
        assert all(-MAX_ID <= int(p) <= MAX_ID for p in params), (value, params)
