"""`fatia what-if` against a real server (issue 14): the three questions, and bad input as a message on stderr
with a non-zero exit."""

from __future__ import annotations

import argparse

from allocations.cli import build_parser
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


def test_every_argument_of_the_planner_and_cohort_commands_says_what_it_is():
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    cohort = next(a for a in commands["cohort"]._actions if isinstance(a, argparse._SubParsersAction)).choices
    for sub in [commands["what-if"], *cohort.values()]:
        for action in sub._actions:
            assert action.help, f"{sub.prog} {action.option_strings or action.dest} has no help"
    assert "mix: which layout mix" in commands["what-if"].format_help()
