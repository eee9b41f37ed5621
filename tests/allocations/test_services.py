from __future__ import annotations

import pytest
from django.db import transaction

from allocations import services
from allocations.models import Allocation, Quota
from tenants.errors import InvalidInput, InvalidTransition, NotAllowed, QuotaExceeded
from tenants.models import AuditEvent
from tests.conftest import World

Status = Allocation.Status


def quota_of(world: World, tenant_id: int) -> Quota:
    return Quota.objects.get(tenant_id=tenant_id, pool=world.pool)


def request(world: World, actor, *, profile="1g.10gb", count=1, lease_hours=8, tenant=None, key=None):
    tenant = tenant or world.tenant_a
    allocation, _ = services.request_allocation(
        tenant_id=tenant.pk,
        pool_id=world.pool.pk,
        profile=profile,
        count=count,
        lease_hours=lease_hours,
        purpose="fine-tune llama",
        actor=actor,
        idempotency_key=key,
    )
    return allocation


def test_a_small_request_inside_quota_is_approved_at_once_and_queued(world: World, django_capture_on_commit_callbacks):
    # when
    with django_capture_on_commit_callbacks() as callbacks:
        allocation = request(world, world.alice, profile="1g.10gb", count=2)
    # then
    assert allocation.status == Status.APPROVED
    assert allocation.auto_approved is True
    assert (allocation.compute_slices, allocation.memory_slices) == (2, 2)
    quota = quota_of(world, world.tenant_a.pk)
    assert (quota.compute_slices_used, quota.memory_slices_used) == (2, 2)
    assert [c.func.__self__.name for c in callbacks] == ["allocations.tasks.provision_allocation_task"]
    verbs = list(
        AuditEvent.objects.filter(object_type="allocation", object_id=str(allocation.pk))
        .order_by("id")
        .values_list("verb", flat=True)
    )
    assert verbs == ["request", "auto_approve"]


def test_quota_counts_memory_slots_as_well_as_compute(world: World):
    # given: a 1g.20gb costs one compute slice but two memory slots
    # when
    allocation = request(world, world.alice, profile="1g.20gb", count=2)
    # then
    assert (allocation.compute_slices, allocation.memory_slices) == (2, 4)
    quota = quota_of(world, world.tenant_a.pk)
    assert (quota.compute_slices_used, quota.memory_slices_used) == (2, 4)


def test_a_request_beyond_the_auto_approve_policy_waits_for_a_manager(world: World, django_capture_on_commit_callbacks):
    # when: 3g costs 3 compute slices, over the policy of 2
    with django_capture_on_commit_callbacks() as callbacks:
        allocation = request(world, world.alice, profile="3g.40gb")
    # then
    assert allocation.status == Status.PENDING
    assert allocation.status_message == "Waiting for a manager: beyond the auto-approve policy."
    assert [c.func.__self__.name for c in callbacks] == ["allocations.tasks.notify_managers_task"]
    quota = quota_of(world, world.tenant_a.pk)
    assert (quota.compute_slices_used, quota.memory_slices_used) == (0, 0)


def test_a_manager_approves_a_pending_request_and_quota_is_reserved(world: World, django_capture_on_commit_callbacks):
    # given
    allocation = request(world, world.alice, profile="3g.40gb")
    # when
    with django_capture_on_commit_callbacks() as callbacks:
        approved = services.approve_allocation(allocation_id=allocation.pk, actor=world.mallory, reason="ok")
    # then
    assert approved.status == Status.APPROVED
    assert approved.decided_by_id == world.mallory.pk
    quota = quota_of(world, world.tenant_a.pk)
    assert (quota.compute_slices_used, quota.memory_slices_used) == (3, 4)
    assert [c.func.__self__.name for c in callbacks] == [
        "allocations.tasks.provision_allocation_task",
        "allocations.tasks.notify_requester_task",
    ]


