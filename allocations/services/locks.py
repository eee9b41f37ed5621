"""One locking function per model; rows are always locked in this order: a tenant's namespace row (issue 17,
services/tenant_namespaces.py), then allocation (or quota change, or booking: issue 15; an allocation's lease
extension and a booking owner's consent to it come right after it), then pool, then quota (or a move plan, issue 14:
services/moves.py), then the quota's cohort (issue 15, lock_cohort).

Cohort reclaim (issue 15, services/cohort_notices.py) marks other tenants' borrowed allocations while holding a
lender's allocation and its pool: it takes them with SKIP LOCKED (never waits, so it cannot deadlock against the
order above) and passes over any that another transaction holds.
The admission pass (services/queue.py) locks the pool's queued requests, then the pool; requests queued since its
first lock it takes the same way, with SKIP LOCKED, and tries none it does not hold, nor hands notices to one
(services/cohort_handover.py). A plan that may hold reads the pool's held requests `FOR SHARE SKIP LOCKED`
(admission/outcomes.py: one another transaction holds is not counted), after the pool's lock: it never waits.
Its tries charge (services/cohorts.borrow_again) or give back (a failed try) their tenants' quota rows, and a
borrower's charge locks its cohort row, kept until the pass commits; so in a pool with cohorts the pass locks the
quota rows of every tenant it holds a queued request of, in pk order (lock_quotas), before any quota or cohort row
it needs, at its first lock_quota or lock_cohort (PassQuotas: a borrower's charge locks its own row first; a pass
whose tries charge nothing takes none, so members' new requests need not wait for it; a try rolled back releases
the rows it took, and the pass takes them again when it next needs one). Locked one by one in admission order
instead, a pass that had admitted Team B (B's quota row, then the cohort's) waited for Team A's row, which a charge
(A's row, then the cohort) or a cohort's deletion or membership change (cohorts/config.py: the members' rows in pk
order, then the cohort) held while it waited for the pass:
"deadlock detected" (tests/cohorts/test_pass_lock_order.py). Those do not take the pool, so nothing else orders them
against the pass; several quota rows are always locked in pk order, and cohort rows only after them.

Every lock is `FOR NO KEY UPDATE OF <this table>`: it locks only the row we mean to change, never the rows a
`select_related` joins, and it does not conflict with the `FOR KEY SHARE` locks that PostgreSQL's foreign-key
checks take. A plain `FOR UPDATE` here once locked the tenant and pool rows behind an allocation; a request being
created (holding its quota row, inserting a row that references that tenant) then waited for the approver, who
waited for the quota row: a deadlock (issue 9).

`select_for_update` is a no-op on SQLite (the demo), which serialises writers anyway.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from allocations.models import (
    Allocation,
    Booking,
    Cohort,
    ExtensionConsent,
    LeaseExtension,
    NodePool,
    Quota,
    QuotaChangeRequest,
)


def lock_allocation(*, allocation_id: int) -> Allocation:
    return (
        Allocation.objects.select_for_update(no_key=True, of=("self",))
        .select_related("tenant", "pool")
        .get(pk=allocation_id)
    )


def lock_quota(*, tenant_id: int, pool_id: int) -> Quota | None:
    _take_pass_quotas()
    return (
        Quota.objects.select_for_update(no_key=True, of=("self",))
        .filter(tenant_id=tenant_id, pool_id=pool_id)
        .order_by("pk")
        .first()
    )


def lock_quotas(*, pool_id: int, tenant_ids: Iterable[int]) -> None:
    """Lock several tenants' quota rows of one pool, in pk order (as cohorts/config.py `_lock_members` does), before
    any cohort row: the admission pass (services/queue.py) takes every row its tries may charge or give back at once,
    so it never waits for a quota row while it holds a cohort's."""
    rows = Quota.objects.select_for_update(no_key=True, of=("self",)).filter(pool_id=pool_id, tenant_id__in=tenant_ids)
    list(rows.order_by("pk").values_list("pk", flat=True))


@dataclass
class PassQuotas:
    """The quota rows an admission pass may lock (services/queue.py), taken together by `lock_quotas` when the pass
    first needs one: at its first quota or cohort lock (lock_quota, lock_cohort; services/cohorts.borrow_again locks
    a borrower's row, then the cohort's). Until then a member's new request or quota change does not wait for the
    pass: a pass whose tries charge no quota locks none (issue 14, session 14: taken before the first try, they held
    such a request for the whole pass). `taken` is cleared by the pass when a try that took them is rolled back (the
    savepoint's row locks go with it), so a borrower that does not fit holds them only while it is tried."""

    pool_id: int
    tenant_ids: frozenset[int]
    taken: bool = False

    def take(self) -> None:
        if not self.taken:
            self.taken = True
            lock_quotas(pool_id=self.pool_id, tenant_ids=self.tenant_ids)


# The admission pass in progress in this thread, if its pool has cohorts (quotas_at_first_lock).
_PASS_QUOTAS: ContextVar[PassQuotas | None] = ContextVar("pass_quotas", default=None)


@contextmanager
def quotas_at_first_lock(*, pool_id: int, tenant_ids: Iterable[int]) -> Iterator[PassQuotas]:
    """Within it, the first quota or cohort lock takes every quota row of `tenant_ids` in the pool (PassQuotas)."""
    quotas = PassQuotas(pool_id=pool_id, tenant_ids=frozenset(tenant_ids))
    token = _PASS_QUOTAS.set(quotas)
    try:
        yield quotas
    finally:
        _PASS_QUOTAS.reset(token)


def pass_quotas() -> PassQuotas | None:
    """The quota rows of the admission pass in progress in this thread (quotas_at_first_lock), if any."""
    return _PASS_QUOTAS.get()


def _take_pass_quotas() -> None:
    quotas = _PASS_QUOTAS.get()
    if quotas is not None:
        quotas.take()


def lock_quota_change(*, change_id: int) -> QuotaChangeRequest:
    return (
        QuotaChangeRequest.objects.select_for_update(no_key=True, of=("self",))
        .select_related("tenant", "pool")
        .get(pk=change_id)
    )


def lock_pool(*, pool_id: int) -> NodePool:
    """Serialises placement decisions in one pool, so two workers never pick the same slots."""
    return NodePool.objects.select_for_update(no_key=True, of=("self",)).get(pk=pool_id)


def lock_lease_extension(*, extension_id: int) -> LeaseExtension:
    """Lock one lease extension. Callers hold its allocation's lock first (allocation, then extension)."""
    return LeaseExtension.objects.select_for_update(no_key=True, of=("self",)).get(pk=extension_id)


def lock_extension_consent(*, consent_id: int) -> ExtensionConsent:
    """Lock one booking owner's consent to an extension: after the extension's allocation and the extension, before
    the pool (services/extension_consents.py)."""
    return (
        ExtensionConsent.objects.select_for_update(no_key=True, of=("self",))
        .select_related("booking__tenant")
        .get(pk=consent_id)
    )


def lock_booking(*, booking_id: int) -> Booking:
    """Lock one booking. A booking comes first, like an allocation: booking, then pool, then quota."""
    return (
        Booking.objects.select_for_update(no_key=True, of=("self",)).select_related("tenant", "pool").get(pk=booking_id)
    )


def lock_cohort(*, cohort_id: int) -> Cohort:
    """Lock a cohort (issue 15). Taken after the charging member's quota row: quota, then cohort. It serialises
    every charge that may borrow or lend within the cohort, so the members' rows read under it gain no usage."""
    _take_pass_quotas()
    return Cohort.objects.select_for_update(no_key=True, of=("self",)).get(pk=cohort_id)
