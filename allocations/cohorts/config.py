"""Configuring cohorts (issue 15), platform admins only: create, rename, change the grace, delete, and put a tenant's
quota of a pool into one of the pool's cohorts with its four borrowing and lending limits.

Admission with borrowing and reclaim are not here (allocations/cohorts/ accounting and services): these services
only change the configuration those read. Two rules keep that configuration from pulling the rug out from under
live borrowing: a tenant holding borrowed slices cannot leave or change its cohort, and a cohort whose members hold
borrowed slices cannot be deleted (409, "release or wait for the reclaim first"). Limits may be changed at any time:
they bound the next admission, not what is already admitted (as in Kueue).

Locks, in the order of allocations/services/locks.py: the pool (create), the quota rows (pk order), then the cohort
rows (pk order): a member's charge takes its quota, then its cohort, and so does a change of membership here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Sum

from allocations.models import Allocation, Cohort, NodePool, Quota
from allocations.services.locks import lock_cohort, lock_pool, lock_quota
from allocations.services.outbox import enqueue_task
from tenants.errors import DomainError, InvalidInput, NotAllowed
from tenants.services import record_audit_event

if TYPE_CHECKING:
    from django.contrib.auth.models import User

MAX_LIMIT = 100_000  # as quota limits (services/quotas.py)
MAX_GRACE_MINUTES = 7 * 24 * 60  # a week: a longer notice is no reclaim at all
NAME_MAX = 100
LIMIT_FIELDS = (
    "borrowing_compute_limit",
    "borrowing_memory_limit",
    "lending_compute_limit",
    "lending_memory_limit",
)


class CohortInUse(DomainError):
    """The change would strand borrowed slices (a member holds some): 409."""

    status = 409
    code = "cohort_in_use"


@dataclass(frozen=True)
class Limits:
    """A member's borrowing and lending limits; None: no limit beyond the cohort (borrow) / all unused guarantee."""

    borrowing_compute_limit: int | None = None
    borrowing_memory_limit: int | None = None
    lending_compute_limit: int | None = None
    lending_memory_limit: int | None = None

    def as_dict(self) -> dict[str, int | None]:
        return {name: getattr(self, name) for name in LIMIT_FIELDS}


def _require_admin(actor: User) -> None:
    if not getattr(actor, "is_staff", False):
        raise NotAllowed("Only platform admins can configure cohorts.")


def _checked_name(name: str) -> str:
    cleaned = (name or "").strip()
    if not cleaned:
        raise InvalidInput({"name": ["Give the cohort a name."]})
    if len(cleaned) > NAME_MAX:
        raise InvalidInput({"name": [f"At most {NAME_MAX} characters."]})
    return cleaned


def _checked_grace(minutes: int) -> int:
    if isinstance(minutes, bool) or not isinstance(minutes, int) or not 0 <= minutes <= MAX_GRACE_MINUTES:
        raise InvalidInput(
            {"reclaim_grace_minutes": [f"A whole number of minutes from 0 (reclaim at once) to {MAX_GRACE_MINUTES}."]}
        )
    return minutes


def _checked_limits(limits: Limits) -> None:
    errors: dict[str, list[str]] = {}
    for name, value in limits.as_dict().items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LIMIT:
            errors[name] = [f"Empty (no limit) or a whole number from 0 to {MAX_LIMIT}."]
    if errors:
        raise InvalidInput(errors)


def _cohort_fields(cohort: Cohort) -> dict[str, Any]:
    return {"name": cohort.name, "pool": cohort.pool.slug, "reclaim_grace_minutes": cohort.reclaim_grace_minutes}


def _membership_fields(quota: Quota) -> dict[str, Any]:
    cohort = quota.cohort
    return {
        "cohort": cohort.pk if cohort is not None else None,
        "cohort_name": cohort.name if cohort is not None else "",
        **{name: getattr(quota, name) for name in LIMIT_FIELDS},
    }


def _save_membership(quota: Quota, cohort: Cohort | None, limits: dict[str, int | None], actor: User) -> None:
    """`quota` in `cohort` (None: in none) with `limits`, saved and audited `set_quota_cohort`. The caller holds the
    quota's and the cohorts' locks."""
    before = _membership_fields(quota)
    quota.cohort = cohort
    for name, value in limits.items():
        setattr(quota, name, value)
    quota.save(update_fields=["cohort", *LIMIT_FIELDS, "updated_at"])
    record_audit_event(
        actor=actor,
        verb="set_quota_cohort",
        obj=quota,
        tenant_id=quota.tenant_id,
        before=before,
        after=_membership_fields(quota),
    )


