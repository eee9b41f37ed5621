"""Two lenders at once each reclaim their own borrowed slices, and concurrent due sweeps take each back once
(PostgreSQL, real threads; issue 15)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from allocations import services
from allocations.models import Allocation, SlicePlacement
from allocations.services.cohort_handover import hand_over_withdrawn, notices_left
from allocations.services.cohort_reclaim import reclaim_due_borrowed
from allocations.services.provisioning import provision_allocation, teardown_allocation
from allocations.services.queue import admit_queued
from allocations.tasks import hand_over_notices_task
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


def test_a_withdrawn_lenders_hand_over_runs_beside_an_admission_pass_and_a_due_sweep_and_hands_over_once(
    world: World,
):
    # given: a lender whose two borrowed slices are on notice, and a second lender waiting with none of its own
    lender, borrowed, _ = lender_waits(world)
    second = ask(world, lender.pool, "4g.40gb")
    assert second.status == Status.QUEUED
    # and: the first lender is withdrawn (its hand-over is queued through the outbox)
    services.release_allocation(allocation_id=lender.pk, actor=world.alice)
    # when: two copies of the hand-over task, an admission pass and a due sweep run at once
    outcomes = at_once(
        [
            lambda: hand_over_withdrawn(lender_id=lender.pk),
            lambda: hand_over_withdrawn(lender_id=lender.pk),
            lambda: admit_queued(pool_id=lender.pool_id),
            lambda: reclaim_due_borrowed(),
        ]
    )
    # then: no deadlock (they take their locks in one order)
    assert not [o for o in outcomes if isinstance(o, Exception)], outcomes
    # when: the task runs again while a notice is left (one the due sweep held was passed over: SKIP LOCKED)
    tries = 0
    while notices_left(lender.pk) and tries < 3:
        hand_over_withdrawn(lender_id=lender.pk)
        tries += 1
    # then: each notice went to the second lender, once
    assert not notices_left(lender.pk)
    handed = Counter(AuditEvent.objects.filter(verb="reclaim_handover").values_list("object_id", flat=True))
    assert handed == Counter({str(b.pk): 1 for b in borrowed})
    assert set(Allocation.objects.filter(pk__in=[b.pk for b in borrowed]).values_list("reclaimed_for", flat=True)) == {
        second.pk
    }


def test_the_hand_over_task_runs_again_while_a_notice_it_passed_over_is_left(world: World):
    # given: a withdrawn lender's two notices, a second lender waiting, and one borrowed allocation held by another
    # transaction (a due sweep, say) while the hand-over task runs
    lender, borrowed, _ = lender_waits(world)
    second = ask(world, lender.pool, "4g.40gb")
    services.release_allocation(allocation_id=lender.pk, actor=world.alice)
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                Allocation.objects.select_for_update().filter(pk=borrowed[0].pk).get()
                held.set()
                done.wait(timeout=30)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(timeout=30)
    try:
        # when: the task runs: without the held one, the free one alone makes no room, and calling it off would
        # leave the second lender a notice short; so it changes nothing and does not end while a notice is left
        result = hand_over_notices_task.apply(args=[lender.pk])
    finally:
        done.set()
        holder.join()
    assert result.failed()
    assert {Allocation.objects.get(pk=b.pk).reclaimed_for_id for b in borrowed} == {lender.pk}
    assert notices_left(lender.pk)
    # when: it runs again once the other transaction is done (the outbox sends it again)
    assert hand_over_notices_task.apply(args=[lender.pk]).successful()
    # then: both notices are the second lender's
    assert not notices_left(lender.pk)
    assert {Allocation.objects.get(pk=b.pk).reclaimed_for_id for b in borrowed} == {second.pk}
