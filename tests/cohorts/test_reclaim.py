"""Reclaim with grace on PostgreSQL (issue 15): a lender's request within its guarantee gets back what it lent,
youngest borrowed allocation first, after the cohort's grace; the borrower's request goes back to the queue."""

from __future__ import annotations

from datetime import timedelta

from django.core import mail
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from allocations import services
from allocations.models import Allocation, Cohort, Notification
from allocations.services.cohort_handover import hand_over_withdrawn
from allocations.services.cohort_notices import HANDOVER_TASK, RECLAIM_TASK
from allocations.services.cohort_reclaim import reclaim_borrowed, reclaim_due_borrowed
from allocations.services.queue import admit_queued
from tests.cohorts.helpers import cohort_pool, sent, used, verbs
from tests.conftest import World
from tests.queue.helpers import ask, release

Status = Allocation.Status


def lent_out(world: World, *, grace_minutes: int = 30) -> tuple[Allocation, Allocation, Allocation]:
    """Given: Team B (no guarantee) runs an older 2g.20gb and a younger 1g.10gb on slices Team A lends; Team A
    then uses 4 of its 7 compute slices (5 of 8 memory slots), so it lends exactly what B borrows (3 / 3).
    Returns (older, younger, the pool's first allocation of A)."""
    pool, _ = cohort_pool(world, grace_minutes=grace_minutes)
    older = ask(world, pool, "2g.20gb", b=True)
    younger = ask(world, pool, "1g.10gb", b=True)
    now = timezone.now()
    Allocation.objects.filter(pk=older.pk).update(activated_at=now - timedelta(hours=2))
    Allocation.objects.filter(pk=younger.pk).update(activated_at=now - timedelta(hours=1))
    a_first = ask(world, pool, "3g.40gb")
    ask(world, pool, "1g.10gb")
    assert {older.status, younger.status, a_first.status} == {Status.ACTIVE}
    assert not Allocation.objects.exclude(reclaim_at=None).exists()  # A within what it lends: no reclaim yet
    return older, younger, a_first


def test_a_lender_within_its_guarantee_waits_while_the_youngest_borrowed_request_gets_notice(world: World):
    older, younger, a_first = lent_out(world)
    pool = a_first.pool
    # when: Team A asks for one more slice, within its guarantee, which the cohort lent to B
    lender = ask(world, pool, "1g.10gb")
    # then: the lender waits in the queue, told why
    assert lender.status == Status.QUEUED
    assert "lent in its cohort" in lender.status_message
    # and: only the youngest borrowed request is given notice, for the cohort's grace, for this lender
    younger.refresh_from_db()
    older.refresh_from_db()
    assert younger.reclaimed_for_id == lender.pk
    assert younger.reclaim_at - younger.reclaim_notice_at == timedelta(minutes=30)
    assert older.reclaim_at is None
    assert verbs(younger)[-1] == "reclaim_notice"
    # and: its owner is told in the inbox and by e-mail
    [note] = Notification.objects.filter(recipient=world.charlie, kind=Notification.Kind.BORROW_RECLAIM)
    assert f"Request #{younger.pk}" in note.text
    assert [m.to for m in mail.outbox if "borrowed" in m.subject] == [["charlie@example.test"]]
    # and: everyone sees the deadline
    row = world.client(world.charlie).get(f"/api/v1/allocations/{younger.pk}/").json()
    assert row["is_borrowed"] and row["reclaim_at"] is not None
    # and: the request page and the request list show the badge and the deadline
    browser = Client()
    browser.force_login(world.charlie)
    for page in (reverse("request-detail", args=[younger.pk]), reverse("home")):
        html = browser.get(page).content.decode()
        assert "badge--borrowed" in html and f"{younger.reclaim_at:%Y-%m-%d %H:%M} UTC" in html, page
    older_page = browser.get(reverse("request-detail", args=[older.pk])).content.decode()
    assert "badge--borrowed" in older_page and "reclaim at" not in older_page
    browser.force_login(world.alice)
    assert "badge--borrowed" not in browser.get(reverse("request-detail", args=[a_first.pk])).content.decode()
    # when: another admission pass runs (a release elsewhere), the lender still waits and no new notice is given
    assert admit_queued(pool_id=pool.pk) == []
    assert Allocation.objects.exclude(reclaim_at=None).count() == 1


def test_the_grace_is_respected_then_the_borrower_is_requeued_and_the_lender_admitted_once(world: World):
    older, younger, a_first = lent_out(world)
    pool = a_first.pool
    lender = ask(world, pool, "1g.10gb")
    younger.refresh_from_db()
    deadline = younger.reclaim_at
    # when: the sweep runs before the deadline
    assert reclaim_due_borrowed(now=deadline - timedelta(seconds=1)) == {}
    assert reclaim_borrowed(allocation_id=younger.pk, now=deadline - timedelta(seconds=1)) == "unchanged"
    younger.refresh_from_db()
    assert younger.status == Status.ACTIVE
    # when: it runs after the deadline
    assert reclaim_due_borrowed(now=deadline + timedelta(seconds=1)) == {"reclaimed": 1}
    # then: the borrowed request is released, and a copy waits in the queue with the place it first had
    younger.refresh_from_db()
    assert younger.status == Status.RELEASING
    copy = Allocation.objects.get(status=Status.QUEUED, tenant=world.tenant_b)
    assert copy.queued_at == younger.created_at
    assert (copy.profile, copy.count, copy.borrowed_compute_slices) == ("1g.10gb", 1, 1)
    assert "reclaim" in verbs(younger)
    # and: a second run (a redelivered task) changes nothing
    assert reclaim_borrowed(allocation_id=younger.pk, now=deadline + timedelta(minutes=1)) == "unchanged"
    assert Allocation.objects.filter(tenant=world.tenant_b, status=Status.QUEUED).count() == 1
    # when: the slices are gone and the admission pass runs
    services.provisioning.teardown_allocation(allocation_id=younger.pk)
    admitted = admit_queued(pool_id=pool.pk)
    # then: the lender is admitted, once; the copy waits (A uses what it lent now)
    assert [a.pk for a in admitted] == [lender.pk]
    assert verbs(lender).count("admit") == 1
    assert admit_queued(pool_id=pool.pk) == []
    copy.refresh_from_db()
    assert copy.status == Status.QUEUED
    # and: the counters count the whole usage of what holds quota: A 3g+1g+1g, B the older 2g.20gb only
    assert used(world, pool) == (5, 6)
    assert used(world, pool, b=True) == (2, 2)
    # when: Team A releases its 3g.40gb, the cohort lends again and the copy is admitted on borrowed slices
    release(world, a_first)
    [again] = admit_queued(pool_id=pool.pk)
    assert again.pk == copy.pk and again.status == Status.ACTIVE
    again.refresh_from_db()
    assert again.is_borrowed and used(world, pool, b=True) == (3, 3)


