"""`fatia book`: bookings ahead of time (issue 15), over /api/v1/bookings/. Standard library only, like cli.py.

    fatia book create --pool h100 --profile 1g.10gb --count 4 \
        --start 2026-12-03T09:00 --end 2026-12-03T17:00 --purpose "workshop"
    fatia book list [--pool h100] [--status approved]
    fatia book cancel 12 [--reason "moved online"]

Times without a zone are UTC. Exit codes as for every command: 1 when the portal refuses (over quota or no room
over the window: the message names what is in the way), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime

from allocations import cli


def _moment(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date and time like 2026-12-03T09:00") from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def describe_booking(b: cli.JsonObject) -> str:
    line = (
        f"Booking #{b['id']}: {b['status']} - {b['count']}x {b['profile']} in {b['pool_slug']} for "
        f"{b['tenant_name']}, {cli.when(b['starts_at'])} to {cli.when(b['ends_at'])}"
    )
    detail = f"\n  {b['status_message']}" if b.get("status_message") else ""
    made = f"\n  Its request: `fatia show {b['allocation']}`." if b.get("allocation") else ""
    return line + detail + made


def cmd_book_create(args: argparse.Namespace, out: cli.Output) -> int:
    api = cli.client(args)
    body: cli.JsonObject = {
        "pool": cli.resolve_pool(api, args.pool),
        "profile": args.profile,
        "count": args.count,
        "starts_at": args.start.isoformat(),
        "ends_at": args.end.isoformat(),
        "purpose": args.purpose,
    }
    if args.tenant is not None:
        body["tenant"] = cli.resolve_tenant(api, args.tenant)
    booking = api.post("/bookings/", body)
    cli.emit(out, booking, lambda: describe_booking(booking))
    return cli.EXIT_OK


def cmd_book_list(args: argparse.Namespace, out: cli.Output) -> int:
    api = cli.client(args)
    params: list[tuple[str, str]] = []
    if args.pool is not None:
        params.append(("pool", str(cli.resolve_pool(api, args.pool))))
    if args.status is not None:
        params.append(("status", args.status))
    results = api.get_all("/bookings/", params)

    def human() -> str:
        if not results:
            return "No bookings."
        rows = [
            (
                b["id"],
                b["status"],
                b["tenant_name"],
                b["pool_slug"],
                b["profile"],
                b["count"],
                cli.when(b["starts_at"]),
                cli.when(b["ends_at"]),
                b["requested_by"],
            )
            for b in results
        ]
        return cli.table(["ID", "STATUS", "TENANT", "POOL", "PROFILE", "COUNT", "STARTS", "ENDS", "BY"], rows)

    cli.emit(out, results, human)
    return cli.EXIT_OK


def cmd_book_cancel(args: argparse.Namespace, out: cli.Output) -> int:
    api = cli.client(args)
    try:
        booking = api.post(f"/bookings/{args.id}/cancel/", {"reason": args.reason or ""})
    except cli.ApiError as exc:
        if exc.status == 404:
            raise cli.ApiError(404, f"Booking {args.id} not found.") from None
        raise
    cli.emit(out, booking, lambda: describe_booking(booking))
    return cli.EXIT_OK


def cmd_book_asks(args: argparse.Namespace, out: cli.Output) -> int:
    """Longer leases that ask to use your bookings' room (and those your tenants' leases asked)."""
    api = cli.client(args)
    results = api.get_all("/extension-consents/", [("status", args.status)] if args.status else ())

    def human() -> str:
        if not results:
            return "No lease asks to use a booking's room."
        rows = [
            [str(c["id"]), c["status"], f"#{c['booking']}", f"#{c['allocation']}", f"{c['hours']} h", c["requested_by"]]
            for c in results
        ]
        return cli.table(["ID", "STATUS", "BOOKING", "REQUEST", "MORE", "ASKED BY"], rows)

    cli.emit(out, results, human)
    return cli.EXIT_OK


def _answer(args: argparse.Namespace, out: cli.Output, verb: str) -> int:
    api = cli.client(args)
    try:
        consent = api.post(f"/extension-consents/{args.id}/{verb}/", {"reason": args.reason or ""})
    except cli.ApiError as exc:
        if exc.status == 404:
            raise cli.ApiError(404, f"Question {args.id} not found.") from None
        raise
    said = "agreed to" if consent["status"] == "agreed" else "refused"
    cli.emit(
        out,
        consent,
        lambda: (
            f"You {said} request #{consent['allocation']} running {consent['hours']} h longer into booking "
            f"#{consent['booking']}'s room."
        ),
    )
    return cli.EXIT_OK


def cmd_book_agree(args: argparse.Namespace, out: cli.Output) -> int:
    return _answer(args, out, "agree")


def cmd_book_refuse(args: argparse.Namespace, out: cli.Output) -> int:
    return _answer(args, out, "refuse")


def add_book_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
    positive_int: Callable[[str], int],
) -> None:
    """`fatia book create|list|cancel` under the top-level parser's subcommands."""
    book = commands.add_parser(
        "book",
        help="book slices ahead of time",
        description="Create, list and cancel bookings; answer leases that ask for their room.",
    )
    actions = book.add_subparsers(dest="book_command", required=True, metavar="ACTION")

    def action(name: str, handler: cli.Handler, help_text: str) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, parents=[common], help=help_text, description=help_text)
        sub.set_defaults(handler=handler)
        return sub

    sub = action("create", cmd_book_create, "book MIG slices for a window in the future")
    sub.add_argument("--pool", required=True, help="pool slug or id")
    sub.add_argument("--profile", required=True, help="the MIG profile, e.g. 1g.10gb")
    sub.add_argument("--count", required=True, type=positive_int, help="number of slices")
    sub.add_argument("--start", required=True, type=_moment, help="start, e.g. 2026-12-03T09:00 (UTC unless zoned)")
    sub.add_argument("--end", required=True, type=_moment, help="end, e.g. 2026-12-03T17:00")
    sub.add_argument("--purpose", required=True, help="what the slices are for")
    sub.add_argument("--tenant", help="tenant slug or id (needed when you are in several)")

    sub = action("list", cmd_book_list, "your tenants' bookings, soonest first")
    sub.add_argument("--pool", help="pool slug or id")
    sub.add_argument("--status", help="only this status (pending, approved, active, ...)")

    sub = action("cancel", cmd_book_cancel, "cancel a pending or approved booking")
    sub.add_argument("id", type=positive_int)
    sub.add_argument("--reason", help="optional note")

    sub = action("asks", cmd_book_asks, "longer leases asking to use your bookings' room")
    sub.add_argument("--status", choices=["pending", "agreed", "refused", "cancelled"], help="only this status")

    sub = action("agree", cmd_book_agree, "let a lease run into your booking's room (the booking may get less)")
    sub.add_argument("id", type=positive_int, help="the question's id (`fatia book asks`)")
    sub.add_argument("--reason", help="optional note")

    sub = action("refuse", cmd_book_refuse, "keep your booking's room: the longer lease is rejected")
    sub.add_argument("id", type=positive_int, help="the question's id (`fatia book asks`)")
    sub.add_argument("--reason", required=True, help="why the booking keeps its room")
