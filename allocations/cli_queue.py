"""`fatia queue` and `fatia priority` (issue 15): where queued requests stand, and their order inside a tenant.

Standard library only, like the rest of the CLI (allocations/cli.py registers these commands).

    fatia queue --pool h100          # the pool's queue as you may see it: position, estimated start
    fatia queue --mine               # only the requests you made, in every pool
    fatia priority 12 --set 5        # tenant managers: 12 goes before the tenant's lower ones
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from allocations import cli


def _pool_slug(api: cli.Api, pool: str) -> str:
    """The queue's API takes a slug; every other command's --pool also takes the id `fatia pools` shows."""
    if not (pool.isascii() and pool.isdigit()):  # isdigit alone takes "²", which int() refuses
        return pool
    try:
        return str(api.get(f"/pools/{int(pool)}/")["slug"])
    except cli.ApiError as exc:
        if exc.status == 404:
            raise cli.CliError(f"No pool with id {pool}; `fatia pools` lists them.") from None
        raise


def cmd_queue(args: argparse.Namespace, out: cli.Output) -> int:
    api = cli.client(args)
    params: list[tuple[str, str]] = []
    pool = _pool_slug(api, args.pool) if args.pool else ""
    if pool:
        params.append(("pool", pool))
    if args.mine:
        params.append(("mine", "true"))
    rows = api.get("/queue/", params)

    def human() -> str:
        if not rows:
            return "Nothing queued." if not pool else f"Nothing queued in {pool} that you can see."
        return cli.table(
            ["ID", "POOL", "POSITION", "TENANT", "PROFILE", "COUNT", "PRIORITY", "QUEUED", "ESTIMATED START"],
            [
                (
                    r["allocation"],
                    r["pool"],
                    f"{r['position']} of {r['queue_length']}",
                    r["tenant"],
                    r["profile"],
                    r["count"],
                    r["priority"],
                    cli.when(r["queued_at"]),
                    _start(r),
                )
                for r in rows
            ],
        )

    cli.emit(out, rows, human)
    return cli.EXIT_OK


def _start(row: dict[str, Any]) -> str:
    """The estimated start; a request held by its pool's admission (issue 14) starts at the latest then."""
    if not row["estimated_start"]:
        return "no lease end frees room"
    return cli.when(row["estimated_start"]) + (" (held, at the latest)" if row.get("held") else "")


def cmd_priority(args: argparse.Namespace, out: cli.Output) -> int:
    api = cli.client(args)
    try:
        row = api.post(f"/queue/{args.id}/priority/", {"priority": args.set})
    except cli.ApiError as exc:
        if exc.status == 404:
            raise cli.ApiError(404, f"Allocation {args.id} not found.") from None
        raise
    place = f", position {row['position']} of {row['queue_length']}" if row["position"] else ""
    cli.emit(out, row, lambda: f"Allocation #{row['allocation']} now has priority {row['priority']}{place}.")
    return cli.EXIT_OK


def _priority(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not -100 <= value <= 100:
        raise argparse.ArgumentTypeError("use -100 to 100")
    return value


def add_commands(command: Callable[[str, Any, str], argparse.ArgumentParser]) -> None:
    sub = command("queue", cmd_queue, "queued requests: position and estimated start")
    sub.add_argument("--pool", help="only this pool's queue: its slug or id")
    sub.add_argument("--mine", action="store_true", help="only requests you made")
    sub = command("priority", cmd_priority, "set a request's order inside its tenant's queue (tenant managers)")
    sub.add_argument("id", type=cli._positive_int)
    sub.add_argument("--set", required=True, type=_priority, help="-100 to 100; higher goes first")
