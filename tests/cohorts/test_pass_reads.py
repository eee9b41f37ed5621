"""An admission pass asks whether a queued request waits for a reclaim once per try (issue 14, session 14): the
placement step asked again (`wait_for_reclaim`), and `reclaim_room_for` read the request's quota row and cohort a
third time, in the same transaction and under the same locks (the pass holds the quota rows: services/locks.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from allocations.models import Allocation
from allocations.services.queue import admit_queued
from tests.cohorts.helpers import lender_waits_behind_itself, used
from tests.conftest import World

pytestmark = pytest.mark.django_db
Status = Allocation.Status

# The reclaim check's read (services/cohort_reclaim._cohort_members: own row and the cohort's members in one
# statement) and reclaim_room_for's own read of the request's row with its cohort (`_cohort_quota`).
CHECK_READ = 'IN (SELECT U0."cohort_id" AS "cohort_id" FROM "allocations_quota" U0'
ROW_READ = 'FROM "allocations_quota" LEFT OUTER JOIN "allocations_cohort"'
QUOTA_READ = 'FROM "allocations_quota"'


def statements(captured: CaptureQueriesContext, marker: str) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if marker in q["sql"]]


@pytest.mark.parametrize("backend", ["simulated", "kubernetes"])
def test_a_pass_checks_a_lenders_reclaim_once_per_try_and_reads_its_quota_row_once(
    world: World, settings: Any, backend: str
):
    # given: a cohort whose Team A (guaranteed 21 / 24) runs both GPUs whole itself; its 1g.10gb waits for room,
    # with nothing borrowed to take back
    pool, waiting = lender_waits_behind_itself(world)
    before = used(world, pool)
    if backend == "kubernetes":  # the placement step only plans here: it talks to no cluster
        settings.FATIA_CLUSTER_BACKEND = "kubernetes"
        settings.FATIA_KUBECONFIG = "unused: planning talks to no cluster"
    # when: a pass tries it (no room; its reclaim finds nothing to give notice to)
    with CaptureQueriesContext(connection) as captured:
        assert admit_queued(pool_id=pool.pk) == []
    # then: one reclaim check (the placement step asked again before), its quota row not read again for the reclaim,
    # and the cohort's members read once to give notice among (besides the fair order's read of the usage): the
    # reclaim inside the try, rolled back with it, ran its reads too (seven quota reads in all before)
    quota_reads = [sql for sql in statements(captured, QUOTA_READ) if "FOR NO KEY UPDATE" not in sql]
    assert (len(statements(captured, CHECK_READ)), len(statements(captured, ROW_READ)), len(quota_reads)) == (1, 0, 3)
    # and: as before, it still waits, holding what it held, and no allocation was given notice
    waiting.refresh_from_db()
    assert (waiting.status, used(world, pool)) == (Status.QUEUED, before)
    assert not Allocation.objects.filter(reclaimed_for=waiting).exists()
