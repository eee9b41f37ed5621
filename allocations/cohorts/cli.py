"""`fatia cohort`: cohorts of a pool (issue 15), over /api/v1/cohorts/ and /api/v1/quotas/. Standard library only,
like allocations/cli.py.

    fatia cohort list [--pool h100]
    fatia cohort create --pool h100 --name research [--grace 30]
    fatia cohort set 3 [--name research-2] [--grace 10]
    fatia cohort delete 3
    fatia cohort join 3 --tenant team-a [--borrow-compute 14] [--lend-compute none] ...
    fatia cohort leave --pool h100 --tenant team-a

Tenants and pools are named by slug or id.

Creating, changing and joining are for platform admins; everyone may list the cohorts of pools where their tenants
have quota. A limit of `none` means no limit. Exit codes as for every command: 1 when the portal refuses, 2 for bad
arguments.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from allocations import cli

LIMITS = (
    ("borrow_compute", "borrowing_compute_limit"),
    ("borrow_memory", "borrowing_memory_limit"),
    ("lend_compute", "lending_compute_limit"),
    ("lend_memory", "lending_memory_limit"),
)


_UNSET = object()  # a limit option not given: keep the quota's current limit


class NothingToChange(cli.CliError):
    exit_code = cli.EXIT_USAGE


def _limit(text: str) -> int | None:
    if text.lower() in ("none", "no-limit", "unlimited"):
        return None
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number or 'none'")
    return int(text)


def _pair(a: object, b: object) -> str:
    return f"{'-' if a is None else a}/{'-' if b is None else b}"


def describe_cohort(c: cli.JsonObject) -> str:
    lines = [
        f"Cohort #{c['id']} {c['name']} in {c['pool_slug']}: grace {c['reclaim_grace_minutes']} min, "
        f"{c['member_count']} member(s), lent in total {c['borrowed_compute']}/{c['borrowed_memory']}"
    ]
    if c["members"]:
        rows = [
            (
                m["tenant_name"],
                _pair(m["guarantee_compute"], m["guarantee_memory"]),
                _pair(m["used_compute"], m["used_memory"]),
                _pair(m["borrowed_compute"], m["borrowed_memory"]),
                _pair(m["lendable_compute"], m["lendable_memory"]),
                _pair(m["borrowing_compute_limit"], m["borrowing_memory_limit"]),
                _pair(m["lending_compute_limit"], m["lending_memory_limit"]),
            )
            for m in c["members"]
        ]
        headers = ["TENANT", "GUARANTEE", "USED", "BORROWED", "CAN LEND", "MAY BORROW", "MAY LEND"]
        lines.append(cli.table(headers, rows))
    return "\n".join(lines)


def cmd_cohort_list(args: argparse.Namespace, out: cli.Output) -> int:
    api = cli.client(args)
    params = [("pool", str(cli.resolve_pool(api, args.pool)))] if args.pool is not None else []
    cohorts = api.get_all("/cohorts/", params)
    cli.emit(out, cohorts, lambda: "\n\n".join(describe_cohort(c) for c in cohorts) if cohorts else "No cohorts.")
    return cli.EXIT_OK


def cmd_cohort_create(args: argparse.Namespace, out: cli.Output) -> int:
    api = cli.client(args)
    body: cli.JsonObject = {"pool": cli.resolve_pool(api, args.pool), "name": args.name}
    if args.grace is not None:
        body["reclaim_grace_minutes"] = args.grace
    cohort = api.post("/cohorts/", body)
    cli.emit(out, cohort, lambda: describe_cohort(cohort))
    return cli.EXIT_OK


def _not_found(exc: cli.ApiError, what: str) -> cli.ApiError:
    return cli.ApiError(404, f"{what} not found.") if exc.status == 404 else exc


def cmd_cohort_set(args: argparse.Namespace, out: cli.Output) -> int:
    body: cli.JsonObject = {}
    if args.name is not None:
        body["name"] = args.name
    if args.grace is not None:
        body["reclaim_grace_minutes"] = args.grace
    if not body:
        raise NothingToChange("Say what to change: --name and/or --grace.")
    try:
        cohort = cli.client(args).patch(f"/cohorts/{args.id}/", body)
    except cli.ApiError as exc:
        raise _not_found(exc, f"Cohort {args.id}") from None
    cli.emit(out, cohort, lambda: describe_cohort(cohort))
    return cli.EXIT_OK


def cmd_cohort_delete(args: argparse.Namespace, out: cli.Output) -> int:
    try:
        cli.client(args).delete(f"/cohorts/{args.id}/")
    except cli.ApiError as exc:
        raise _not_found(exc, f"Cohort {args.id}") from None
    cli.emit(out, {"deleted": args.id}, lambda: f"Cohort {args.id} is deleted; its members lend and borrow no more.")
    return cli.EXIT_OK


def _quota_id(api: cli.Api, tenant: str, pool: int) -> int:
    """The quota of a tenant (slug or id, as given) in a pool."""
    found = api.get_all("/quotas/", [("tenant", str(cli.resolve_tenant(api, tenant))), ("pool", str(pool))])
    if not found:
        # `fatia quota` only reads balances: a quota is set on the Set quotas page or with POST /api/v1/quotas/.
        raise cli.ApiError(
            404,
            f"Tenant {tenant} has no quota in pool {pool}; a platform admin sets one first (Admin > Set quotas in "
            "the portal, or POST /api/v1/quotas/).",
        )
    return int(found[0]["id"])


def _describe_membership(b: cli.JsonObject) -> str:
    if b["cohort"] is None:
        return f"{b['tenant_name']} is in no cohort in {b['pool_name']}."
    return (
        f"{b['tenant_name']} is in cohort {b['cohort_name']} in {b['pool_name']}: guarantee "
        f"{b['compute_slices_limit']}/{b['memory_slices_limit']}, may borrow "
        f"{_pair(b['borrowing_compute_limit'], b['borrowing_memory_limit'])}, may lend "
        f"{_pair(b['lending_compute_limit'], b['lending_memory_limit'])} (-: no limit)."
    )


def cmd_cohort_join(args: argparse.Namespace, out: cli.Output) -> int:
    api = cli.client(args)
    try:
        cohort = api.get(f"/cohorts/{args.id}/")
    except cli.ApiError as exc:
        raise _not_found(exc, f"Cohort {args.id}") from None
    body: cli.JsonObject = {"cohort": args.id}
    for option, field in LIMITS:
        given = getattr(args, option)
        if given is not _UNSET:
            body[field] = given
    balance = api.patch(f"/quotas/{_quota_id(api, args.tenant, int(cohort['pool']))}/", body)
    cli.emit(out, balance, lambda: _describe_membership(balance))
    return cli.EXIT_OK


def cmd_cohort_leave(args: argparse.Namespace, out: cli.Output) -> int:
    api = cli.client(args)
    quota = _quota_id(api, args.tenant, cli.resolve_pool(api, args.pool))
    balance = api.patch(f"/quotas/{quota}/", {"cohort": None})
    cli.emit(out, balance, lambda: _describe_membership(balance))
    return cli.EXIT_OK


def add_cohort_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
    positive_int: Callable[[str], int],
) -> None:
    """`fatia cohort list|create|set|delete|join|leave` under the top-level parser's subcommands."""
    cohort = commands.add_parser(
        "cohort",
        help="cohorts: tenants of a pool that lend each other unused quota",
        description="List cohorts; platform admins create, change and delete them and put tenants in them.",
    )
    actions = cohort.add_subparsers(dest="cohort_command", required=True, metavar="ACTION")

    def action(name: str, handler: cli.Handler, help_text: str) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, parents=[common], help=help_text, description=help_text)
        sub.set_defaults(handler=handler)
        return sub

    def grace(text: str) -> int:
        if not (text.isascii() and text.isdigit()):
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of minutes")
        return int(text)

    sub = action("list", cmd_cohort_list, "cohorts of your pools, with their members' figures")
    sub.add_argument("--pool", help="pool slug or id")

    sub = action("create", cmd_cohort_create, "create a cohort in a pool (platform admins)")
    sub.add_argument("--pool", required=True, help="pool slug or id")
    sub.add_argument("--name", required=True, help="the cohort's name, unique in its pool")
    sub.add_argument("--grace", type=grace, help="reclaim grace in minutes (default 30; 0: at once)")

    sub = action("set", cmd_cohort_set, "rename a cohort or change its reclaim grace (platform admins)")
    sub.add_argument("id", type=positive_int, help="the cohort's id (`fatia cohort list`)")
    sub.add_argument("--name", help="its new name")
    sub.add_argument("--grace", type=grace, help="reclaim grace in minutes")

    sub = action("delete", cmd_cohort_delete, "delete a cohort; its members leave it (platform admins)")
    sub.add_argument("id", type=positive_int, help="the cohort's id (`fatia cohort list`)")

    sub = action("join", cmd_cohort_join, "put a tenant's quota in a cohort, with its limits (platform admins)")
    sub.add_argument("id", type=positive_int, help="the cohort's id (`fatia cohort list`)")
    sub.add_argument("--tenant", required=True, help="tenant slug or id")
    for option, field in LIMITS:
        sub.add_argument(
            f"--{option.replace('_', '-')}",
            dest=option,
            type=_limit,
            default=_UNSET,
            help=f"{field.replace('_', ' ')}: a number, or none (no limit); left out: unchanged",
        )

    sub = action("leave", cmd_cohort_leave, "take a tenant's quota out of its cohort (platform admins)")
    sub.add_argument("--pool", required=True, help="pool slug or id")
    sub.add_argument("--tenant", required=True, help="tenant slug or id")
