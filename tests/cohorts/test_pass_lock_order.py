"""An admission pass and a cohort's deletion, or a member's charge, at once do not deadlock (PostgreSQL, real threads;
issue 15).

The pass charges each admitted borrower's quota row, then the cohort row, in admission order and keeps both until it
commits; `delete_cohort` locks the members' quota rows in pk order, then the cohort. Before, a pass that had admitted
Team B (its quota row and the cohort's held) went on to lock Team A's row, which the deletion held while it waited
for Team B's (or, a new request of Team A, for the cohort's): PostgreSQL aborted one of them ("deadlock detected").
The pass now locks its queued tenants' quota rows in pk order after the pool, before any cohort row
(services/locks.py documents the order)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.db import connection

from allocations import services
from allocations.cohorts.config import CohortInUse, delete_cohort
from allocations.models import Allocation, Cohort, Quota
from allocations.queue_state import queued_in_order
from allocations.services.locks import lock_cohort
from allocations.services.queue import admit_queued
from tenants.models import Membership
from tests.cohorts.helpers import ask_c
from tests.conftest import World
from tests.factories import MembershipFactory, TenantFactory, UserFactory
from tests.queue.helpers import ask, in_transaction, release, small_pool, until

pytestmark = pytest.mark.django_db(transaction=True)
Status = Allocation.Status


def waiting_on_locks() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
        return int(cursor.fetchone()[0])


def two_borrowers_wait(world: World) -> tuple[Cohort, Allocation, Allocation]:
    """Given: one H100, its 7g.80gb just released; Teams A and B guarantee nothing, Team C lends 14 / 16 in one cohort;
    Team B's then Team A's 1g.10gb wait, each to borrow again when admitted. Team A's quota row comes first (pk)."""
    pool = small_pool(world, nodes=1)
    team_c = TenantFactory(name="Team C", slug="team-c", auto_approve_max_compute_slices=7)
    MembershipFactory(user=UserFactory(username="dora"), tenant=team_c, role=Membership.Role.MEMBER)
    services.set_tenant_quota(
        tenant_id=team_c.pk, pool_id=pool.pk, compute_slices_limit=14, memory_slices_limit=16, actor=world.root
    )
    cohort = Cohort.objects.create(pool=pool, name="research", reclaim_grace_minutes=30)
    Quota.objects.filter(pool=pool).update(cohort=cohort)
    Quota.objects.filter(pool=pool).exclude(tenant=team_c).update(compute_slices_limit=0, memory_slices_limit=0)
    filler = ask_c(world, team_c, "7g.80gb")
    b_waits = ask(world, pool, "1g.10gb", b=True)
    a_waits = ask(world, pool, "1g.10gb")
    assert [a.borrowed_compute_slices for a in (b_waits, a_waits)] == [1, 1]
    assert [a.pk for a in queued_in_order(pool)] == [b_waits.pk, a_waits.pk]
    quota_a, quota_b = (Quota.objects.get(tenant=t, pool=pool).pk for t in (world.tenant_a, world.tenant_b))
    assert quota_a < quota_b
    release(world, filler)
    return cohort, b_waits, a_waits


def pass_beside(cohort: Cohort, other: Callable[[], object]) -> dict[str, object]:
    """Another transaction holds the cohort row, so an admission pass started now waits for it; then `other` starts
    and waits too (for a row the pass holds, or the cohort's); then the cohort row is let go. What each returned or
    raised."""
    cohort_held, cohort_free = threading.Event(), threading.Event()
    holder = in_transaction(lambda: lock_cohort(cohort_id=cohort.pk), cohort_held, cohort_free)
    cohort_held.wait(20)
    results: dict[str, object] = {}

    def in_thread(name: str, work: Callable[[], object]) -> threading.Thread:
        def run() -> None:
            try:
                results[name] = work()
            except Exception as exc:  # noqa: BLE001 - asserted on by the tests
                results[name] = exc
            finally:
                connection.close()

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    passing = in_thread("pass", lambda: [a.pk for a in admit_queued(pool_id=cohort.pool_id)])
    until(lambda: waiting_on_locks() >= 1)
    running = in_thread("other", other)
    until(lambda: waiting_on_locks() >= 2)
    cohort_free.set()
    for thread in (holder, passing, running):
        thread.join()
    return results


def test_an_admission_pass_and_a_cohort_deletion_at_once_do_not_deadlock(world: World):
    assert connection.vendor == "postgresql"
    cohort, b_waits, a_waits = two_borrowers_wait(world)
    # when: an admin deletes the cohort (it locks the members' quota rows, then the cohort) while a pass runs
    results = pass_beside(cohort, lambda: delete_cohort(cohort_id=cohort.pk, actor=world.root))
    # then: the pass admits both borrowers, and the deletion is refused, as members hold borrowed slices
    assert results["pass"] == [b_waits.pk, a_waits.pk]
    assert isinstance(results["other"], CohortInUse), results["other"]
    assert set(Allocation.objects.filter(pk__in=[a_waits.pk, b_waits.pk]).values_list("status", flat=True)) == {
        Status.ACTIVE
    }
    assert Cohort.objects.filter(pk=cohort.pk).exists()


def test_an_admission_pass_and_a_members_new_request_at_once_do_not_deadlock(world: World):
    assert connection.vendor == "postgresql"
    cohort, b_waits, a_waits = two_borrowers_wait(world)

    def new_request() -> object:
        allocation, _ = services.request_allocation(
            tenant_id=world.tenant_a.pk, pool_id=cohort.pool_id, profile="1g.10gb", count=1, lease_hours=8,
            purpose="one more", actor=world.alice,
        )  # fmt: skip
        return allocation.status

    # when: Team A asks for one more 1g.10gb (its quota row, then the cohort's) while a pass runs
    results = pass_beside(cohort, new_request)
    # then: both go through: the pass admits both borrowers, Team A's new request is approved (it borrows too)
    assert results == {"pass": [b_waits.pk, a_waits.pk], "other": Status.APPROVED}
