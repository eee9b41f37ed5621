"""Two lenders at once each reclaim their own borrowed slices, and concurrent due sweeps take each back once
(PostgreSQL, real threads; issue 15)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from allocations import services
from allocations.models import Allocation, SlicePlacement
from allocations.services.cohort_reclaim import reclaim_due_borrowed
from allocations.services.provisioning import provision_allocation, teardown_allocation
from allocations.services.queue import admit_queued
from tenants.models import AuditEvent
from tests.cohorts.helpers import cohort_pool, lender_waits
from tests.conftest import World
from tests.queue.helpers import ask

pytestmark = pytest.mark.django_db(transaction=True)
Status = Allocation.Status


def at_once(jobs: list[Callable[[], object]]) -> list[object]:
    barrier = threading.Barrier(len(jobs))
    results: list[object] = []
    lock = threading.Lock()

    def run(job: Callable[[], object]) -> None:
        try:
            barrier.wait()
            result = job()
        except Exception as exc:  # noqa: BLE001 - every failure is collected and asserted on
            result = exc
        finally:
            connection.close()
        with lock:
            results.append(result)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_concurrent_lender_requests_each_reclaim_once_and_each_borrowed_request_is_taken_back_once(world: World):
    # given: Team B borrows two 1g.10gb; Team A uses 5 of its 7 so it lends exactly those 2
    assert connection.vendor == "postgresql"
    pool, _ = cohort_pool(world)
    borrowed = [ask(world, pool, "1g.10gb", b=True) for _ in range(2)]
    ask(world, pool, "3g.40gb")
    ask(world, pool, "2g.20gb")
    # and: two more slices for Team A approved (charged), not yet provisioned
    lenders = [
        services.request_allocation(
            tenant_id=world.tenant_a.pk, pool_id=pool.pk, profile="1g.10gb", count=1, lease_hours=8,
            purpose="lender", actor=world.alice,
        )[0]
        for _ in range(2)
    ]  # fmt: skip
    # when: both are provisioned at once
    results = at_once([lambda pk=a.pk: provision_allocation(allocation_id=pk) for a in lenders])
    # then: both wait, and each borrowed request has notice for exactly one of them
    assert sorted(r.status for r in results if isinstance(r, Allocation)) == [Status.QUEUED] * 2, results
    marks = sorted(Allocation.objects.filter(pk__in=[b.pk for b in borrowed]).values_list("reclaimed_for", flat=True))
    assert marks == sorted(a.pk for a in lenders)
    # when: two due sweeps run at once past the deadline
    later = timezone.now() + timedelta(minutes=31)
    outcomes = at_once([lambda: reclaim_due_borrowed(now=later) for _ in range(2)])
    # then: each borrowed request was taken back once and put back in the queue once
    assert not [o for o in outcomes if isinstance(o, Exception)], outcomes
    reclaims = Counter(AuditEvent.objects.filter(verb="reclaim").values_list("object_id", flat=True))
    assert reclaims == Counter({str(b.pk): 1 for b in borrowed})
    assert Allocation.objects.filter(tenant=world.tenant_b, status=Status.QUEUED).count() == 2


def test_concurrent_releases_of_the_reclaimed_slices_admit_the_lender_once_into_its_room(world: World):
    # given: a lender waits for two borrowed slices, and the grace is over: both are being released
    lender, borrowed, _ = lender_waits(world)
    later = timezone.now() + timedelta(minutes=31)
    assert reclaim_due_borrowed(now=later) == {"reclaimed": 2}
    # when: each release finishes, and asks for an admission pass, at the same time
    passes = at_once(
        [
            lambda pk=b.pk: (teardown_allocation(allocation_id=pk), admit_queued(pool_id=lender.pool_id))[1]
            for b in borrowed
        ]
    )
    # then: the lender is admitted once, by one of the passes, into the room planned for it; nothing else is
    assert not [p for p in passes if isinstance(p, Exception)], passes
    admitted = [a.pk for p in passes if isinstance(p, list) for a in p]
    assert admitted == [lender.pk]
    assert AuditEvent.objects.filter(verb="admit", object_id=str(lender.pk)).count() == 1
    assert list(SlicePlacement.objects.filter(allocation=lender).values_list("gpu__node__name", "start")) == [
        ("q1-node-1", 0)
    ]
