"""Quota limits, quota change requests, and reserving / freeing quota for allocations."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.urls import reverse
from django.utils import timezone

from allocations.cohorts.accounting import Admission
from allocations.cohorts.members import cohort_admission
from allocations.models import Allocation, NodePool, Notification, Quota, QuotaChangeRequest
from allocations.selectors import quota_shortfall
from allocations.services.cohorts import held_quota, record_borrowed
from allocations.services.locks import lock_cohort, lock_quota, lock_quota_change
from allocations.services.notifications import notify_users
from allocations.services.outbox import enqueue_task
from tenants.errors import IdempotencyConflict, InvalidInput, InvalidTransition, NotAllowed, QuotaExceeded
from tenants.models import Tenant
from tenants.selectors import can_manage_tenant
from tenants.services import record_audit_event

if TYPE_CHECKING:
    from django.contrib.auth.models import User

MAX_LIMIT = 100_000


def _quota_fields(quota: Quota) -> dict[str, Any]:
    return {
        "compute_slices_limit": quota.compute_slices_limit,
        "memory_slices_limit": quota.memory_slices_limit,
        "profile_caps": quota.profile_caps,
    }


def _checked_caps(pool: NodePool, caps: dict[str, Any] | None) -> dict[str, int]:
    if caps is None:
        return {}
    if not isinstance(caps, dict):
        raise InvalidInput({"profile_caps": ["Give caps as an object of profile name to count."]})
    errors = []
    for profile, cap in caps.items():
        if profile not in pool.profiles:
            errors.append(f"{profile!r} is not offered in {pool.name}.")
        elif not isinstance(cap, int) or isinstance(cap, bool) or not 0 <= cap <= MAX_LIMIT:
            errors.append(f"The cap for {profile} must be a whole number from 0 to {MAX_LIMIT}.")
    if errors:
        raise InvalidInput({"profile_caps": errors})
    return {str(k): int(v) for k, v in caps.items()}


def _checked_limits(compute_slices_limit: int, memory_slices_limit: int) -> None:
    errors: dict[str, list[str]] = {}
    for field, value in (
        ("compute_slices_limit", compute_slices_limit),
        ("memory_slices_limit", memory_slices_limit),
    ):
        if not 0 <= value <= MAX_LIMIT:
            errors[field] = [f"Must be between 0 and {MAX_LIMIT}."]
    if errors:
        raise InvalidInput(errors)


@transaction.atomic
def set_tenant_quota(
    *,
    tenant_id: int,
    pool_id: int,
    compute_slices_limit: int,
    memory_slices_limit: int,
    actor: User,
    profile_caps: dict[str, Any] | None = None,
) -> Quota:
    """Set a tenant's limits in a pool (platform admins). Usage counters are left as they are.

    With the Kubernetes backend, queues onboard_tenant_task after commit (namespace, RBAC, device quota).
    """
    if not getattr(actor, "is_staff", False):
        raise NotAllowed("Only platform admins can set quotas.")
    pool = NodePool.objects.get(pk=pool_id)
    tenant = Tenant.objects.get(pk=tenant_id)
    _checked_limits(compute_slices_limit, memory_slices_limit)
    caps = _checked_caps(pool, profile_caps)
    quota, created = Quota.objects.get_or_create(tenant=tenant, pool=pool)
    quota = lock_quota(tenant_id=tenant.pk, pool_id=pool.pk) or quota
    before = {} if created else _quota_fields(quota)
    quota.compute_slices_limit = compute_slices_limit
    quota.memory_slices_limit = memory_slices_limit
    quota.profile_caps = caps
    quota.save(update_fields=["compute_slices_limit", "memory_slices_limit", "profile_caps", "updated_at"])
    record_audit_event(
        actor=actor, verb="set_quota", obj=quota, tenant=tenant, before=before, after=_quota_fields(quota)
    )
    if settings.FATIA_CLUSTER_BACKEND == "kubernetes":
        # The tenant's namespace, RBAC and device ResourceQuota follow its quotas (the cluster-side fence is
        # sized from them), so every quota change re-applies them; a tenant without quota needs no namespace.
        enqueue_task("allocations.tasks.onboard_tenant_task", tenant.pk)
    return quota


def reserve_quota(*, quota: Quota | None, allocation: Allocation) -> None:
    """Charge the allocation to the locked quota row, or raise QuotaExceeded. Caller holds the lock.

    In a cohort (issue 15) the part above the tenant's guarantee is borrowed when the cohort lends it: the cohort
    is locked (quota, then cohort), the whole usage is charged to the counters as always, and the borrowed part is
    recorded on the allocation (`borrowed_*`)."""
    if quota is not None and quota.cohort_id is not None:
        lock_cohort(cohort_id=quota.cohort_id)
    reason = quota_shortfall(quota=quota, allocation=allocation)
    if reason is not None or quota is None:
        raise QuotaExceeded(reason or "No quota.")
    admission = cohort_admission(quota, compute=allocation.compute_slices, memory=allocation.memory_slices)
    Quota.objects.filter(pk=quota.pk).update(
        compute_slices_used=F("compute_slices_used") + allocation.compute_slices,
        memory_slices_used=F("memory_slices_used") + allocation.memory_slices,
    )
    record_borrowed(allocation, admission or Admission(0, 0))


def free_quota(*, allocation: Allocation) -> None:
    """Give back what the allocation held. Caller holds the allocation lock and moves it out of a
    quota-holding state in the same transaction, so this runs once per allocation. A queued request holds only
    the part within its guarantee (its borrowed part is borrowed again at admission: services/cohorts.py)."""
    quota = lock_quota(tenant_id=allocation.tenant_id, pool_id=allocation.pool_id)
    if quota is None:
        return
    compute, memory = held_quota(allocation)
    Quota.objects.filter(pk=quota.pk).update(
        compute_slices_used=F("compute_slices_used") - compute,
        memory_slices_used=F("memory_slices_used") - memory,
    )


def request_quota_change(
    *,
    tenant_id: int,
    pool_id: int,
    compute_slices_limit: int,
    memory_slices_limit: int,
    justification: str,
    actor: User,
    profile_caps: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
) -> tuple[QuotaChangeRequest, bool]:
    """A tenant manager asks for new limits. Returns (change, created); a repeated Idempotency-Key
    returns the first change, or raises IdempotencyConflict if the parameters differ."""
    params: dict[str, Any] = {
        "pool_id": pool_id,
        "compute_slices_limit": compute_slices_limit,
        "memory_slices_limit": memory_slices_limit,
        "justification": justification,
        "profile_caps": profile_caps or {},
    }
    if idempotency_key:
        existing = QuotaChangeRequest.objects.filter(
            tenant_id=tenant_id, requested_by_id=actor.pk, idempotency_key=idempotency_key
        ).first()
        if existing is not None:
            return _replay_quota_change(existing, params), False
    try:
        with transaction.atomic():
            change = _create_quota_change(tenant_id=tenant_id, actor=actor, key=idempotency_key, **params)
    except IntegrityError:
        existing = QuotaChangeRequest.objects.filter(
            tenant_id=tenant_id, requested_by_id=actor.pk, idempotency_key=idempotency_key
        ).first()
        if idempotency_key and existing is not None:
            return _replay_quota_change(existing, params), False
        raise
    return change, True


def _replay_quota_change(existing: QuotaChangeRequest, params: dict[str, Any]) -> QuotaChangeRequest:
    stored = {
        "pool_id": existing.pool_id,
        "compute_slices_limit": existing.compute_slices_limit,
        "memory_slices_limit": existing.memory_slices_limit,
        "justification": existing.justification,
        "profile_caps": existing.profile_caps,
    }
    if stored != params:
        raise IdempotencyConflict("This Idempotency-Key was already used with different parameters.")
    return existing


def _create_quota_change(
    *,
    tenant_id: int,
    pool_id: int,
    compute_slices_limit: int,
    memory_slices_limit: int,
    justification: str,
    profile_caps: dict[str, Any],
    actor: User,
    key: str | None,
) -> QuotaChangeRequest:
    if not can_manage_tenant(actor, tenant_id):
        raise NotAllowed("Only the tenant's managers can ask for quota changes.")
    pool = NodePool.objects.get(pk=pool_id)
    _checked_limits(compute_slices_limit, memory_slices_limit)
    caps = _checked_caps(pool, profile_caps)
    if not justification.strip():
        raise InvalidInput({"justification": ["Say why the tenant needs this quota."]})
    change = QuotaChangeRequest.objects.create(
        tenant_id=tenant_id,
        pool=pool,
        requested_by_id=actor.pk,
        compute_slices_limit=compute_slices_limit,
        memory_slices_limit=memory_slices_limit,
        profile_caps=caps,
        justification=justification.strip(),
        idempotency_key=key or None,
    )
    record_audit_event(
        actor=actor,
        verb="request_quota_change",
        obj=change,
        tenant_id=tenant_id,
        after={
            "pool": pool.slug,
            "compute_slices_limit": compute_slices_limit,
            "memory_slices_limit": memory_slices_limit,
            "profile_caps": caps,
        },
    )
    return change


@transaction.atomic
def approve_quota_change(*, change_id: int, actor: User, reason: str = "") -> QuotaChangeRequest:
    """Apply a pending change's limits (platform admins). Locks the change, then the quota."""
    if not getattr(actor, "is_staff", False):
        raise NotAllowed("Only platform admins can approve quota changes.")
    change = lock_quota_change(change_id=change_id)
    if change.status != QuotaChangeRequest.Status.PENDING:
        raise InvalidTransition(current=change.status, target=QuotaChangeRequest.Status.APPROVED)
    set_tenant_quota(
        tenant_id=change.tenant_id,
        pool_id=change.pool_id,
        compute_slices_limit=change.compute_slices_limit,
        memory_slices_limit=change.memory_slices_limit,
        profile_caps=change.profile_caps,
        actor=actor,
    )
    _decide(change, QuotaChangeRequest.Status.APPROVED, actor, reason)
    return change


