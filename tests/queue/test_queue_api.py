"""The queue's API (allocations/api/queue.py): positions for the caller's tenants only, priority by managers,
bad input answered 400 with field messages."""

from __future__ import annotations

from allocations.models import Allocation
from tests.conftest import World
from tests.queue.helpers import ask, small_pool

Status = Allocation.Status


def queued_pair(world: World):
    pool = small_pool(world)
    ask(world, pool, "7g.80gb", b=True)
    first = ask(world, pool, "4g.40gb", b=True)
    mine = ask(world, pool, "4g.40gb")
    return pool, first, mine


def test_the_queue_lists_my_tenants_requests_with_their_place_in_the_whole_queue(world: World):
    # given: Team B's request then Team A's, both queued; Team B holds the GPU, so Team A's share is smaller
    _, first, mine = queued_pair(world)
    # when: alice (Team A) lists the pool's queue
    response = world.client(world.alice).get("/api/v1/queue/", {"pool": "q1"})
    # then: she sees Team A's request only, first of two (Team B's is counted in the length, not shown)
    assert response.status_code == 200
    [row] = response.json()
    assert row["allocation"] == mine.pk and row["tenant"] == "team-a"
    assert (row["position"], row["queue_length"], row["profile"], row["priority"]) == (1, 2, "4g.40gb", 0)
    assert row["estimated_start"] is not None
    # and: charlie sees Team B's, second; a platform admin sees both
    assert [(r["allocation"], r["position"]) for r in world.client(world.charlie).get("/api/v1/queue/").json()] == [
        (first.pk, 2)
    ]
    assert [r["position"] for r in world.client(world.root).get("/api/v1/queue/?pool=q1").json()] == [1, 2]
    # and: "mine" narrows to the caller's own requests
    assert world.client(world.mallory).get("/api/v1/queue/", {"mine": "true"}).json() == []


def test_bad_queue_queries_answer_400_with_field_messages(world: World):
    queued_pair(world)
    client = world.client(world.alice)
    response = client.get("/api/v1/queue/", {"pool": "no-such-pool"})
    assert response.status_code == 400
    assert response.json()["errors"]["pool"] == ["No pool 'no-such-pool'."]
    response = client.get("/api/v1/queue/", {"mine": "perhaps"})
    assert response.status_code == 400 and "mine" in response.json()["errors"]
    response = client.get("/api/v1/queue/", {"pool": "not a slug!"})
    assert response.status_code == 400 and "pool" in response.json()["errors"]
    # an empty pool is no pool, not "every pool"
    response = client.get("/api/v1/queue/?pool=")
    assert response.status_code == 400 and "pool" in response.json()["errors"]


def test_a_manager_sets_priority_and_bad_values_answer_400(world: World):
    _, first, mine = queued_pair(world)
    manager = world.client(world.mallory)
    # when: the manager gives a bad value, of several kinds
    for body in ({"priority": 101}, {"priority": "high"}, {}, {"priority": -101}):
        response = manager.post(f"/api/v1/queue/{mine.pk}/priority/", body, format="json")
        # then: 400 with a message on the field, and nothing changed
        assert response.status_code == 400, body
        assert "priority" in response.json()["errors"]
    mine.refresh_from_db()
    assert mine.priority == 0
    # when: a member tries
    assert world.client(world.alice).post(f"/api/v1/queue/{mine.pk}/priority/", {"priority": 3}).status_code == 403
    # and: another tenant's member tries
    assert world.client(world.charlie).post(f"/api/v1/queue/{mine.pk}/priority/", {"priority": 3}).status_code == 404
    # when: the manager sets it
    response = manager.post(f"/api/v1/queue/{mine.pk}/priority/", {"priority": 3}, format="json")
    # then: it is set and the answer says where it stands
    assert response.status_code == 200
    assert (response.json()["priority"], response.json()["position"]) == (3, 1)
    mine.refresh_from_db()
    assert mine.priority == 3


def test_setting_priority_on_a_running_request_answers_409(world: World):
    pool = small_pool(world)
    running = ask(world, pool, "1g.10gb")
    response = world.client(world.mallory).post(f"/api/v1/queue/{running.pk}/priority/", {"priority": 3})
    assert response.status_code == 409
    # said in words a manager reads (`fatia priority` prints it), not "Cannot move from active to reprioritised"
    assert response.json()["detail"] == (
        f"Request #{running.pk} is active: a priority orders only requests that have not started (pending, approved "
        "or queued)."
    )