def test_grace_zero_takes_the_borrowed_slices_back_at_once_through_the_outbox(
    world: World, django_capture_on_commit_callbacks
):
    _, younger, a_first = lent_out(world, grace_minutes=0)
    with django_capture_on_commit_callbacks() as callbacks:
        lender = ask(world, a_first.pool, "1g.10gb")
    assert lender.status == Status.QUEUED
    assert RECLAIM_TASK in sent(callbacks)
    assert reclaim_borrowed(allocation_id=younger.pk) == "reclaimed"


def test_withdrawing_the_lender_calls_the_notice_off_and_tells_the_owner(
    world: World, django_capture_on_commit_callbacks
):
    _, younger, a_first = lent_out(world)
    lender = ask(world, a_first.pool, "1g.10gb")
    younger.refresh_from_db()
    deadline = younger.reclaim_at
    # when: the lender's request is withdrawn
    with django_capture_on_commit_callbacks() as callbacks:
        services.release_allocation(allocation_id=lender.pk, actor=world.alice)
    # then: the hand-over task is queued through the outbox; until it runs, the due step leaves the notice to it
    assert HANDOVER_TASK in sent(callbacks)
    assert reclaim_due_borrowed(now=deadline + timedelta(minutes=1)) == {"unchanged": 1}
    # when: it runs; no other lender waits
    assert hand_over_withdrawn(lender_id=lender.pk) == 0
    # then: the notice is cleared, audited, and the owner told
    younger.refresh_from_db()
    assert (younger.reclaim_at, younger.reclaim_notice_at, younger.reclaimed_for_id) == (None, None, None)
    assert verbs(younger)[-2:] == ["reclaim_notice", "reclaim_cancel"]
    texts = list(Notification.objects.filter(recipient=world.charlie).values_list("text", flat=True))
    assert any("keeps its borrowed slices" in t for t in texts)
    # and: past the old deadline nothing is taken back
    assert reclaim_due_borrowed(now=deadline + timedelta(minutes=1)) == {}
    younger.refresh_from_db()
    assert younger.status == Status.ACTIVE


def test_a_notice_whose_lender_no_longer_waits_is_called_off_by_the_due_step(world: World):
    _, younger, a_first = lent_out(world)
    lender = ask(world, a_first.pool, "1g.10gb")
    # given: the lender ended without calling the notice off (a failure, say)
    Allocation.objects.filter(pk=lender.pk).update(status=Status.FAILED)
    assert reclaim_due_borrowed() == {"cancelled": 1}
    younger.refresh_from_db()
    assert (younger.status, younger.reclaim_at) == (Status.ACTIVE, None)


def test_a_lender_queued_for_room_in_a_full_pool_reclaims_borrowed_slices_there(world: World):
    # given: one GPU; Team A is guaranteed two GPUs' worth, Team B nothing, and B borrows the whole GPU
    pool, cohort = cohort_pool(world)
    services.set_tenant_quota(
        tenant_id=world.tenant_a.pk, pool_id=pool.pk, compute_slices_limit=21, memory_slices_limit=24,
        actor=world.root,
    )  # fmt: skip
    Cohort.objects.filter(pk=cohort.pk).update(reclaim_grace_minutes=5)
    borrowed = [ask(world, pool, "7g.80gb", b=True) for _ in range(2)]
    assert {a.status for a in borrowed} == {Status.ACTIVE}
    # when: Team A asks for a slice: its quota has room, the pool has none
    lender = ask(world, pool, "1g.10gb")
    # then: it waits for room, and one of B's borrowed GPUs (the youngest) is given notice for it
    assert lender.status == Status.QUEUED
    assert "no free layout fits" in lender.status_message
    older, younger = sorted(borrowed, key=lambda a: a.pk)
    noticed = list(Allocation.objects.exclude(reclaim_at=None).values_list("pk", "reclaimed_for_id"))
    assert noticed == [(younger.pk, lender.pk)]
    # when: room frees up otherwise (B releases the other GPU) and the queue is admitted
    release(world, older)
    assert [a.pk for a in admit_queued(pool_id=pool.pk)] == [lender.pk]
    # then: the notice is called off: the younger one keeps running, told so
    younger.refresh_from_db()
    assert (younger.status, younger.reclaim_at) == (Status.ACTIVE, None)
    assert verbs(younger)[-1] == "reclaim_cancel"
