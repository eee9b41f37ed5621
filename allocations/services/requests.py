"""The life of a slice request on the portal side: submit, approve, reject, release.

Rows are locked allocation first, then quota (see services/locks.py). Kubernetes work and e-mail are
written to the outbox in the same transaction and sent after commit (services/outbox.py); inbox notifications
are written in the same transaction; nothing here talks to the cluster. Lease extensions are in
services/extensions.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from allocations.costs import Cost, UnknownProfile, share_request_cost, slice_cost
from allocations.models import SHARE_PROFILE, Allocation, NodePool, Notification
from allocations.placement import empty_pool_fleet, offered_profiles
from allocations.queue_eta import never_fits
from allocations.selectors import quota_shortfall
from allocations.services.cohort_notices import hand_over_later
from allocations.services.extensions import cancel_pending_extensions
from allocations.services.locks import lock_allocation, lock_quota
from allocations.services.notifications import notify_users, tenant_manager_ids
from allocations.services.outbox import enqueue_task
from allocations.services.quotas import free_quota, reserve_quota
from allocations.services.share_requests import auto_approve_share, validate_share_request
from allocations.services.tenant_namespaces import chosen_namespace
from allocations.sharing.units import size_label
from tenants.errors import IdempotencyConflict, InvalidInput, InvalidTransition, NotAllowed
from tenants.models import Tenant
from tenants.selectors import can_manage_tenant, can_use_tenant
from tenants.services import record_audit_event

if TYPE_CHECKING:
    from django.contrib.auth.models import User

Status = Allocation.Status


def _queue_provisioning(allocation_id: int) -> None:
    enqueue_task("allocations.tasks.provision_allocation_task", allocation_id)


def _queue_notification(task_name: str, allocation_id: int) -> None:
    enqueue_task(f"allocations.tasks.{task_name}", allocation_id)


def _queue_teardown(allocation_id: int) -> None:
    enqueue_task("allocations.tasks.teardown_allocation_task", allocation_id)


def _snapshot(allocation: Allocation) -> dict[str, Any]:
    return {"status": allocation.status}


def _validate_request(
    *, tenant: Tenant, pool: NodePool, profile: str, count: int, lease_hours: int, purpose: str
) -> None:
    errors: dict[str, list[str]] = {}
    if pool.is_shared:
        pass  # services/share_requests.py checks memory, thread share and the tenant's isolation policy
    elif not profile:
        errors["profile"] = [f"Choose a MIG profile of {pool.name}: {', '.join(pool.profiles)}."]
    elif profile not in pool.profiles:
        offered = ", ".join(pool.profiles)
        errors["profile"] = [f"{profile!r} is not offered in {pool.name} ({pool.gpu_model}). Choose one of: {offered}."]
    elif profile not in (placeable := offered_profiles(pool)):
        # Kubernetes: no node of the pool publishes this profile's figures and the catalog has no NVIDIA ones
        # (allocations/mig/counters.py), so nobody can say where the scheduler would put it.
        errors["profile"] = [
            f"{profile!r} cannot be placed in {pool.name} yet: no node publishes its figures and NVIDIA's are not "
            f"in the catalog. Placeable now: {', '.join(placeable) or 'none'}."
        ]
    max_count = settings.FATIA_MAX_SLICES_PER_REQUEST
    if not 1 <= count <= max_count:
        errors["count"] = [f"Ask for between 1 and {max_count} slices."]
    if not 1 <= lease_hours <= tenant.max_lease_hours:
        errors["lease_hours"] = [f"The lease must be between 1 and {tenant.max_lease_hours} hours for {tenant.name}."]
    if not purpose.strip():
        errors["purpose"] = ["Say what the slices are for."]
    elif len(purpose) > 500:
        errors["purpose"] = ["Keep the purpose under 500 characters."]
    if not pool.is_shared and "profile" not in errors and "count" not in errors:
        # A request no node could ever hold is refused now, not approved and then failed at provisioning (its
        # slices go on one node). A pool with no ready GPU takes it: a node that comes may hold it.
        why = never_fits(empty_pool_fleet(pool), pool_name=pool.name, pool=pool.slug, profile=profile, count=count)
        if why is not None:
            errors["count"] = [f"{why}. Try fewer slices or a smaller profile."]
    if errors:
        raise InvalidInput(errors)


def request_allocation(
    *,
    tenant_id: int,
    pool_id: int,
    profile: str,
    count: int,
    lease_hours: int,
    purpose: str,
    actor: User,
    idempotency_key: str | None = None,
    memory_mib: int | None = None,
    thread_percentage: int | None = None,
    movable: bool | None = None,
    namespace: str | None = None,
) -> tuple[Allocation, bool]:
    """Submit a request; approve it at once when it fits the quota and the auto-approve policy.

        In a time-sliced or MPS pool the request is `count` shares of `memory_mib` each (and, MPS, of
        `thread_percentage`); `profile` is ignored there and stored as SHARE_PROFILE. `movable` (compaction may move
        its slices, restarting its pods) defaults to the tenant's `movable_by_default`. `namespace` is where its claims
    go, one of the tenant's namespaces (tenant_namespaces.chosen_namespace); None: the portal-made one.

        Returns (allocation, created). With an Idempotency-Key already used by this user in this tenant,
        returns the first allocation (created=False) or raises IdempotencyConflict if parameters differ.
        Locks the quota row while deciding, so concurrent submissions never overshoot it.
        Queues provision_allocation_task after commit when approved.
    """
    params: dict[str, Any] = {
        "pool_id": pool_id,
        "profile": profile,
        "count": count,
        "lease_hours": lease_hours,
        "purpose": purpose,
        "memory_mib": memory_mib,
        "thread_percentage": thread_percentage,
    }
    if idempotency_key:
        existing = _find_by_key(tenant_id, actor, idempotency_key)
        if existing is not None:
            return _replay(existing, params), False
    try:
        with transaction.atomic():
            allocation = _create_allocation(
                tenant_id=tenant_id, actor=actor, key=idempotency_key, movable=movable, namespace=namespace, **params
            )
    except IntegrityError:
        # A concurrent request with the same key committed first; its row is visible now.
        existing = _find_by_key(tenant_id, actor, idempotency_key) if idempotency_key else None
        if existing is None:
            raise
        return _replay(existing, params), False
    return allocation, True


def _find_by_key(tenant_id: int, actor: User, key: str) -> Allocation | None:
    return Allocation.objects.filter(tenant_id=tenant_id, requested_by_id=actor.pk, idempotency_key=key).first()


def _replay(existing: Allocation, params: dict[str, Any]) -> Allocation:
    stored = {
        "pool_id": existing.pool_id,
        "profile": existing.profile,
        "count": existing.count,
        "lease_hours": existing.lease_hours,
        "purpose": existing.purpose,
        "memory_mib": existing.memory_mib,
        "thread_percentage": existing.thread_percentage,
    }
    if existing.profile == SHARE_PROFILE:
        params = {**params, "profile": SHARE_PROFILE}
    if stored != params:
        raise IdempotencyConflict("This Idempotency-Key was already used with different parameters.")
    return existing


def _create_allocation(
    *,
    tenant_id: int,
    pool_id: int,
    profile: str,
    count: int,
    lease_hours: int,
    purpose: str,
    actor: User,
    key: str | None,
    memory_mib: int | None,
    thread_percentage: int | None,
    movable: bool | None,
    namespace: str | None = None,
) -> Allocation:
    if not can_use_tenant(actor, tenant_id):
        raise NotAllowed("You are not a member of this tenant.")
    tenant = Tenant.objects.get(pk=tenant_id)
    pool = NodePool.objects.get(pk=pool_id)
    if pool.is_shared:
        validate_share_request(tenant=tenant, pool=pool, memory_mib=memory_mib, thread_percentage=thread_percentage)
        profile = SHARE_PROFILE
    elif memory_mib is not None or thread_percentage is not None:
        raise InvalidInput({"memory_mib": [f"{pool.name} is a MIG pool: choose a profile, not a memory size."]})
    _validate_request(tenant=tenant, pool=pool, profile=profile, count=count, lease_hours=lease_hours, purpose=purpose)
    cost = _cost(pool=pool, profile=profile, count=count, memory_mib=memory_mib, thread_percentage=thread_percentage)
    allocation = Allocation(
        tenant=tenant,
        pool=pool,
        requested_by_id=actor.pk,
        profile=profile,
        count=count,
        lease_hours=lease_hours,
        purpose=purpose.strip(),
        compute_slices=cost.compute_slices,
        memory_slices=cost.memory_slices,
        idempotency_key=key or None,
        memory_mib=memory_mib if pool.is_shared else None,
        thread_percentage=thread_percentage if pool.kind == NodePool.Kind.MPS else None,
        movable=tenant.movable_by_default if movable is None else movable,
        namespace_name=chosen_namespace(tenant, namespace),
    )
    quota = lock_quota(tenant_id=tenant.pk, pool_id=pool.pk)
    shortfall = quota_shortfall(quota=quota, allocation=allocation)
    within_policy = (
        auto_approve_share(tenant=tenant, cost=cost)
        if pool.is_shared
        else cost.compute_slices <= tenant.auto_approve_max_compute_slices
    ) and lease_hours <= tenant.auto_approve_max_lease_hours
    if shortfall is None and within_policy:
        reserve_quota(quota=quota, allocation=allocation)
        allocation.status = Status.APPROVED
        allocation.auto_approved = True
        allocation.decided_at = timezone.now()
        allocation.status_message = "Approved automatically: inside quota and the tenant's auto-approve policy."
    else:
        allocation.status = Status.PENDING
        allocation.status_message = (
            f"Waiting for a manager: {shortfall}"
            if shortfall
            else "Waiting for a manager: beyond the auto-approve policy."
        )
    allocation.save()
    record_audit_event(
        actor=actor,
        verb="request",
        obj=allocation,
        tenant=tenant,
        after={
            "status": allocation.status,
            "pool": pool.slug,
            "profile": profile,
            "count": count,
            "lease_hours": lease_hours,
            "compute_slices": cost.compute_slices,
            "memory_slices": cost.memory_slices,
            **({"memory_mib": memory_mib} if pool.is_shared else {}),
            **({"thread_percentage": allocation.thread_percentage} if allocation.thread_percentage else {}),
            **({"movable": True} if allocation.movable else {}),
        },
    )
    if allocation.status == Status.APPROVED:
        record_audit_event(
            actor=None,
            verb="auto_approve",
            obj=allocation,
            tenant=tenant,
            before={"status": Status.PENDING},
            after={"status": Status.APPROVED},
        )
        _queue_provisioning(allocation.pk)
    else:
        notify_users(
            recipient_ids=tenant_manager_ids(tenant.pk),
            kind=Notification.Kind.REQUEST_PENDING,
            text=(
                f"{actor.get_username()} asks for {count} × {_size(allocation)} in {pool.name} for {tenant.name} "
                f"({lease_hours} h): {allocation.purpose}"
            ),
            link=_link(allocation),
            actor=actor,
        )
        _queue_notification("notify_managers_task", allocation.pk)
    return allocation


def _cost(*, pool: NodePool, profile: str, count: int, memory_mib: int | None, thread_percentage: int | None) -> Cost:
    if pool.is_shared:
        return share_request_cost(
            gpu_model=pool.gpu_model,
            mps=pool.kind == NodePool.Kind.MPS,
            memory_mib=int(memory_mib or 0),
            thread_percentage=thread_percentage,
            count=count,
        )
    try:
        return slice_cost(gpu_model=pool.gpu_model, profile=profile, count=count)
    except UnknownProfile as exc:
        raise InvalidInput({"profile": [str(exc)]}) from exc


def _size(allocation: Allocation) -> str:
    return size_label(
        profile=allocation.profile, memory_mib=allocation.memory_mib, thread_percentage=allocation.thread_percentage
    )


def _link(allocation: Allocation) -> str:
    return reverse("request-detail", args=[allocation.pk])


def _tell_requester(allocation: Allocation, actor: User, verdict: str) -> None:
    """The requester's inbox hears a manager's decision (unless they decided it themselves)."""
    reason = f" Reason: {allocation.decision_reason}" if allocation.decision_reason else ""
    notify_users(
        recipient_ids=[allocation.requested_by_id],
        kind=Notification.Kind.REQUEST_DECIDED,
        text=(
            f"{actor.get_username()} {verdict} request #{allocation.pk} "
            f"({allocation.count} × {_size(allocation)} in {allocation.pool.name}).{reason}"
        ),
        link=_link(allocation),
        actor=actor,
    )


@transaction.atomic
def approve_allocation(*, allocation_id: int, actor: User, reason: str = "") -> Allocation:
    """PENDING -> APPROVED, reserving quota. Tenant managers and platform admins only.

    Locks the allocation, then the quota. Raises NotAllowed, InvalidTransition or QuotaExceeded.
    Queues provision_allocation_task after commit.
    """
    allocation = lock_allocation(allocation_id=allocation_id)
    if not can_manage_tenant(actor, allocation.tenant_id):
        raise NotAllowed("Only the tenant's managers can approve requests.")
    if allocation.status != Status.PENDING:
        raise InvalidTransition(current=allocation.status, target=Status.APPROVED)
    quota = lock_quota(tenant_id=allocation.tenant_id, pool_id=allocation.pool_id)
    reserve_quota(quota=quota, allocation=allocation)
    allocation.status = Status.APPROVED
    allocation.decided_by_id = actor.pk
    allocation.decided_at = timezone.now()
    allocation.decision_reason = reason.strip()
    allocation.status_message = "Approved; waiting for the cluster."
    allocation.save(
        update_fields=["status", "decided_by", "decided_at", "decision_reason", "status_message", "updated_at"]
    )
    record_audit_event(
        actor=actor,
        verb="approve",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        before={"status": Status.PENDING},
        after={"status": Status.APPROVED, "reason": allocation.decision_reason},
    )
    _queue_provisioning(allocation.pk)
    _tell_requester(allocation, actor, "approved")
    _queue_notification("notify_requester_task", allocation.pk)
    return allocation


@transaction.atomic
def reject_allocation(*, allocation_id: int, actor: User, reason: str) -> Allocation:
    """PENDING -> REJECTED with a reason. Tenant managers and platform admins only."""
    allocation = lock_allocation(allocation_id=allocation_id)
    if not can_manage_tenant(actor, allocation.tenant_id):
        raise NotAllowed("Only the tenant's managers can reject requests.")
    if not reason.strip():
        raise InvalidInput({"reason": ["Say why the request is rejected."]})
    if allocation.status != Status.PENDING:
        raise InvalidTransition(current=allocation.status, target=Status.REJECTED)
    allocation.status = Status.REJECTED
    allocation.decided_by_id = actor.pk
    allocation.decided_at = timezone.now()
    allocation.decision_reason = reason.strip()
    allocation.ended_at = allocation.decided_at
    allocation.status_message = f"Rejected: {allocation.decision_reason}"
    allocation.save(
        update_fields=[
            "status",
            "decided_by",
            "decided_at",
            "decision_reason",
            "ended_at",
            "status_message",
            "updated_at",
        ]
    )
    record_audit_event(
        actor=actor,
        verb="reject",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        before={"status": Status.PENDING},
        after={"status": Status.REJECTED, "reason": allocation.decision_reason},
    )
    _tell_requester(allocation, actor, "rejected")
    _queue_notification("notify_requester_task", allocation.pk)
    return allocation


def _may_release(actor: User, allocation: Allocation) -> bool:
    return allocation.requested_by_id == actor.pk or can_manage_tenant(actor, allocation.tenant_id)


@transaction.atomic
def release_allocation(*, allocation_id: int, actor: User | None, reason: str = "") -> Allocation:
    """Give slices back. PENDING -> WITHDRAWN; APPROVED or QUEUED -> WITHDRAWN (nothing was built yet, quota
    freed now); PROVISIONING/ACTIVE -> RELEASING (teardown queued; quota freed once the slices are gone; lease
    extensions still waiting are cancelled). Releasing twice changes nothing but sends the teardown again (it may
    have been lost). The requester, tenant managers and admins may release; `actor` None is Fatia itself (idle
    reclaim), which says why in `reason` (kept in the status message and the audit event). Locks the allocation,
    then the quota.
    """
    allocation = lock_allocation(allocation_id=allocation_id)
    if actor is not None and not _may_release(actor, allocation):
        raise NotAllowed("Only the requester or a tenant manager can release this.")
    previous = allocation.status
    now = timezone.now()
    if previous == Status.RELEASING:
        # Not a second release, but the teardown may have been lost (a broker restarted empty): send it again.
        _queue_teardown(allocation.pk)
        return allocation
    if previous in (Status.PENDING, Status.APPROVED, Status.QUEUED):
        if previous in (Status.APPROVED, Status.QUEUED):
            free_quota(allocation=allocation)
            hand_over_later(allocation)  # its notices go to waiting lenders that need them, else are called off
        allocation.status = Status.WITHDRAWN
        allocation.held = False  # withdrawn while held (issue 14): no longer waits
        allocation.ended_at = now
        allocation.status_message = "Withdrawn before any slice was created."
    elif previous in (Status.PROVISIONING, Status.ACTIVE):
        allocation.status = Status.RELEASING
        allocation.end_state = Status.RELEASED
        allocation.status_message = f"{reason} Releasing: deleting the claim and its holder pod.".lstrip()
        cancel_pending_extensions(allocation=allocation)
        _queue_teardown(allocation.pk)
    else:
        raise InvalidTransition(current=previous, target=Status.RELEASED)
    allocation.save(update_fields=["status", "held", "end_state", "ended_at", "status_message", "updated_at"])
    record_audit_event(
        actor=actor,
        verb="release",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        before={"status": previous},
        after={"status": allocation.status, **({"reason": reason} if reason else {})},
    )
    return allocation
