"""A held request past its bound is placed exactly once when several passes run at once (PostgreSQL, real threads):
the minute step in two workers and a release's pass, all under the pass's locks (issue 14)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from allocations.admission.due import admit_due_holds
from allocations.models import Allocation, SlicePlacement
from allocations.services.queue import admit_queued
from tenants.models import AuditEvent
from tests.admission.helpers import holding_pool
from tests.allocations.test_concurrency import run_in_parallel
from tests.conftest import World
from tests.queue.helpers import ask

pytestmark = pytest.mark.django_db(transaction=True)
Status = Allocation.Status
PASSES = 4


def test_concurrent_passes_place_a_held_request_past_its_bound_exactly_once(world: World):
    # given: two held 1g.10gb requests in a pool of two empty GPUs, both past their bound
    assert connection.vendor == "postgresql"
    pool = holding_pool(world, nodes=2)
    held = [ask(world, pool, "1g.10gb"), ask(world, pool, "1g.10gb", b=True)]
    assert {a.status for a in held} == {Status.QUEUED}
    Allocation.objects.filter(pk__in=[a.pk for a in held]).update(held_until=timezone.now() - timedelta(seconds=1))

    def one_pass(i: int) -> str:
        # when: the minute step runs in some workers while a release's pass runs in the others, all at once
        n = sum(admit_due_holds().values()) if i % 2 else len(admit_queued(pool_id=pool.pk))
        return f"admitted {n}"

    outcomes = list(run_in_parallel(one_pass, threads=PASSES).elements())
    # then: no pass failed and two admissions happened in all, each request admitted once, forced
    assert sorted(outcomes, reverse=True)[0].startswith("admitted") and all(o.startswith("admitted") for o in outcomes)
    assert sum(int(o.split()[1]) for o in outcomes) == 2, outcomes
    admits = AuditEvent.objects.filter(verb="admit", object_id__in=[str(a.pk) for a in held])
    assert Counter(admits.values_list("object_id", flat=True)) == Counter({str(a.pk): 1 for a in held})
    assert [e.after["forced_after_hold"] for e in admits] == [True, True]
    # and: they share the GPU the first one broke (the second strands nothing there), on distinct slots
    starts = list(SlicePlacement.objects.filter(allocation__in=held).values_list("gpu_id", "start"))
    assert len(starts) == 2 and len(set(starts)) == 2
    assert len({gpu for gpu, _ in starts}) == 1
    # and: the minute step converges: nothing is due any more
    assert admit_due_holds() == {}
