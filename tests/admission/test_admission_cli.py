"""`fatia pools admission` (issue 14) against a live server: a platform admin turns holding on and off and sets the
longest hold; the portal's refusals (not an admin, a static pool, minutes out of range) are shown in its words with
exit code 1, and nothing to change is a usage error (2)."""

from __future__ import annotations

from allocations import services
from allocations.cli import EXIT_API_ERROR, EXIT_OK, EXIT_USAGE
from allocations.models import NodePool
from tenants.services import create_api_token
from tests.conftest import World


def setting(slug: str) -> tuple[str, int]:
    pool = NodePool.objects.get(slug=slug)
    return pool.admission, pool.max_hold_minutes


def test_a_platform_admin_sets_a_pools_admission_from_the_cli(world: World, tokens, fatia):
    _, root = create_api_token(user=world.root, name="admin", scope="write", expires_at=None, actor=world.root)
    # when: hold, at most 20 min, the pool named by slug
    outcome = fatia(root, "pools", "admission", "h100", "hold", "--max-hold-minutes", "20")
    # then: set, and said
    assert (outcome.code, outcome.out.strip()) == (
        EXIT_OK,
        f"h100 (id {world.pool.pk}) now holds a request that would strand room for larger ones, at most 20 min, "
        "then places it wherever it fits.",
    )
    assert setting("h100") == ("hold", 20)
    # and: `fatia pools` shows it to everyone
    listed = fatia(tokens.alice, "pools").out
    assert "  Holds a request that would strand room for larger ones, at most 20 min, then places it" in listed
    # when: only the bound, by id, as JSON; then off
    outcome = fatia(root, "--json", "pools", "admission", str(world.pool.pk), "--max-hold-minutes", "30")
    assert outcome.code == EXIT_OK and (outcome.json()["admission"], outcome.json()["max_hold_minutes"]) == ("hold", 30)
    outcome = fatia(root, "pools", "admission", "h100", "off")
    assert (outcome.code, outcome.out.strip()) == (
        EXIT_OK,
        f"h100 (id {world.pool.pk}) now places whatever fits (admission off; longest hold kept at 30 min).",
    )
    assert setting("h100") == ("off", 30)


def test_refusals_are_shown_in_the_portals_words_and_change_nothing(world: World, tokens, fatia):
    _, root = create_api_token(user=world.root, name="admin", scope="write", expires_at=None, actor=world.root)
    static = NodePool.MigMode.STATIC_MANAGER
    services.create_node_pool(
        name="Static pool", slug="static", gpu_model=world.pool.gpu_model, mig_mode=static, actor=world.root
    )
    # a tenant manager is not a platform admin
    outcome = fatia(tokens.mallory, "pools", "admission", "h100", "hold")
    assert (outcome.code, outcome.err.strip()) == (
        EXIT_API_ERROR,
        "fatia: error: Only platform admins can change this. Only platform admins set a pool's admission. (HTTP 403)",
    )
    # a static-MIG pool cannot hold: the field's message
    outcome = fatia(root, "pools", "admission", "static", "hold")
    assert outcome.code == EXIT_API_ERROR
    assert outcome.err.startswith("fatia: error: admission: Holding requests does not apply to Static pool. Static MIG")
    assert outcome.err.strip().endswith("Use a dynamic MIG pool. (HTTP 400)")
    # minutes out of range: the field's message
    for minutes in ("0", "1441"):
        outcome = fatia(root, "pools", "admission", "h100", "hold", "--max-hold-minutes", minutes)
        assert outcome.code == EXIT_API_ERROR, outcome.err
        assert outcome.err.startswith("fatia: error: max_hold_minutes: "), outcome.err
    # an unknown pool, nothing to change, minutes that are not a number
    outcome = fatia(root, "pools", "admission", "no-such-pool", "hold")
    assert (outcome.code, outcome.err.strip()) == (
        EXIT_API_ERROR,
        "fatia: error: No pool with slug 'no-such-pool'; `fatia pools` lists them.",
    )
    assert fatia(root, "pools", "admission", "h100").code == EXIT_USAGE
    assert fatia(root, "pools", "admission", "h100", "--max-hold-minutes", "ten").code == EXIT_USAGE
    assert setting("h100") == ("off", 15) and setting("static") == ("off", 15)
