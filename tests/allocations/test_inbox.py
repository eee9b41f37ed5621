"""The in-app inbox (issue 9: notifications were e-mail only): who is told what, in the transaction of the
change, and the header's counts."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from allocations import services
from allocations.models import Allocation, Notification
from allocations.selectors import NavCounts, nav_counts
from tenants.errors import QuotaExceeded
from tenants.models import Membership
from tests.conftest import World
from tests.factories import MembershipFactory, UserFactory

Kind = Notification.Kind


def ask(world: World, actor, *, profile: str = "3g.40gb", lease_hours: int = 8) -> Allocation:
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile=profile,
        count=1,
        lease_hours=lease_hours,
        purpose="sweep",
        actor=actor,
    )
    return allocation


def sent() -> list[tuple[str, str]]:
    return list(Notification.objects.order_by("id").values_list("recipient__username", "kind"))


def test_a_pending_request_tells_each_manager_of_the_tenant_but_not_the_one_who_asked(world: World):
    # given: a second manager of Team A, and a manager of Team B
    olga = UserFactory(username="olga")
    MembershipFactory(user=olga, tenant=world.tenant_a, role=Membership.Role.MANAGER)
    MembershipFactory(user=UserFactory(username="bert"), tenant=world.tenant_b, role=Membership.Role.MANAGER)
    # when
    by_alice = ask(world, world.alice)
    by_olga = ask(world, olga)
    # then
    assert sent() == [
        ("mallory", Kind.REQUEST_PENDING),
        ("olga", Kind.REQUEST_PENDING),
        ("mallory", Kind.REQUEST_PENDING),
    ]
    first = Notification.objects.order_by("id").first()
    assert first is not None
    assert (first.text, first.link) == (
        "alice asks for 1 × 3g.40gb in H100 pool for Team A (8 h): sweep",
        f"/requests/{by_alice.pk}/",
    )
    assert Notification.objects.filter(link=f"/requests/{by_olga.pk}/").count() == 1


def test_a_request_approved_automatically_tells_nobody(world: World):
    # when
    ask(world, world.alice, profile="1g.10gb")
    # then
    assert sent() == []


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_a_decision_tells_the_requester_only(world: World, decision: str):
    # given
    allocation = ask(world, world.alice)
    Notification.objects.all().delete()
    # when
    if decision == "approve":
        services.approve_allocation(allocation_id=allocation.pk, actor=world.mallory, reason="go")
    else:
        services.reject_allocation(allocation_id=allocation.pk, actor=world.mallory, reason="too big")
    # then
    note = Notification.objects.get()
    verdict, reason = ("approved", "go") if decision == "approve" else ("rejected", "too big")
    assert (note.recipient, note.kind, note.text) == (
        world.alice,
        Kind.REQUEST_DECIDED,
        f"mallory {verdict} request #{allocation.pk} (1 × 3g.40gb in H100 pool). Reason: {reason}",
    )


def test_a_manager_deciding_her_own_request_is_not_told_about_it(world: World):
    # given
    allocation = ask(world, world.mallory)
    # when
    services.approve_allocation(allocation_id=allocation.pk, actor=world.mallory)
    # then
    assert sent() == []


def test_a_change_that_rolls_back_leaves_no_notification(world: World):
    # given: two 7g.80gb take Team A's 14 compute slices
    first, second = ask(world, world.alice, profile="7g.80gb"), ask(world, world.alice, profile="7g.80gb")
    third = ask(world, world.alice, profile="7g.80gb")
    services.approve_allocation(allocation_id=first.pk, actor=world.mallory)
    services.approve_allocation(allocation_id=second.pk, actor=world.mallory)
    before = sent()
    # when
    with pytest.raises(QuotaExceeded):
        services.approve_allocation(allocation_id=third.pk, actor=world.mallory)
    # then
    assert sent() == before


def test_the_lease_warning_goes_to_the_requester(world: World):
    # given
    allocation = services.provision_allocation(allocation_id=ask(world, world.alice, profile="1g.10gb").pk)
    assert allocation.lease_expires_at is not None
    # when
    services.warn_expiring_leases(now=allocation.lease_expires_at - timedelta(hours=1))
    # then
    note = Notification.objects.get()
    assert (note.recipient, note.kind, note.link) == (world.alice, Kind.LEASE_EXPIRING, f"/requests/{allocation.pk}/")
    assert note.text == (
        f"The lease of request #{allocation.pk} (1 × 1g.10gb in H100 pool) ends at "
        f"{allocation.lease_expires_at:%Y-%m-%d %H:%M} UTC. Extend or release it."
    )


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_a_decided_quota_change_tells_the_manager_who_asked(world: World, decision: str):
    # given
    change, _ = services.request_quota_change(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        compute_slices_limit=28,
        memory_slices_limit=32,
        justification="growth",
        actor=world.mallory,
    )
    # when
    if decision == "approve":
        services.approve_quota_change(change_id=change.pk, actor=world.root)
    else:
        services.reject_quota_change(change_id=change.pk, actor=world.root, reason="budget")
    # then
    note = Notification.objects.get()
    assert (note.recipient, note.kind, note.link) == (world.mallory, Kind.QUOTA_CHANGE_DECIDED, "/quotas/")
    expected = {
        "approve": (
            f"root approved quota change #{change.pk} for Team A in H100 pool (28 compute slices, 32 memory slots)."
        ),
        "reject": (
            f"root rejected quota change #{change.pk} for Team A in H100 pool (28 compute slices, 32 memory slots). "
            "Reason: budget"
        ),
    }
    assert note.text == expected[decision]


def test_marking_read_is_idempotent_and_only_for_ones_own_notifications(world: World):
    # given
    ask(world, world.alice)
    note = Notification.objects.get()
    # when
    first = services.mark_notification_read(notification_id=note.pk, actor=world.mallory)
    again = services.mark_notification_read(notification_id=note.pk, actor=world.mallory)
    # then
    assert first.read_at is not None
    assert again.read_at == first.read_at
    for other in (world.alice, world.root):
        with pytest.raises(Notification.DoesNotExist):
            services.mark_notification_read(notification_id=note.pk, actor=other)


def test_mark_all_read_touches_only_the_actors_unread_notifications(world: World):
    # given: two for mallory, one for alice
    first = ask(world, world.alice)
    ask(world, world.alice)
    services.reject_allocation(allocation_id=first.pk, actor=world.mallory, reason="no")
    # when
    marked = services.mark_all_notifications_read(actor=world.mallory)
    again = services.mark_all_notifications_read(actor=world.mallory)
    # then
    assert (marked, again) == (2, 0)
    assert list(Notification.objects.filter(read_at__isnull=True).values_list("recipient__username", flat=True)) == [
        "alice"
    ]


def test_the_header_counts_come_from_one_query(world: World):
    # given: two pending requests and one pending extension in Team A; one unread for mallory is read
    ask(world, world.alice)
    ask(world, world.alice)
    active = services.provision_allocation(allocation_id=ask(world, world.alice, profile="1g.10gb").pk)
    services.request_lease_extension(allocation_id=active.pk, hours=100, actor=world.alice)
    services.mark_notification_read(
        notification_id=Notification.objects.filter(recipient=world.mallory)[0].pk, actor=world.mallory
    )
    # when
    with CaptureQueriesContext(connection) as queries:
        mallory = nav_counts(world.mallory)
    # then
    assert len(queries) == 1
    assert mallory == NavCounts(is_manager=True, unread=2, pending_approvals=3)
    assert nav_counts(world.alice) == NavCounts(is_manager=False, unread=0, pending_approvals=0)
    assert nav_counts(world.charlie) == NavCounts(is_manager=False, unread=0, pending_approvals=0)
    assert nav_counts(world.root) == NavCounts(is_manager=True, unread=0, pending_approvals=3)
