"""The demo's SQLite reads a pool's ended holds, churn and held requests with the ORM (issue 14,
allocations/admission/outcomes_portable.py): on the same rows they answer what PostgreSQL's statements answer.

Before, a demo pool switched to `hold` failed at its next placement with a syntax error (and the pool's admission page
on any demo pool), the statements being PostgreSQL's."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from allocations.admission import outcomes_portable
from allocations.admission.outcomes import CHURN_WINDOW, OUTCOME_WINDOW, ended_holds, recent_churn_and_held
from allocations.models import Allocation
from tests.admission.helpers import holding_pool
from tests.admission.test_hold_outcomes import ended_holds as given_ended_holds
from tests.conftest import World
from tests.queue.helpers import ask

pytestmark = pytest.mark.django_db
Status = Allocation.Status
Outcome = Allocation.HoldOutcome


def test_the_portable_reads_answer_as_postgresqls_statements(world: World):
    # given: a holding pool whose history interleaves requests and ended holds, one request created at the very
    # instant a hold ended (not after it), allocations that ran and ended, and two 1g.10gb held now
    assert connection.vendor == "postgresql"
    pool = holding_pool(world)
    start = timezone.now() - timedelta(hours=3)
    Allocation.objects.filter(pool=pool).update(created_at=start - timedelta(days=1))
    ends = [Outcome.LOST, Outcome.PLACED, Outcome.FORCED, Outcome.PLACED, Outcome.LOST]
    for n, outcome in enumerate(ends):
        (row,) = given_ended_holds(
            world, pool, ("1g.10gb", "2g.20gb")[n % 2], [outcome], at=start + timedelta(minutes=n)
        )
        Allocation.objects.filter(pk=row.pk).update(created_at=start + timedelta(minutes=n) - timedelta(seconds=30))
    requests = given_ended_holds(world, pool, "7g.80gb", [""] * 6, at=start)
    for n, row in enumerate(requests):
        Allocation.objects.filter(pk=row.pk).update(
            created_at=start + timedelta(minutes=n),
            activated_at=start,
            ended_at=start + timedelta(minutes=n, seconds=9),
        )
    held = [ask(world, pool, "1g.10gb"), ask(world, pool, "1g.10gb", b=True)]
    assert [(a.status, a.held) for a in held] == [(Status.QUEUED, True)] * 2
    # when: both read the pool
    sql_ended, sql_churn = sorted(ended_holds(pool)), recent_churn_and_held(pool)
    portable_ended = sorted(outcomes_portable.ended_holds(pool, OUTCOME_WINDOW))
    requests_n, ran_and_ended, held_now = outcomes_portable.churn_and_held(pool, CHURN_WINDOW)
    # then: the same answers (and not empty ones: the ends counted a varying number of requests since)
    assert portable_ended == sql_ended
    assert len({since for _, _, since in sql_ended}) > 2
    assert (ran_and_ended / requests_n, held_now) == sql_churn
    assert sql_churn[0] > 0 and held_now == {a.pk: a.compute_slices for a in held}
