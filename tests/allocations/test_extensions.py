"""Lease extensions follow the auto-approval policy (issue 9: an auto-approved 8 h lease was extended to
32 h, and up to 168 h, with no manager, while asking for 48 h up front goes to a manager).

Team A's policy (tests/conftest.py): leases up to 24 h are approved at once, 168 h at most.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from allocations import services
from allocations.models import Allocation, LeaseExtension, Notification
from tenants.errors import InvalidInput, InvalidTransition, NotAllowed
from tenants.models import AuditEvent, Membership
from tests.allocating import active_request
from tests.conftest import World
from tests.factories import MembershipFactory, UserFactory

Status = Allocation.Status
Ext = LeaseExtension.Status


def active(world: World, *, lease_hours: int = 8, actor=None) -> Allocation:
    return active_request(world, lease_hours=lease_hours, purpose="training", actor=actor)


def verbs(allocation: Allocation) -> list[str]:
    return list(
        AuditEvent.objects.filter(object_type="allocation", object_id=str(allocation.pk))
        .order_by("id")
        .values_list("verb", flat=True)
    )


def task_names(callbacks) -> list[str]:
    return [c.func.__self__.name for c in callbacks]


def inbox(user) -> list[str]:
    return list(Notification.objects.filter(recipient=user).order_by("id").values_list("kind", flat=True))


def test_an_extension_within_the_auto_approve_lease_applies_at_once(world: World, django_capture_on_commit_callbacks):
    # given
    allocation = active(world, lease_hours=8)
    expires = allocation.lease_expires_at
    assert expires is not None
    # when: 8 + 16 = 24 h, the policy's limit
    with django_capture_on_commit_callbacks() as callbacks:
        extension = services.request_lease_extension(allocation_id=allocation.pk, hours=16, actor=world.alice)
    # then
    allocation.refresh_from_db()
    assert (extension.status, extension.auto_approved, extension.decided_by, extension.hours) == (
        Ext.APPROVED,
        True,
        None,
        16,
    )
    assert (allocation.lease_hours, allocation.lease_expires_at) == (24, expires + timedelta(hours=16))
    assert verbs(allocation)[-1] == "extend"
    assert callbacks == []
    assert Notification.objects.count() == 0


def test_an_extension_past_the_auto_approve_lease_waits_for_a_manager(world: World, django_capture_on_commit_callbacks):
    # given: the case, an auto-approved 8 h lease
    allocation = active(world, lease_hours=8)
    expires = allocation.lease_expires_at
    # when: to 32 h, past the 24 h that apply at once
    with django_capture_on_commit_callbacks() as callbacks:
        extension = services.request_lease_extension(allocation_id=allocation.pk, hours=24, actor=world.alice)
    # then: nothing changes until a manager decides; the managers hear of it
    allocation.refresh_from_db()
    assert (extension.status, extension.auto_approved, extension.lease_hours_after) == (Ext.PENDING, False, 32)
    assert (allocation.lease_hours, allocation.lease_expires_at) == (8, expires)
    assert verbs(allocation)[-1] == "request_extension"
    assert task_names(callbacks) == ["allocations.tasks.notify_managers_of_extension_task"]
    assert list(Notification.objects.values_list("recipient__username", "kind", "link")) == [
        ("mallory", Notification.Kind.EXTENSION_PENDING, "/approvals/")
    ]


def test_a_manager_extending_a_lease_past_the_policy_applies_it_at_once(world: World):
    # given
    allocation = active(world, lease_hours=8)
    # when
    extension = services.request_lease_extension(allocation_id=allocation.pk, hours=48, actor=world.mallory)
    # then
    allocation.refresh_from_db()
    assert (extension.status, extension.auto_approved, extension.decided_by) == (Ext.APPROVED, False, world.mallory)
    assert allocation.lease_hours == 56
    assert Notification.objects.count() == 0


def test_a_manager_approves_a_pending_extension_and_the_requester_hears_of_it(
    world: World, django_capture_on_commit_callbacks
):
    # given: the warning was sent; the extension must re-arm it
    allocation = active(world, lease_hours=8)
    assert allocation.lease_expires_at is not None
    services.warn_expiring_leases(now=allocation.lease_expires_at - timedelta(hours=1))
    extension = services.request_lease_extension(allocation_id=allocation.pk, hours=40, actor=world.alice)
    expires = allocation.lease_expires_at
    Notification.objects.all().delete()
    # when
    with django_capture_on_commit_callbacks() as callbacks:
        approved = services.approve_lease_extension(extension_id=extension.pk, actor=world.mallory, reason="deadline")
    # then
    allocation.refresh_from_db()
    assert (approved.status, approved.decided_by, approved.decision_reason) == (Ext.APPROVED, world.mallory, "deadline")
    assert (allocation.lease_hours, allocation.lease_expires_at) == (48, expires + timedelta(hours=40))
    assert allocation.expiry_warning_sent_at is None
    assert verbs(allocation)[-2:] == ["request_extension", "approve_extension"]
    assert task_names(callbacks) == ["allocations.tasks.notify_requester_of_extension_task"]
    assert list(Notification.objects.values_list("recipient__username", "kind", "text")) == [
        (
            "alice",
            Notification.Kind.EXTENSION_DECIDED,
            f"mallory approved extending the lease of request #{allocation.pk} by 40 h. Reason: deadline",
        )
    ]


def test_a_manager_rejects_a_pending_extension_with_a_reason_and_the_lease_stays(world: World):
    # given
    allocation = active(world, lease_hours=8)
    extension = services.request_lease_extension(allocation_id=allocation.pk, hours=40, actor=world.alice)
    # when
    with pytest.raises(InvalidInput) as no_reason:
        services.reject_lease_extension(extension_id=extension.pk, actor=world.mallory, reason=" ")
    rejected = services.reject_lease_extension(extension_id=extension.pk, actor=world.mallory, reason="not now")
    # then
    assert no_reason.value.errors == {"reason": ["Say why the extension is rejected."]}
    allocation.refresh_from_db()
    assert (rejected.status, rejected.decision_reason) == (Ext.REJECTED, "not now")
    assert allocation.lease_hours == 8
    assert inbox(world.alice) == [Notification.Kind.EXTENSION_DECIDED]
    assert verbs(allocation)[-1] == "reject_extension"


@pytest.mark.parametrize("decide", ["approve", "reject"])
def test_a_member_cannot_decide_an_extension_and_nothing_changes(world: World, decide: str):
    # given: bob is another member of Team A
    bob = UserFactory(username="bob")
    MembershipFactory(user=bob, tenant=world.tenant_a, role=Membership.Role.MEMBER)
    allocation = active(world, lease_hours=8)
    extension = services.request_lease_extension(allocation_id=allocation.pk, hours=40, actor=world.alice)
    events = AuditEvent.objects.count()
    # when
    with pytest.raises(NotAllowed):
        if decide == "approve":
            services.approve_lease_extension(extension_id=extension.pk, actor=world.alice)
        else:
            services.reject_lease_extension(extension_id=extension.pk, actor=bob, reason="no")
    # then
    extension.refresh_from_db()
    allocation.refresh_from_db()
    assert (extension.status, allocation.lease_hours) == (Ext.PENDING, 8)
    assert AuditEvent.objects.count() == events


def test_another_member_and_another_tenant_cannot_extend_alices_lease(world: World):
    # given
    bob = UserFactory(username="bob")
    MembershipFactory(user=bob, tenant=world.tenant_a, role=Membership.Role.MEMBER)
    allocation = active(world, lease_hours=8)
    # when / then
    for actor in (bob, world.charlie):
        with pytest.raises(NotAllowed):
            services.request_lease_extension(allocation_id=allocation.pk, hours=1, actor=actor)
    assert LeaseExtension.objects.count() == 0


def test_a_second_extension_waits_until_the_first_is_decided(world: World):
    # given
    allocation = active(world, lease_hours=8)
    services.request_lease_extension(allocation_id=allocation.pk, hours=40, actor=world.alice)
    # when
    with pytest.raises(InvalidInput) as refused:
        services.request_lease_extension(allocation_id=allocation.pk, hours=30, actor=world.alice)
    # then: one within the policy still applies at once
    assert refused.value.errors == {
        "hours": ["An extension by 40 h already waits for a manager; ask again once it is decided."]
    }
    applied = services.request_lease_extension(allocation_id=allocation.pk, hours=4, actor=world.alice)
    assert applied.status == Ext.APPROVED
    assert list(LeaseExtension.objects.order_by("id").values_list("hours", "status")) == [
        (40, Ext.PENDING),
        (4, Ext.APPROVED),
    ]


def test_the_whole_lease_stays_within_the_tenants_maximum(world: World):
    # given
    allocation = active(world, lease_hours=8)
    # when
    with pytest.raises(InvalidInput) as too_long:
        services.request_lease_extension(allocation_id=allocation.pk, hours=161, actor=world.mallory)
    # then
    assert too_long.value.errors == {"hours": ["The whole lease may be at most 168 hours (8 used so far)."]}
    assert LeaseExtension.objects.count() == 0


def test_approving_checks_the_maximum_against_the_lease_as_it_is_now(world: World):
    # given: 8 h + 100 h waits; meanwhile a manager adds 60 h, so 168 would be passed
    allocation = active(world, lease_hours=8)
    waiting = services.request_lease_extension(allocation_id=allocation.pk, hours=100, actor=world.alice)
    services.request_lease_extension(allocation_id=allocation.pk, hours=61, actor=world.mallory)
    # when
    with pytest.raises(InvalidInput):
        services.approve_lease_extension(extension_id=waiting.pk, actor=world.mallory)
    # then
    waiting.refresh_from_db()
    allocation.refresh_from_db()
    assert (waiting.status, allocation.lease_hours) == (Ext.PENDING, 69)


def test_only_an_active_lease_can_be_extended(world: World):
    # given
    pending, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="3g.40gb",
        count=1,
        lease_hours=8,
        purpose="p",
        actor=world.alice,
    )
    # when / then
    with pytest.raises(InvalidTransition):
        services.request_lease_extension(allocation_id=pending.pk, hours=1, actor=world.alice)


def test_releasing_cancels_a_waiting_extension_and_it_can_no_longer_be_approved(world: World):
    # given
    allocation = active(world, lease_hours=8)
    extension = services.request_lease_extension(allocation_id=allocation.pk, hours=40, actor=world.alice)
    # when
    services.release_allocation(allocation_id=allocation.pk, actor=world.alice)
    # then
    extension.refresh_from_db()
    assert extension.status == Ext.CANCELLED
    with pytest.raises(InvalidTransition):
        services.approve_lease_extension(extension_id=extension.pk, actor=world.mallory)
    assert LeaseExtension.objects.waiting().count() == 0


def test_an_expired_lease_cancels_its_waiting_extension(world: World):
    # given
    allocation = active(world, lease_hours=8)
    extension = services.request_lease_extension(allocation_id=allocation.pk, hours=40, actor=world.alice)
    assert allocation.lease_expires_at is not None
    # when
    services.expire_due_leases(now=allocation.lease_expires_at + timedelta(minutes=1))
    # then
    extension.refresh_from_db()
    assert extension.status == Ext.CANCELLED
