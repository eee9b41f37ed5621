"""`fatia pools admission` (issue 14): platform admins set a pool's admission from the command line, over
PATCH /api/v1/pools/<id>/. Standard library only, like allocations/cli.py (no Django import here: the admission
package's __init__ imports nothing).

    fatia pools admission h100 hold --max-hold-minutes 20
    fatia pools admission h100 off
    fatia pools admission 3 --max-hold-minutes 30

The pool is named by slug or id. The portal's refusals are shown as it words them, with exit code 1: a token
that is not a platform admin's (or read-only), a static-MIG or shared pool (holding keeps no room there), minutes
out of 1 to 1,440. Nothing to change, or a value that is not a number, is a usage error (exit code 2).
"""

from __future__ import annotations

import argparse

from allocations import cli

ADMISSIONS = ("off", "hold")


class NothingToChange(cli.CliError):
    exit_code = cli.EXIT_USAGE


def describe_admission(pool: cli.JsonObject) -> str:
    """What the pool now does with a request whose every placement would strand room."""
    name = f"{pool['slug']} (id {pool['id']})"
    if pool.get("admission") == "hold":
        return (
            f"{name} now holds a request that would strand room for larger ones, at most "
            f"{pool['max_hold_minutes']} min, then places it wherever it fits."
        )
    return f"{name} now places whatever fits (admission off; longest hold kept at {pool['max_hold_minutes']} min)."


def cmd_pools_admission(args: argparse.Namespace, out: cli.Output) -> int:
    body: cli.JsonObject = {}
    if args.admission is not None:
        body["admission"] = args.admission
    if args.max_hold_minutes is not None:
        body["max_hold_minutes"] = args.max_hold_minutes
    if not body:
        raise NothingToChange("Say what to set: off or hold, and/or --max-hold-minutes.")
    api = cli.client(args)
    pool_id = cli.resolve_pool(api, args.pool)
    try:
        pool = api.patch(f"/pools/{pool_id}/", body)
    except cli.ApiError as exc:
        if exc.status == 404:
            raise cli.ApiError(404, f"No pool {args.pool}; `fatia pools` lists them.") from None
        if exc.status == 403:
            raise cli.ApiError(403, f"{exc.reason} Only platform admins set a pool's admission.") from None
        raise
    cli.emit(out, pool, lambda: describe_admission(pool))
    return cli.EXIT_OK


def _minutes(text: str) -> int:
    """A whole number; its range (1 to 1,440) is the portal's to check, so its words are the API's."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of minutes") from None


def add_pool_commands(pools: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    """`fatia pools admission ...` under `fatia pools`, which alone still lists the pools."""
    actions = pools.add_subparsers(dest="pools_command", required=False, metavar="ACTION")
    help_text = "platform admins: hold requests that would strand room (hold) or place whatever fits (off)"
    sub = actions.add_parser("admission", parents=[common], help=help_text, description=help_text)
    sub.set_defaults(handler=cmd_pools_admission)
    sub.add_argument("pool", help="pool slug or id")
    sub.add_argument("admission", nargs="?", choices=ADMISSIONS, help="hold or off (default: as it is)")
    sub.add_argument(
        "--max-hold-minutes", type=_minutes, help="the longest a request is held, 1 to 1440 (default: as it is)"
    )
