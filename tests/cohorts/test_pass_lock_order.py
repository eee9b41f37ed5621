"""An admission pass and a cohort's deletion at once do not deadlock (PostgreSQL, real threads; issue 15).

The pass charges each admitted borrower's quota row, then the cohort row, in admission order and keeps both until it
commits; `delete_cohort` locks the members' quota rows in pk order, then the cohort. Before, a pass that had admitted
Team B (its quota row and the cohort's held) went on to lock Team A's row, which the deletion held while it waited
for Team B's: PostgreSQL aborted one of them ("deadlock detected"). The pass now locks its queued tenants' quota rows
in pk order after the pool, before any cohort row (services/locks.py documents the order)."""

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


def test_an_admission_pass_and_a_cohort_deletion_at_once_do_not_deadlock(world: World):
    # given: one H100; Teams A and B guarantee nothing, Team C lends 14 / 16 in one cohort and fills the GPU
    assert connection.vendor == "postgresql"
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
    # and: Team B's then Team A's 1g.10gb wait, each to borrow again when admitted; Team A's quota row comes first
    b_waits = ask(world, pool, "1g.10gb", b=True)
    a_waits = ask(world, pool, "1g.10gb")
    assert [a.borrowed_compute_slices for a in (b_waits, a_waits)] == [1, 1]
    assert [a.pk for a in queued_in_order(pool)] == [b_waits.pk, a_waits.pk]
    quota_a, quota_b = (Quota.objects.get(tenant=t, pool=pool).pk for t in (world.tenant_a, world.tenant_b))
    assert quota_a < quota_b
    release(world, filler)
    # and: another transaction holds the cohort row (a charge), so the pass, started now, waits for it
    cohort_held, cohort_free = threading.Event(), threading.Event()
    holder = in_transaction(lambda: lock_cohort(cohort_id=cohort.pk), cohort_held, cohort_free)
    cohort_held.wait(20)
    results: dict[str, object] = {}

    def in_thread(name: str, work: Callable[[], object]) -> threading.Thread:
        def run() -> None:
            try:
                results[name] = work()
            except Exception as exc:  # noqa: BLE001 - asserted on below
                results[name] = exc
            finally:
                connection.close()

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    passing = in_thread("pass", lambda: [a.pk for a in admit_queued(pool_id=pool.pk)])
    until(lambda: waiting_on_locks() >= 1)
    # when: an admin deletes the cohort meanwhile (it locks the members' quota rows, then the cohort)
    deleting = in_thread("delete", lambda: delete_cohort(cohort_id=cohort.pk, actor=world.root))
    until(lambda: waiting_on_locks() >= 2)
    cohort_free.set()
    holder.join()
    passing.join()
    deleting.join()
    # then: the pass admits both borrowers, and the deletion is refused, as members hold borrowed slices
    assert results["pass"] == [b_waits.pk, a_waits.pk]
    assert isinstance(results["delete"], CohortInUse), results["delete"]
    assert set(Allocation.objects.filter(pk__in=[a_waits.pk, b_waits.pk]).values_list("status", flat=True)) == {
        Status.ACTIVE
    }
    assert Cohort.objects.filter(pk=cohort.pk).exists()
