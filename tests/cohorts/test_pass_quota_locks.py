"""An admission pass in a pool with cohorts takes its tenants' quota rows only when a try first needs one (issue 14,
session 14; services/locks.PassQuotas): a pass whose tries charge nothing lets a member's new request or quota change
go on meanwhile. Session 13 took them before the first try, so such a request waited for the whole pass (PostgreSQL,
real threads). tests/cohorts/test_pass_lock_order.py: a pass that charges a borrower still takes them all first."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from allocations.models import Allocation
from allocations.services.locks import lock_quota
from allocations.services.queue import admit_queued
from tests.cohorts.helpers import lender_waits_behind_itself
from tests.conftest import World
from tests.queue.helpers import in_transaction, until, waiting_on_a_lock

pytestmark = pytest.mark.django_db(transaction=True)
Status = Allocation.Status


def test_a_pass_that_charges_no_quota_does_not_wait_for_a_members_quota_row(world: World):
    assert connection.vendor == "postgresql"
    # given: a cohort whose Team A (guaranteed 21 / 24) runs both GPUs whole; its 1g.10gb, within its guarantee,
    # waits for room; another transaction holds Team A's quota row (a new request of Team A, say)
    pool, waiting = lender_waits_behind_itself(world)
    row_held, row_free = threading.Event(), threading.Event()
    holder = in_transaction(lambda: lock_quota(tenant_id=world.tenant_a.pk, pool_id=pool.pk), row_held, row_free)
    row_held.wait(20)
    results: list[list[int]] = []

    def run_pass() -> None:
        try:
            results.append([a.pk for a in admit_queued(pool_id=pool.pk)])
        finally:
            connection.close()

    try:
        # when: a pass tries the 1g.10gb (no room: it stays queued, nothing charged or given back)
        passing = threading.Thread(target=run_pass)
        passing.start()
        until(lambda: bool(results) or waiting_on_a_lock())
        # then: the pass is over without waiting for Team A's row
        blocked = waiting_on_a_lock()
    finally:
        row_free.set()
        holder.join()
    passing.join()
    assert (results, blocked) == ([[]], False)
    assert Allocation.objects.get(pk=waiting.pk).status == Status.QUEUED