def test_a_member_cannot_approve_and_nothing_changes(world: World):
    # given
    allocation = request(world, world.alice, profile="3g.40gb")
    events_before = AuditEvent.objects.count()
    # when / then
    with pytest.raises(NotAllowed):
        services.approve_allocation(allocation_id=allocation.pk, actor=world.alice)
    allocation.refresh_from_db()
    assert allocation.status == Status.PENDING
    assert AuditEvent.objects.count() == events_before
    assert quota_of(world, world.tenant_a.pk).compute_slices_used == 0


def test_approval_refuses_to_pass_the_quota_and_changes_nothing(world: World):
    # given: quota 14 compute / 16 memory; a 7g.80gb costs (7, 8), a 1g.10gb (1, 1)
    first = request(world, world.alice, profile="7g.80gb")
    second = request(world, world.alice, profile="7g.80gb")
    small = request(world, world.alice, profile="1g.10gb")
    assert (first.status, second.status, small.status) == (Status.PENDING, Status.PENDING, Status.APPROVED)
    services.approve_allocation(allocation_id=first.pk, actor=world.mallory)
    # when / then: 6 compute slices are left, the second 7g needs 7
    with pytest.raises(QuotaExceeded) as excinfo:
        services.approve_allocation(allocation_id=second.pk, actor=world.mallory)
    assert excinfo.value.message == "Needs 7 compute slices; 6 of 14 are free."
    second.refresh_from_db()
    assert second.status == Status.PENDING
    quota = quota_of(world, world.tenant_a.pk)
    assert (quota.compute_slices_used, quota.memory_slices_used) == (8, 9)


def test_rejecting_needs_a_reason_and_frees_nothing(world: World):
    allocation = request(world, world.alice, profile="3g.40gb")
    with pytest.raises(InvalidInput) as excinfo:
        services.reject_allocation(allocation_id=allocation.pk, actor=world.mallory, reason="  ")
    assert excinfo.value.errors == {"reason": ["Say why the request is rejected."]}
    rejected = services.reject_allocation(allocation_id=allocation.pk, actor=world.mallory, reason="too big")
    assert rejected.status == Status.REJECTED
    assert rejected.decision_reason == "too big"
    with pytest.raises(InvalidTransition):
        services.approve_allocation(allocation_id=allocation.pk, actor=world.mallory)


def test_unknown_profile_and_out_of_policy_lease_are_field_errors(world: World):
    with pytest.raises(InvalidInput) as excinfo:
        request(world, world.alice, profile="1g.18gb", lease_hours=10_000)
    assert set(excinfo.value.errors) == {"profile", "lease_hours"}
    assert excinfo.value.errors["lease_hours"] == ["The lease must be between 1 and 168 hours for Team A."]
    assert Allocation.objects.count() == 0


def test_provisioning_places_the_slices_and_activates_the_request(world: World):
    # given
    allocation = request(world, world.alice, profile="1g.10gb", count=2)
    # when
    services.provision_allocation(allocation_id=allocation.pk)
    # then
    allocation.refresh_from_db()
    assert allocation.status == Status.ACTIVE
    assert allocation.claim_name == f"mig-alloc-{allocation.uuid}"
    placements = list(
        allocation.placements.select_related("gpu__node").order_by("gpu__node__name", "gpu__index", "start")
    )
    assert len(placements) == 2
    assert {p.gpu.node.name for p in placements} == {placements[0].gpu.node.name}
    assert all(p.size == 1 and p.profile == "1g.10gb" for p in placements)
    assert len({(p.gpu_id, p.start) for p in placements}) == 2


def test_provisioning_twice_is_a_no_op(world: World):
    allocation = request(world, world.alice, profile="2g.20gb")
    services.provision_allocation(allocation_id=allocation.pk)
    services.provision_allocation(allocation_id=allocation.pk)
    assert allocation.placements.count() == 1
    assert AuditEvent.objects.filter(object_id=str(allocation.pk), verb="activate").count() == 1


