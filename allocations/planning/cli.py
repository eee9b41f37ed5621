"""`fatia what-if` (issue 14): a planner's questions about one pool, answered by the API from its real layouts.

Standard library only, like the rest of the CLI (allocations/cli.py registers the command; nothing here imports
Django, and this package's __init__ imports nothing).

    fatia what-if add-gpus --pool h100 --count 8 [--model "NVIDIA H100 80GB HBM3"] [--gpus-per-node 8]
    fatia what-if quota --pool h100 --tenant team-a [--factor 3 | --compute 28 --memory 32]
    fatia what-if mix --pool h100
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from allocations import cli

QUESTIONS = ("add-gpus", "quota", "mix")


def _served(part: dict[str, Any]) -> str:
    return f"{part['served_requests']} of {part['requests']} ({part['served_slices']} of {part['slices']} slices)"


def _add_gpus(a: dict[str, Any]) -> str:
    before, after = a["before"], a["after"]
    lines = [
        f"{a['gpus_added']} x {a['model']} on {a['nodes_added']} new node(s).",
        f"Whole GPUs free: {before['whole_gpus_free']} -> {after['whole_gpus_free']}",
        f"Compute slices free: {before['compute_free']} of {before['compute_total']} -> "
        f"{after['compute_free']} of {after['compute_total']}",
        f"Memory slots free: {before['memory_free']} of {before['memory_total']} -> "
        f"{after['memory_free']} of {after['memory_total']}",
        f"Queued requests served now: {_served(a['queued_before'])} -> {_served(a['queued_after'])}",
        f"Refused lately, would be served: {_served(a['refused_before'])} -> {_served(a['refused_after'])}",
        "",
        cli.table(
            ["PROFILE", "FITS NOW", "WITH THE NEW GPUS"],
            [(p, n, after["fits"].get(p, 0)) for p, n in before["fits"].items()],
        ),
    ]
    return "\n".join(lines)


def _quota(a: dict[str, Any]) -> str:
    before, after = a["before"], a["after"]
    lines = [
        f"{a['tenant']}: {before['compute']} compute slices / {before['memory']} memory slots -> "
        f"{after['compute']} / {after['memory']}",
        f"Free in the pool: {a['compute_free_in_pool']} compute slices, {a['memory_free_in_pool']} memory slots",
        cli.table(
            ["PROFILE", "FITS IN POOL", "MORE NOW", "MORE WITH NEW QUOTA"],
            [
                (
                    r["profile"],
                    r["fits_now"],
                    f"{r['more_before']} ({r['bound_before']})",
                    f"{r['more_after']} ({r['bound_after']})",
                )
                for r in a["rooms"]
            ],
        ),
        f"Queued (hold quota, wait for room): {a['queued']}, admitted now "
        f"{a['queued_admitted_before']} -> {a['queued_admitted_after']}",
        f"Waiting for a manager: {a['pending']}, within quota {a['pending_within_quota_before']} -> "
        f"{a['pending_within_quota_after']}, placed now {a['pending_placed_after']}",
        f"Other tenants' queued requests admitted now: {a['others_admitted_before']} -> "
        f"{a['others_admitted_after']} of {a['others_queued']}",
    ]
    return "\n".join(lines)


def _counts(counts: dict[str, int]) -> str:
    return " + ".join(f"{n} x {p}" for p, n in counts.items()) or "empty"


def _mix(a: dict[str, Any]) -> str:
    demand = ", ".join(f"{n} x {p}" for p, n in a["demand"].items())
    proven = "" if a["optimal"] else " (best found, not proven optimal)"
    lines = [
        f"Expected demand for {a['gpus']} GPUs: {demand}",
        f"Best layout mix serves {a['served_compute']} of {a['demand_compute']} compute slices{proven}:",
        cli.table(["GPUS", "LAYOUT OF EACH"], [(m["gpus"], _counts(m["counts"])) for m in a["target"]]),
        f"From today's layouts: {a['gpus_on_target']} GPU(s) already there, {a['gpus_without_moves']} reachable "
        f"without moves; {a['moves']} held slice(s) would move, {a['creates']} instance(s) created",
    ]
    return "\n".join(lines)


def cmd_what_if(args: argparse.Namespace, out: cli.Output) -> int:
    api = cli.client(args)
    pool = cli.resolve_pool(api, args.pool)
    params: list[tuple[str, str]] = []
    human: Callable[[dict[str, Any]], str]
    if args.question == "add-gpus":
        if args.count is None:
            raise cli.ConfigError("add-gpus needs --count (GPUs to add).")
        params.append(("count", str(args.count)))
        if args.model:
            params.append(("model", args.model))
        if args.gpus_per_node is not None:
            params.append(("gpus_per_node", str(args.gpus_per_node)))
        human = _add_gpus
    elif args.question == "quota":
        if not args.tenant:
            raise cli.ConfigError("quota needs --tenant (id or slug).")
        params.append(("tenant", args.tenant))
        for name in ("factor", "compute", "memory"):
            if getattr(args, name) is not None:
                params.append((name, str(getattr(args, name))))
        human = _quota
    else:
        human = _mix
    answer = api.get(f"/pools/{pool}/what-if/{args.question}/", params)
    cli.emit(out, answer, lambda: human(answer))
    return cli.EXIT_OK


def add_commands(command: Callable[[str, Any, str], argparse.ArgumentParser]) -> None:
    sub = command("what-if", cmd_what_if, "a planner's what-if about a pool (admins, tenant managers)")
    sub.add_argument(
        "question",
        choices=QUESTIONS,
        help="add-gpus: if the pool had --count more GPUs; quota: if a tenant's quota changed; mix: which layout "
        "mix would serve the pool's demand best. Nothing is changed.",
    )
    sub.add_argument("--pool", required=True, help="pool slug or id")
    sub.add_argument("--count", type=int, help="add-gpus: GPUs to add")
    sub.add_argument("--model", help="add-gpus: catalog GPU model (default: the pool's)")
    sub.add_argument("--gpus-per-node", type=int, help="add-gpus: GPUs per new node (default 8)")
    sub.add_argument("--tenant", help="quota: tenant id or slug")
    sub.add_argument("--factor", type=float, help="quota: scale both limits (default 2)")
    sub.add_argument("--compute", type=int, help="quota: new compute-slice limit")
    sub.add_argument("--memory", type=int, help="quota: new memory-slot limit")
