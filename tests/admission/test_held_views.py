"""A held request as its owner sees it (issue 14): the request page's queue card, the queue API and `fatia queue`
say it is held and when it starts at the latest; a request waiting for room says nothing of the kind."""

from __future__ import annotations

from django.test import Client

from allocations.cli import EXIT_OK
from tests.admission.helpers import holding_pool
from tests.conftest import World
from tests.queue.helpers import ask


def test_the_queue_card_the_api_and_the_cli_say_held_and_until_when(world: World, tokens, fatia):
    # given: a held request
    pool = holding_pool(world)
    held = ask(world, pool, "1g.10gb")
    until = held.held_until
    assert until is not None
    # when: its owner looks at its page
    client = Client()
    client.force_login(world.alice)
    page = client.get(f"/requests/{held.pk}/").content.decode()
    # then: the queue card says it is held and when it starts at the latest
    assert "Held by Queue pool hold's admission: it fits now, but every place would strand room" in page
    assert f'at the latest at <time datetime="{until.isoformat()}">{until:%Y-%m-%d %H:%M} UTC</time>' in page
    # and: the queue API gives the deadline and makes it the estimated start
    [row] = world.client(world.alice).get("/api/v1/queue/", {"pool": "hold"}).json()
    assert row["held_until"] == row["estimated_start"] == until.isoformat().replace("+00:00", "Z")
    # and: `fatia queue` marks the start as held
    outcome = fatia(tokens.alice, "queue", "--pool", "hold")
    assert outcome.code == EXIT_OK, outcome.err
    assert outcome.out.splitlines()[1].endswith("(held, at the latest)")
    # and: `fatia pools` says the pool holds such requests, and for how long at most
    listed = fatia(tokens.alice, "pools").out.splitlines()
    assert listed[listed.index(f"hold (id {pool.pk}): Queue pool hold, {pool.gpu_model}") + 1] == (
        "  Holds a request that would strand room for larger ones, at most 15 min, then places it wherever it fits "
        "(while the pool first fills, also one that would open an empty GPU kept for whole-GPU requests)."
    )


def test_a_request_waiting_for_room_is_not_said_to_be_held(world: World):
    pool = holding_pool(world)
    ask(world, pool, "7g.80gb")
    waiting = ask(world, pool, "1g.10gb", b=True)
    client = Client()
    client.force_login(world.charlie)
    assert "Held by" not in client.get(f"/requests/{waiting.pk}/").content.decode()
    [row] = world.client(world.charlie).get("/api/v1/queue/").json()
    assert row["held_until"] is None
