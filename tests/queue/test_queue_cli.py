"""`fatia queue` and `fatia priority` against a live server: what they print and their exit codes."""

from __future__ import annotations

from allocations.cli import EXIT_API_ERROR, EXIT_OK, EXIT_USAGE
from tests.conftest import World
from tests.queue.helpers import ask, small_pool


def test_fatia_queue_lists_position_and_estimated_start(world: World, tokens, fatia):
    # given: Team A's 4g.40gb queued behind Team B's whole GPU
    pool = small_pool(world)
    ask(world, pool, "7g.80gb", b=True, lease_hours=2)
    mine = ask(world, pool, "4g.40gb")
    # when
    outcome = fatia(tokens.alice, "queue", "--pool", "q1")
    # then
    assert outcome.code == EXIT_OK, outcome.err
    header, row = outcome.out.splitlines()
    assert header.split() == [
        "ID",
        "POOL",
        "POSITION",
        "TENANT",
        "PROFILE",
        "COUNT",
        "PRIORITY",
        "QUEUED",
        "ESTIMATED",
        "START",
    ]
    assert row.split()[:9] == [str(mine.pk), "q1", "1", "of", "1", "team-a", "4g.40gb", "1", "0"]
    # and: --pool takes the id `fatia pools` shows too, as every other command's --pool does
    assert fatia(tokens.alice, "queue", "--pool", str(pool.pk)).out == outcome.out
    # and: --json for scripts; --mine for one's own
    assert [r["allocation"] for r in fatia(tokens.alice, "--json", "queue", "--mine").json()] == [mine.pk]
    assert fatia(tokens.charlie, "queue").out.strip() == "Nothing queued."
    assert (
        fatia(tokens.charlie, "queue", "--pool", str(pool.pk)).out.strip() == "Nothing queued in q1 that you can see."
    )


def test_fatia_queue_and_priority_exit_codes(world: World, tokens, fatia):
    pool = small_pool(world)
    ask(world, pool, "7g.80gb", b=True)
    mine = ask(world, pool, "4g.40gb")
    # an unknown pool: the API's 400, one line, exit 1
    outcome = fatia(tokens.alice, "queue", "--pool", "nowhere")
    assert outcome.code == EXIT_API_ERROR
    # (the live server thread may log its 400 to the same captured stderr: look for the CLI's own line)
    assert "fatia: error: pool: No pool 'nowhere'. (HTTP 400)\n" in outcome.err
    outcome = fatia(tokens.alice, "queue", "--pool", "999999")
    assert outcome.code == EXIT_API_ERROR
    assert "fatia: error: No pool with id 999999; `fatia pools` lists them.\n" in outcome.err
    # a priority out of range or not a number: a usage error before any call, exit 2
    assert fatia(tokens.mallory, "priority", str(mine.pk), "--set", "101").code == EXIT_USAGE
    assert fatia(tokens.mallory, "priority", str(mine.pk), "--set", "high").code == EXIT_USAGE
    # a member may not: 403, exit 1
    outcome = fatia(tokens.alice, "priority", str(mine.pk), "--set", "5")
    assert outcome.code == EXIT_API_ERROR and "(HTTP 403)" in outcome.err
    # another tenant's request: not found, exit 1
    outcome = fatia(tokens.charlie, "priority", str(mine.pk), "--set", "5")
    assert outcome.code == EXIT_API_ERROR
    assert f"fatia: error: Allocation {mine.pk} not found. (HTTP 404)\n" in outcome.err
    # the manager: done, exit 0
    outcome = fatia(tokens.mallory, "priority", str(mine.pk), "--set", "5")
    assert outcome.code == EXIT_OK
    assert outcome.out.strip() == f"Allocation #{mine.pk} now has priority 5, position 1 of 1."
