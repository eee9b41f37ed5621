"""Slot-aware reclaim on PostgreSQL (issue 15): a lender waiting for room gets notice given to the borrowed
allocations whose release makes a layout its profile fits, not merely the youngest ones with enough slices."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from allocations import services
from allocations.models import Allocation, SlicePlacement
from allocations.services.cohort_reclaim import reclaim_due_borrowed
from allocations.services.queue import admit_queued
from tests.cohorts.helpers import cohort_pool
from tests.conftest import World
from tests.queue.helpers import ask

Status = Allocation.Status


def test_the_older_borrowed_slice_whose_slot_fits_the_lender_is_taken_not_the_youngest(world: World):
    # given: two H100s; Team A is guaranteed 21 compute / 24 memory there, Team B nothing (all it runs is borrowed)
    pool, _ = cohort_pool(world)
    services.set_tenant_quota(
        tenant_id=world.tenant_a.pk, pool_id=pool.pk, compute_slices_limit=21, memory_slices_limit=24,
        actor=world.root,
    )  # fmt: skip
    # and: B's older 4g.40gb and A's own 4g.40gb each hold one GPU's start 0; a 3g.40gb of A and B's younger
    # 3g.40gb fill start 4 of each: the pool is full
    older = ask(world, pool, "4g.40gb", b=True)
    own = [ask(world, pool, "4g.40gb"), ask(world, pool, "3g.40gb")]
    younger = ask(world, pool, "3g.40gb", b=True)
    now = timezone.now()
    Allocation.objects.filter(pk=older.pk).update(activated_at=now - timedelta(hours=2))
    Allocation.objects.filter(pk=younger.pk).update(activated_at=now - timedelta(hours=1))
    Allocation.objects.filter(pk__in=[a.pk for a in own]).update(activated_at=now - timedelta(hours=8))
    assert Allocation.objects.filter(pool=pool, status=Status.ACTIVE).count() == 4
    starts = dict(SlicePlacement.objects.filter(allocation__in=[older, younger]).values_list("allocation_id", "start"))
    assert starts == {older.pk: 0, younger.pk: 4}
    # when: Team A asks for another 4g.40gb, within its guarantee: a 4g.40gb only goes at start 0
    lender = ask(world, pool, "4g.40gb")
    # then: it waits for room, and notice goes at once to the older 4g.40gb alone: releasing the younger 3g.40gb
    # frees slots a 4g.40gb cannot use (counting slices, the old rule took both)
    assert lender.status == Status.QUEUED
    noticed = list(Allocation.objects.exclude(reclaim_at=None).values_list("pk", "reclaimed_for_id"))
    assert noticed == [(older.pk, lender.pk)]
    # when: another admission pass runs, no further notice is given (idempotent)
    assert admit_queued(pool_id=pool.pk) == []
    assert list(Allocation.objects.exclude(reclaim_at=None).values_list("pk", flat=True)) == [older.pk]
    # when: Team B is given a large guarantee meanwhile (its share of use, which counts A's long use of its own
    # slices, is now the lower: B's requests come first in fair order),
    # and the grace is over: the older 4g.40gb is taken back, and its copy waits in the queue
    services.set_tenant_quota(
        tenant_id=world.tenant_b.pk, pool_id=pool.pk, compute_slices_limit=70, memory_slices_limit=80,
        actor=world.root,
    )  # fmt: skip
    older.refresh_from_db()
    assert reclaim_due_borrowed(now=older.reclaim_at + timedelta(seconds=1)) == {"reclaimed": 1}
    copy = Allocation.objects.get(status=Status.QUEUED, tenant=world.tenant_b)
    services.provisioning.teardown_allocation(allocation_id=older.pk)
    # then: the room goes to the lender it was taken back for, not to the copy
    assert [a.pk for a in admit_queued(pool_id=pool.pk)] == [lender.pk]
    copy.refresh_from_db()
    assert copy.status == Status.QUEUED