def _refresh_cluster_fences(tenant_ids: set[int]) -> None:
    """On Kubernetes each tenant's device ResourceQuota counts what its cohort could lend it (cluster/sync.py
    tenant_spec), so a change of membership or limits re-applies it for every member it touches, as a quota change
    does (services/quotas.set_tenant_quota)."""
    if settings.FATIA_CLUSTER_BACKEND == "kubernetes":
        for tenant_id in sorted(tenant_ids):
            enqueue_task("allocations.tasks.onboard_tenant_task", tenant_id)


def _member_tenants(cohort_ids: set[int]) -> set[int]:
    return set(Quota.objects.filter(cohort_id__in=cohort_ids).values_list("tenant_id", flat=True))


def borrowed_by(*, tenant_id: int, pool_id: int) -> tuple[int, int]:
    """Compute and memory slices the tenant holds above its guarantee in the pool (the allocations' borrowed parts)."""
    found = Allocation.objects.filter(
        tenant_id=tenant_id, pool_id=pool_id, status__in=Allocation.QUOTA_HOLDING
    ).aggregate(compute=Sum("borrowed_compute_slices"), memory=Sum("borrowed_memory_slices"))
    return found["compute"] or 0, found["memory"] or 0


def _name_taken(pool: NodePool, name: str) -> InvalidInput:
    return InvalidInput({"name": [f"{pool.name} already has a cohort named {name!r}."]})


@transaction.atomic
def create_cohort(*, pool_id: int, name: str, actor: User, reclaim_grace_minutes: int = 30) -> Cohort:
    """A new, empty cohort in a pool. Locks the pool (so two admins do not race on the name). Audited
    `create_cohort`. Raises NotAllowed, InvalidInput (name, grace, an unknown pool)."""
    _require_admin(actor)
    pool = NodePool.objects.filter(pk=pool_id).first()
    if pool is None:
        raise InvalidInput({"pool": [f"Unknown pool {pool_id}."]})
    cleaned = _checked_name(name)
    grace = _checked_grace(reclaim_grace_minutes)
    lock_pool(pool_id=pool.pk)
    try:
        with transaction.atomic():  # a savepoint: the unique constraint is the check, not a read before it
            cohort = Cohort.objects.create(pool=pool, name=cleaned, reclaim_grace_minutes=grace)
    except IntegrityError:
        raise _name_taken(pool, cleaned) from None
    record_audit_event(actor=actor, verb="create_cohort", obj=cohort, after=_cohort_fields(cohort))
    return cohort


@transaction.atomic
def update_cohort(
    *, cohort_id: int, actor: User, name: str | None = None, reclaim_grace_minutes: int | None = None
) -> Cohort:
    """Rename a cohort or change its reclaim grace (None: unchanged). A new grace applies to notices given from now
    on; notices already given keep their deadline (the owner was told it). Locks the cohort. Audited `update_cohort`.
    """
    _require_admin(actor)
    cohort = _lock_cohort_or_invalid(cohort_id)
    before = _cohort_fields(cohort)
    changed: list[str] = []
    if name is not None:
        cohort.name = _checked_name(name)
        changed.append("name")
    if reclaim_grace_minutes is not None:
        cohort.reclaim_grace_minutes = _checked_grace(reclaim_grace_minutes)
        changed.append("reclaim_grace_minutes")
    if not changed:
        return cohort
    try:
        with transaction.atomic():
            cohort.save(update_fields=[*changed, "updated_at"])
    except IntegrityError:
        raise _name_taken(cohort.pool, cohort.name) from None
    record_audit_event(actor=actor, verb="update_cohort", obj=cohort, before=before, after=_cohort_fields(cohort))
    return cohort


def _lock_members(cohort_id: int) -> list[Quota]:
    """Lock the cohort's member quota rows (pk order), then the cohort: the order every charge takes. A member that
    joined in between (its quota row was not in the list) makes this a conflict to retry, not a wrong lock order."""
    listed = list(Quota.objects.filter(cohort_id=cohort_id).order_by("pk").values_list("pk", flat=True))
    members = list(
        Quota.objects.select_for_update(no_key=True, of=("self",))
        .filter(pk__in=listed)
        .select_related("tenant", "cohort")
        .order_by("pk")
    )
    _lock_cohort_or_invalid(cohort_id)
    if set(Quota.objects.filter(cohort_id=cohort_id).values_list("pk", flat=True)) != {q.pk for q in members}:
        raise CohortInUse("The cohort's members changed meanwhile; try again.")
    return [q for q in members if q.cohort_id == cohort_id]


