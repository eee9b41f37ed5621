"""A request's own hold outcome is shown (issue 14): how and when its hold ended, in the allocation API (read-only
fields; the schema's are checked with the other allocation fields, tests/tenants/test_api.py), on the request's page
and in `fatia show` (its text from the same API answer)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone

from allocations.admission.due import admit_due_holds
from allocations.cli import describe_allocation
from allocations.models import Allocation
from tenants.models import AuditEvent
from tests.admission.helpers import holding_pool
from tests.conftest import World
from tests.queue.helpers import ask

pytestmark = pytest.mark.django_db
Status = Allocation.Status
Outcome = Allocation.HoldOutcome


def held_since(allocation: Allocation, at: datetime) -> None:
    """Given (the clock): it was first held at `at` (its `hold` event)."""
    events = AuditEvent.objects.filter(object_type="allocation", object_id=str(allocation.pk), verb="hold")
    assert events.update(created_at=at) == 1


def page_of(world: World, allocation: Allocation) -> str:
    client = Client()
    client.force_login(world.alice)
    return client.get(f"/requests/{allocation.pk}/").content.decode()


def test_a_request_forced_at_its_deadline_shows_how_long_it_was_held_in_the_api_page_and_cli(world: World):
    # given: a 1g.10gb held (it would break the pool's only whole GPU) since 7 minutes ago, its bound now passed
    pool = holding_pool(world)
    held = ask(world, pool, "1g.10gb")
    assert held.held
    held_since(held, timezone.now() - timedelta(minutes=7, seconds=5))
    api = world.client(world.alice)
    before = api.get(f"/api/v1/allocations/{held.pk}/").json()
    assert (before["hold_outcome"], before["hold_ended_at"]) == ("", None)  # held still: nothing ended
    assert 'id="hold-ended"' not in page_of(world, held)
    Allocation.objects.filter(pk=held.pk).update(held_until=timezone.now() - timedelta(seconds=1))
    # when: the minute step places it forced
    assert admit_due_holds() == {pool.pk: 1}
    # then: the API says forced and when
    answer = api.get(f"/api/v1/allocations/{held.pk}/").json()
    assert answer["status"] == Status.ACTIVE
    assert answer["hold_outcome"] == "forced"
    assert answer["hold_ended_at"] is not None
    [row] = [r for r in api.get("/api/v1/allocations/").json()["results"] if r["id"] == held.pk]
    assert (row["hold_outcome"], row["hold_ended_at"]) == ("forced", answer["hold_ended_at"])  # the list alike
    # and: the page and `fatia show` say how long and how it ended
    assert '<dd id="hold-ended">Held for 7 min, placed at the deadline.</dd>' in page_of(world, held)
    shown = describe_allocation(answer, full=True).splitlines()
    assert [line.split()[1:6] for line in shown if line.split()[:1] == ["hold"]] == [
        ["held", "7", "min,", "placed", "at"]
    ]
    assert "held 7 min, placed at the deadline (" in "\n".join(shown)


@pytest.mark.parametrize(
    ("outcome", "status", "page", "cli"),
    [
        (Outcome.PLACED, Status.ACTIVE, "Held for 1 h 5 min, placed after a release.", "held 1 h 5 min, placed after"),
        (Outcome.LOST, Status.QUEUED, "Held for 1 h 5 min, then it no longer fit: waiting for room.", ": waiting for"),
        (Outcome.LOST, Status.RELEASED, "Held for 1 h 5 min, then it no longer fit: it waited for room.", ", waited"),
    ],
    ids=["placed", "lost-waiting", "lost-withdrawn"],
)
def test_each_way_a_hold_ends_is_worded_on_the_page_and_in_the_cli(world: World, outcome, status, page, cli):
    # given: a request held 65 minutes, whose hold ended so (state given as the services leave it)
    pool = holding_pool(world)
    held = ask(world, pool, "1g.10gb")
    now = timezone.now()
    held_since(held, now - timedelta(minutes=65))
    Allocation.objects.filter(pk=held.pk).update(
        held=False,
        hold_outcome=outcome,
        hold_ended_at=now,
        status=status,
        ended_at=now if status == "released" else None,
    )
    # then
    assert f'<dd id="hold-ended">{page}</dd>' in page_of(world, held)
    answer = world.client(world.alice).get(f"/api/v1/allocations/{held.pk}/").json()
    assert answer["hold_outcome"] == outcome
    assert cli in describe_allocation(answer, full=True)