def test_release_of_an_active_request_goes_through_releasing_and_frees_quota(
    world: World, django_capture_on_commit_callbacks
):
    # given
    allocation = request(world, world.alice, profile="1g.10gb", count=2)
    services.provision_allocation(allocation_id=allocation.pk)
    # when
    with django_capture_on_commit_callbacks() as callbacks:
        releasing = services.release_allocation(allocation_id=allocation.pk, actor=world.alice)
    # then
    assert releasing.status == Status.RELEASING
    assert len(callbacks) == 1
    assert quota_of(world, world.tenant_a.pk).compute_slices_used == 2
    services.finish_release(allocation_id=allocation.pk)
    allocation.refresh_from_db()
    assert allocation.status == Status.RELEASED
    assert allocation.placements.count() == 0
    quota = quota_of(world, world.tenant_a.pk)
    assert (quota.compute_slices_used, quota.memory_slices_used) == (0, 0)


def test_another_member_cannot_release_my_slice_but_a_manager_can(world: World):
    allocation = request(world, world.mallory, profile="1g.10gb")
    with pytest.raises(NotAllowed):
        services.release_allocation(allocation_id=allocation.pk, actor=world.alice)
    assert Allocation.objects.get(pk=allocation.pk).status == Status.APPROVED
    released = services.release_allocation(allocation_id=allocation.pk, actor=world.mallory)
    # Approved but not yet built: withdrawn (issue 9: a state of its own, not "released").
    assert released.status == Status.WITHDRAWN
    assert quota_of(world, world.tenant_a.pk).compute_slices_used == 0


def test_idempotency_key_returns_the_first_request(world: World):
    first = request(world, world.alice, key="abc")
    again = request(world, world.alice, key="abc")
    assert again.pk == first.pk
    assert Allocation.objects.count() == 1
    assert quota_of(world, world.tenant_a.pk).compute_slices_used == 1


def test_quota_change_is_asked_by_a_manager_and_applied_by_an_admin(world: World):
    with pytest.raises(NotAllowed):
        services.request_quota_change(
            tenant_id=world.tenant_a.pk,
            pool_id=world.pool.pk,
            compute_slices_limit=28,
            memory_slices_limit=32,
            justification="more",
            actor=world.alice,
        )
    change, created = services.request_quota_change(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        compute_slices_limit=28,
        memory_slices_limit=32,
        justification="training run",
        actor=world.mallory,
    )
    assert created is True
    with pytest.raises(NotAllowed):
        services.approve_quota_change(change_id=change.pk, actor=world.mallory)
    services.approve_quota_change(change_id=change.pk, actor=world.root)
    quota = quota_of(world, world.tenant_a.pk)
    assert (quota.compute_slices_limit, quota.memory_slices_limit) == (28, 32)


def test_everything_rolls_back_when_the_audit_write_fails(world: World):
    # A service's change and its audit event commit together.
    with pytest.raises(RuntimeError), transaction.atomic():
        request(world, world.alice)
        raise RuntimeError("boom")
    assert Allocation.objects.count() == 0
    assert quota_of(world, world.tenant_a.pk).compute_slices_used == 0


def test_with_the_kubernetes_backend_a_quota_change_reapplies_the_tenant_namespace(
    world: World, settings, django_capture_on_commit_callbacks
):
    # given
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    # when
    with django_capture_on_commit_callbacks() as callbacks:
        services.set_tenant_quota(
            tenant_id=world.tenant_b.pk,
            pool_id=world.pool.pk,
            compute_slices_limit=7,
            memory_slices_limit=8,
            actor=world.root,
        )
    # then
    assert [(c.func.__self__.name, c.args) for c in callbacks] == [
        ("allocations.tasks.onboard_tenant_task", (world.tenant_b.pk,))
    ]


def test_with_the_simulated_backend_a_quota_change_queues_nothing(world: World, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        services.set_tenant_quota(
            tenant_id=world.tenant_b.pk,
            pool_id=world.pool.pk,
            compute_slices_limit=7,
            memory_slices_limit=8,
            actor=world.root,
        )
    assert callbacks == []