def _lock_cohort_or_invalid(cohort_id: int) -> Cohort:
    try:
        return lock_cohort(cohort_id=cohort_id)
    except Cohort.DoesNotExist:  # deleted while we waited for its lock
        raise InvalidInput({"cohort": [f"Unknown cohort {cohort_id}."]}) from None


@transaction.atomic
def delete_cohort(*, cohort_id: int, actor: User) -> None:
    """Delete a cohort: its members leave it (their limits cleared) and lend or borrow no more. Refused (409) while a
    member holds borrowed slices. Locks the cohort, then its members' quotas. Audited `delete_cohort`, and
    `set_quota_cohort` for each member that leaves."""
    _require_admin(actor)
    members = _lock_members(cohort_id)
    cohort = Cohort.objects.select_related("pool").get(pk=cohort_id)
    for quota in members:
        if borrowed_by(tenant_id=quota.tenant_id, pool_id=quota.pool_id) != (0, 0):
            raise CohortInUse(
                f"{quota.tenant.name} holds borrowed slices in cohort {cohort.name}: release them or wait for the "
                "reclaim before deleting the cohort."
            )
    for quota in members:
        _save_membership(quota, None, dict.fromkeys(LIMIT_FIELDS), actor)
    record_audit_event(actor=actor, verb="delete_cohort", obj=cohort, before=_cohort_fields(cohort))
    cohort.delete()
    _refresh_cluster_fences({quota.tenant_id for quota in members})


@transaction.atomic
def set_quota_cohort(*, quota_id: int, cohort_id: int | None, limits: Limits, actor: User) -> Quota:
    """Put a tenant's quota into a cohort of its own pool with these limits, or take it out (cohort_id None: the
    limits must then be None). Refused (409) when the tenant holds borrowed slices and would change cohort. Locks the
    quota, then the cohorts it leaves and joins (pk order). Audited `set_quota_cohort`. On Kubernetes, queues
    onboard_tenant_task for every member of both cohorts after commit. Raises NotAllowed, InvalidInput (cohort of
    another pool or unknown, limits out of range), CohortInUse."""
    _require_admin(actor)
    current = Quota.objects.filter(pk=quota_id).select_related("pool").first()
    if current is None:
        raise InvalidInput({"quota": [f"Unknown quota {quota_id}."]})
    _checked_limits(limits)
    if cohort_id is not None:
        wanted = Cohort.objects.filter(pk=cohort_id).first()
        if wanted is None:
            raise InvalidInput({"cohort": [f"Unknown cohort {cohort_id}."]})
        if wanted.pool_id != current.pool_id:
            raise InvalidInput(
                {
                    "cohort": [
                        f"Cohort {wanted.name} is in another pool; a quota of {current.pool.name} can only join a "
                        f"cohort of {current.pool.name}."
                    ]
                }
            )
    elif any(value is not None for value in limits.as_dict().values()):
        raise InvalidInput(
            {
                name: ["Only a cohort member borrows or lends: choose a cohort, or leave this empty."]
                for name, value in limits.as_dict().items()
                if value is not None
            }
        )
    quota = lock_quota(tenant_id=current.tenant_id, pool_id=current.pool_id) or current  # never deleted
    # Then the cohorts it leaves and joins (pk order): no charge in either reads the member rows meanwhile.
    wanted_ids = {c for c in (quota.cohort_id, cohort_id) if c is not None}
    locked = {c: _lock_cohort_or_invalid(c) for c in sorted(wanted_ids)}
    cohort = locked[cohort_id] if cohort_id is not None else None
    if quota.cohort_id != cohort_id and borrowed_by(tenant_id=quota.tenant_id, pool_id=quota.pool_id) != (0, 0):
        raise CohortInUse(
            "This tenant holds borrowed slices in its cohort: release them or wait for the reclaim before it changes "
            "cohort."
        )
    _save_membership(quota, cohort, limits.as_dict(), actor)
    _refresh_cluster_fences({quota.tenant_id} | _member_tenants(wanted_ids))
    return quota
