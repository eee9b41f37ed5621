"""Concurrent releases admit exactly the right queued requests, each once (PostgreSQL, real threads)."""

from __future__ import annotations

from collections import Counter

import pytest
from django.db import connection

from allocations.models import Allocation, SlicePlacement
from allocations.services.queue import admit_queued
from tenants.models import AuditEvent
from tests.allocations.test_concurrency import run_in_parallel
from tests.conftest import World
from tests.queue.helpers import ask, release, small_pool

pytestmark = pytest.mark.django_db(transaction=True)
Status = Allocation.Status
RELEASES = 5


def test_concurrent_releases_each_followed_by_an_admission_pass_admit_each_queued_request_once(world: World):
    # given: the GPU full of Team A's seven 1g.10gb, and Team B's three 1g.10gb queued behind them
    assert connection.vendor == "postgresql"
    pool = small_pool(world)
    held = [ask(world, pool, "1g.10gb") for _ in range(7)]
    assert {a.status for a in held} == {Status.ACTIVE}
    waiting = [ask(world, pool, "1g.10gb", b=True) for _ in range(3)]
    assert {a.status for a in waiting} == {Status.QUEUED}

    def release_and_admit(i: int) -> str:
        # when: five releases finish at once, each running the admission pass its task would run
        release(world, held[i])
        return f"admitted {len(admit_queued(pool_id=pool.pk))}"

    outcomes = list(run_in_parallel(release_and_admit, threads=RELEASES).elements())
    # then: no pass failed, and three admissions happened in all
    assert sum(int(o.split()[1]) for o in outcomes if o.startswith("admitted")) == 3, outcomes
    # and: each queued request is active, admitted exactly once
    for allocation in waiting:
        allocation.refresh_from_db()
        assert allocation.status == Status.ACTIVE
    admits = Counter(AuditEvent.objects.filter(verb="admit").values_list("object_id", flat=True))
    assert admits == Counter({str(a.pk): 1 for a in waiting})
    # and: no slot is held twice: Team A's two left and Team B's three sit on five distinct slots
    starts = list(
        SlicePlacement.objects.filter(allocation__status=Status.ACTIVE, gpu__node__pool=pool).values_list(
            "gpu_id", "start"
        )
    )
    assert len(starts) == 5 and len(set(starts)) == 5
