"""`fatia what-if` against a real server (issue 14): the three questions, and bad input as a message on stderr
with a non-zero exit."""

from __future__ import annotations

from tests.cli.test_cli import fatia, private_config, server, tokens  # noqa: F401  # fixtures
from tests.conftest import World


def test_what_if_answers_and_refuses_bad_input(world: World, fatia, tokens):  # noqa: F811
    added = fatia(tokens.mallory, "what-if", "add-gpus", "--pool", "h100", "--count", "8")
    quota = fatia(tokens.mallory, "what-if", "quota", "--pool", "h100", "--tenant", "team-a", "--factor", "1.5")
    mix = fatia(tokens.mallory, "--json", "what-if", "mix", "--pool", "h100")
    unknown = fatia(tokens.mallory, "what-if", "add-gpus", "--pool", "h100", "--count", "8", "--model", "Z9")
    no_tenant = fatia(tokens.mallory, "what-if", "quota", "--pool", "h100")
    member = fatia(tokens.alice, "what-if", "mix", "--pool", "h100")
    assert added.code == 0, added.err
    assert "Whole GPUs free: 16 -> 24" in added.out
    assert "Compute slices free: 112 of 112 -> 168 of 168" in added.out
    assert quota.code == 0, quota.err
    assert "team-a: 14 compute slices / 16 memory slots -> 21 / 24" in quota.out
    assert mix.code == 0 and '"gpus": 16' in mix.out
    assert unknown.code == 1 and "model: no GPU model 'Z9'" in unknown.err and "HTTP 400" in unknown.err
    assert no_tenant.code == 2 and "quota needs --tenant" in no_tenant.err
    assert member.code == 1 and "HTTP 403" in member.err
