"""The queue in the browser pages, server side: the request page's queue card, the priority form (bad input is a
friendly message, never a 500), and queued demand beside fits-now on the dashboard."""

from __future__ import annotations

from django.test import Client

from allocations.models import Allocation
from allocations.selectors import dashboard_versions
from allocations.services.queue import admit_queued
from allocations.services.queue_priority import set_allocation_priority
from tests.conftest import World
from tests.queue.helpers import ask, release, small_pool


def browser(user) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def test_the_request_page_shows_position_and_estimated_start(world: World):
    # given: Team A's 4g.40gb queued behind Team B's whole GPU, whose lease ends in 2 hours
    pool = small_pool(world)
    ask(world, pool, "7g.80gb", b=True, lease_hours=2)
    waiting = ask(world, pool, "4g.40gb")
    # when
    page = browser(world.alice).get(f"/requests/{waiting.pk}/").content.decode()
    # then
    assert 'id="queue-position">Position <strong>1</strong> of 1 in Queue pool q1' in page
    assert "Estimated start: <time" in page
    # and: it offers to withdraw the request, not to release slices it does not have
    assert "Leave the queue; no slice has been created yet" in page
    assert ">Withdraw request</button>" in page
    assert "Release slices" not in page
    # and: a member has no priority form; a manager has
    assert 'name="priority"' not in page
    assert 'name="priority"' in browser(world.mallory).get(f"/requests/{waiting.pk}/").content.decode()


def test_the_priority_form_answers_bad_input_with_a_message_and_refuses_members(world: World):
    pool = small_pool(world)
    ask(world, pool, "7g.80gb", b=True)
    waiting = ask(world, pool, "4g.40gb")
    manager = browser(world.mallory)
    # when: a bad value
    response = manager.post(f"/requests/{waiting.pk}/priority/", {"priority": "soon"}, follow=True)
    # then: the page again, with the message, nothing changed
    assert response.status_code == 200
    assert "Enter a whole number." in response.content.decode()
    response = manager.post(f"/requests/{waiting.pk}/priority/", {"priority": "500"}, follow=True)
    assert "Ensure this value is less than or equal to 100." in response.content.decode()
    waiting.refresh_from_db()
    assert waiting.priority == 0
    # when: a member posts
    assert browser(world.alice).post(f"/requests/{waiting.pk}/priority/", {"priority": "5"}).status_code == 403
    # and: another tenant's member
    assert browser(world.charlie).post(f"/requests/{waiting.pk}/priority/", {"priority": "5"}).status_code == 404
    # when: the manager sets it
    response = manager.post(f"/requests/{waiting.pk}/priority/", {"priority": "7"}, follow=True)
    assert f"Request #{waiting.pk} now has priority 7." in response.content.decode()
    waiting.refresh_from_db()
    assert waiting.priority == 7


def test_the_dashboard_shows_queued_demand_per_profile_next_to_fits_now(world: World):
    pool = small_pool(world)
    ask(world, pool, "4g.40gb", b=True)
    waiting = [ask(world, pool, "4g.40gb") for _ in range(2)]
    assert {a.status for a in waiting} == {Allocation.Status.QUEUED}
    page = browser(world.alice).get(f"/dashboard/?pool={pool.pk}").content.decode()

    def row(profile: str, fits: int, queued: int) -> str:
        return (
            f'<tr data-profile="{profile}"><th scope="row">{profile}</th><td class="num">{fits}</td>'
            f'<td class="num" data-queued>{queued}</td>'
        )

    # then: the 3g.40gb still fits beside Team B's 4g.40gb, and two 4g.40gb wait
    assert row("4g.40gb", 0, 2) in page
    assert row("3g.40gb", 1, 0) in page


def test_the_timeline_tells_queueing_priority_and_admission_in_words(world: World):
    # given: a queued request, reordered by the manager, then admitted when the GPU is released
    pool = small_pool(world)
    whole = ask(world, pool, "7g.80gb", b=True)
    waiting = ask(world, pool, "4g.40gb")
    set_allocation_priority(allocation_id=waiting.pk, priority=3, actor=world.mallory)
    release(world, whole)
    admit_queued(pool_id=pool.pk)
    # when
    page = browser(world.alice).get(f"/requests/{waiting.pk}/").content.decode()
    # then
    assert "No free layout fits it yet: it waits in the pool&#x27;s queue, its quota held" in page
    assert "mallory set its priority in the tenant&#x27;s queue from 0 to 3" in page
    assert "Admitted from the queue after 0 s" in page or "Admitted from the queue after 1 s" in page


def test_the_live_stream_tells_every_viewer_of_the_pool_when_its_queue_changes(world: World):
    # given: Team B holds the GPU
    pool = small_pool(world)
    whole = ask(world, pool, "7g.80gb", b=True)
    before = dashboard_versions(world.alice)
    # when: Team B queues a request (no slot changes)
    waiting = ask(world, pool, "1g.10gb", b=True)
    queued = dashboard_versions(world.alice)
    # then: alice's view of the pool changes (its card shows queued demand; positions moved), not her requests
    assert queued.pools[pool.pk] != before.pools[pool.pk]
    assert queued.requests == before.requests
    # when: the GPU is released and the request admitted
    release(world, whole)
    assert [a.pk for a in admit_queued(pool_id=pool.pk)] == [waiting.pk]
    # then: the pool's version moves again
    assert dashboard_versions(world.alice).pools[pool.pk] != queued.pools[pool.pk]
