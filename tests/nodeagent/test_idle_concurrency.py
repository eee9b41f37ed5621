"""Idle reclaim under concurrency: sweeps that overlap warn once and release once (row lock on the allocation)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.core import mail
from django.db import connection

from allocations.models import Allocation
from allocations.services import reclaim
from tenants.models import AuditEvent
from tests.allocations.test_concurrency import PARALLEL, run_in_parallel
from tests.conftest import World
from tests.nodeagent.seed import minutes, report
from tests.nodeagent.test_idle_reclaim import NOW, idle_slices, reclaim_on

pytestmark = pytest.mark.django_db(transaction=True)


def test_parallel_sweeps_flag_and_warn_once_then_release_once(world: World):
    # given
    assert connection.vendor == "postgresql"
    reclaim_on(world, grace=5)
    allocation, placements = idle_slices(world)

    # when: twenty sweeps at once, twice
    flagged = run_in_parallel(lambda i: reclaim.judge_idle_allocation(allocation_id=allocation.pk, now=NOW))
    later = NOW + timedelta(minutes=5)
    minutes(placements[0], NOW - timedelta(minutes=1), later - timedelta(minutes=1))
    report(placements[0], at=later - timedelta(seconds=5))
    released = run_in_parallel(lambda i: reclaim.judge_idle_allocation(allocation_id=allocation.pk, now=later))

    # then
    assert flagged == Counter({"flagged": 1, "unchanged": PARALLEL - 1})
    assert released == Counter({"reclaimed": 1, "unchanged": PARALLEL - 1})
    assert len(mail.outbox) == 1
    assert Allocation.objects.get(pk=allocation.pk).status == Allocation.Status.RELEASING
    verbs = Counter(AuditEvent.objects.filter(object_id=str(allocation.pk)).values_list("verb", flat=True))
    assert (verbs["flag_idle"], verbs["warn_idle"], verbs["reclaim_idle"], verbs["release"]) == (1, 1, 1, 1)