@transaction.atomic
def reject_quota_change(*, change_id: int, actor: User, reason: str) -> QuotaChangeRequest:
    if not getattr(actor, "is_staff", False):
        raise NotAllowed("Only platform admins can reject quota changes.")
    if not reason.strip():
        raise InvalidInput({"reason": ["Say why the change is rejected."]})
    change = lock_quota_change(change_id=change_id)
    if change.status != QuotaChangeRequest.Status.PENDING:
        raise InvalidTransition(current=change.status, target=QuotaChangeRequest.Status.REJECTED)
    _decide(change, QuotaChangeRequest.Status.REJECTED, actor, reason)
    return change


def _decide(change: QuotaChangeRequest, status: str, actor: User, reason: str) -> None:
    previous = change.status
    change.status = status
    change.decided_by_id = actor.pk
    change.decided_at = timezone.now()
    change.decision_reason = reason.strip()
    change.save(update_fields=["status", "decided_by", "decided_at", "decision_reason", "updated_at"])
    record_audit_event(
        actor=actor,
        verb="approve" if status == QuotaChangeRequest.Status.APPROVED else "reject",
        obj=change,
        tenant_id=change.tenant_id,
        before={"status": previous},
        after={"status": status, "reason": change.decision_reason},
    )
    reason_text = f" Reason: {change.decision_reason}" if change.decision_reason else ""
    notify_users(
        recipient_ids=[change.requested_by_id],
        kind=Notification.Kind.QUOTA_CHANGE_DECIDED,
        text=(
            f"{actor.get_username()} {change.get_status_display().lower()} quota change #{change.pk} for "
            f"{change.tenant.name} in {change.pool.name} ({change.compute_slices_limit} compute slices, "
            f"{change.memory_slices_limit} memory slots).{reason_text}"
        ),
        link=reverse("quotas"),
        actor=actor,
    )
