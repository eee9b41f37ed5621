"""What pricing holds by their outcomes costs a decision in the portal (issue 14): the time of
`admission/outcomes.recent_hold_outcomes` (one query) and of an unforced plan against a forced one (the forced plan
reads no outcomes), in a pool with many requests and ended holds.

    python bench/hold_outcomes_read.py                 # python: a venv with `pip install -e ".[dev]"`
    python bench/hold_outcomes_read.py --no-write      # docs left alone

1. A database as bench/harness.py makes one: a private PostgreSQL (no DATABASE_URL) or a fresh database on the
   DATABASE_URL server, removed on exit; migrated.
2. Data: one H100 pool with admission on (one node, one GPU: placement itself stays small) and --requests
   released requests (bulk-inserted, one per second of history), every --every-th of them held and ended
   (lost or placed, alternately), plus a second pool of as many requests (the index must keep them apart).
3. Mean over --runs after two warm-up runs; then the "hold-outcomes" section of docs/benchmarks.md rewritten.
4. An admission pass (session 12): the pool's GPU taken whole, --queued 1g.10gb requests waiting for room (each try
   plans unforced, so it may hold); the pass's time and queries, as it runs (the pool's hold history read once per
   pass, services/queue.py) and as it ran before (read per try: the bench alone swaps the pass's read-once block
   for one that registers nothing, so every plan reads the database as session 11's code did), and with the pool's
   layout and demand read by every step of a try (read once per try since session 12: `placement.read_once_per_try`,
   entered by the backend's placement step, services/provisioning.py since session 13, which the bench alone swaps
   for a block that registers nothing). The three ways take turns, pass by pass, so a change of load weighs on each
   alike.
5. A fresh request (session 13): --fresh-runs 1g.10gb requests made and provisioned one by one in that pool (its GPU
   still taken whole: each is planned unforced, forced, offered a rescue, then queued), each rolled back after it is
   measured, so every one sees the same pool; its layout and demand read once (as it runs) or by every step (the
   same swap as above). The two ways take turns.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import install_cleanups, log, open_database, portal_settings, temporary_dir  # noqa: E402

GPU_MODEL = "NVIDIA H100 80GB HBM3"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000, help="requests in the pool's history")
    parser.add_argument("--every", type=int, default=10, help="one request in this many was held and ended")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--queued", type=int, default=20, help="requests waiting in the admission pass's queue")
    parser.add_argument("--pass-runs", type=int, default=5, help="admission passes timed, each way")
    parser.add_argument("--fresh-runs", type=int, default=20, help="fresh requests provisioned, each way")
    parser.add_argument("--profile", action="store_true", help="print where one admission pass spends its time")
    parser.add_argument("--no-write", action="store_true", help="do not rewrite docs/benchmarks.md")
    parser.add_argument("--explain", action="store_true", help="print the read's EXPLAIN ANALYZE")
    return parser.parse_args(argv)


def mean_ms(fn: Callable[[], object], runs: int) -> float:
    for _ in range(2):
        fn()
    start = time.perf_counter()
    for _ in range(runs):
        fn()
    return (time.perf_counter() - start) / runs * 1000


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    install_cleanups()
    from bench.report import command_line, write_section

    command = command_line(["bench/hold_outcomes_read.py", *(argv if argv is not None else sys.argv[1:])])
    database_url = open_database()
    os.environ.update(portal_settings(database_url=database_url, data_dir=temporary_dir("fatia-bench-data-")))
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from allocations import services
    from allocations.admission.outcomes import recent_hold_outcomes
    from allocations.models import Allocation, NodePool
    from allocations.placement import plan_slices
    from tenants.models import Tenant

    call_command("migrate", verbosity=0)
    root = User.objects.create_superuser("bench-root", "root@example.com", secrets.token_urlsafe(16))
    tenant = Tenant.objects.create(name="Bench", slug="bench")
    pools = []
    for slug in ("held", "other"):
        pool = services.create_node_pool(name=f"Bench {slug}", slug=slug, gpu_model=GPU_MODEL, actor=root)
        services.register_node(pool_id=pool.pk, name=f"{slug}-node-0", gpu_count=1, actor=root)
        pools.append(pool)
    pool = services.update_node_pool(pool_id=pools[0].pk, admission=NodePool.Admission.HOLD, actor=root)
    now = timezone.now()
    log(f"inserting {2 * args.requests} requests")
    for target, may_hold in ((pool, True), (pools[1], False)):
        rows = []
        for k in range(args.requests):
            at = now - timedelta(seconds=args.requests - k)
            ended = may_hold and k % args.every == 0
            outcome = ("lost" if k % (2 * args.every) == 0 else "placed") if ended else ""
            rows.append(
                Allocation(
                    tenant=tenant, pool=target, requested_by=root, profile="1g.10gb", count=1, lease_hours=1,
                    purpose="bench", compute_slices=1, memory_slices=1, status=Allocation.Status.RELEASED,
                    held_until=at if ended else None, hold_outcome=outcome,
                    hold_ended_at=at + timedelta(seconds=args.every / 2) if ended else None,
                )
            )  # fmt: skip
        made = Allocation.objects.bulk_create(rows, batch_size=5000)
        with connection.cursor() as cursor:  # auto_now_add stamped them all now: spread them over the history
            cursor.execute(
                "UPDATE allocations_allocation SET created_at = %s - make_interval(secs => %s - (id - %s)) "
                "WHERE pool_id = %s",
                [now, args.requests, made[0].pk, target.pk],
            )
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE allocations_allocation")
    read = mean_ms(lambda: recent_hold_outcomes(pool), args.runs)
    if args.explain:
        from django.test.utils import CaptureQueriesContext

        with CaptureQueriesContext(connection) as captured:
            recent_hold_outcomes(pool)
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN ANALYZE " + captured.captured_queries[-1]["sql"])
            print("\n".join(row[0] for row in cursor.fetchall()))
    holds = len([1 for k in range(args.requests) if k % args.every == 0])
    forced = mean_ms(lambda: plan_slices(pool=pool, profile="1g.10gb", count=1), args.runs)
    unforced = mean_ms(lambda: plan_slices(pool=pool, profile="1g.10gb", count=1, force=False), args.runs)
    times, queries = admission_pass(pool, root, tenant, args)
    fresh_times, fresh_queries = fresh_requests(pool, root, tenant, args)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    body = (
        f"Command: `{command}`\n\nLoad average when it ended (1 / 5 / 15 min): {load}; other jobs share the cores, so\n"
        "compare the rows of one run, not runs.\n\n"
        f"A pool with admission on, {args.requests:,} requests of which {holds:,} held and ended (the read sees those\n"
        f"within the last 4,000 requests), next to a pool of as many; mean of {args.runs} runs.\n\n"
        "| What | ms |\n|---|---:|\n"
        f"| `recent_hold_outcomes` (one query) | {read:.1f} |\n"
        f"| `plan_slices`, forced (reads no outcomes) | {forced:.1f} |\n"
        f"| `plan_slices`, unforced (reads them) | {unforced:.1f} |\n"
        f"\nAn admission pass over {args.queued} queued 1g.10gb waiting for room in that pool (its GPU taken whole), "
        f"mean of {args.pass_runs}\npasses: the pool's hold history read once per pass (session 12) or once per try "
        "(session 11); its layout and demand\nread once per try (session 12) or by every step of a try (before).\n\n"
        "| Pass | ms | queries | history reads | layout reads | demand reads |\n|---|---:|---:|---:|---:|---:|\n"
        + "".join(
            f"| {label} | {times[way]:.1f} | {' | '.join(str(n) for n in queries[way])} |\n" for way, label in PASS_WAYS
        )
        + "\nA fresh 1g.10gb request provisioned in that pool (`provision_allocation`: planned unforced, forced, "
        f"offered a rescue,\nthen queued; rolled back after each), mean of {args.fresh_runs}: its layout and demand "
        "read once (session 13) or by\nevery step (before).\n\n"
        "| Fresh request | ms | queries | layout reads | demand reads |\n|---|---:|---:|---:|---:|\n"
        + "".join(
            f"| {label} | {fresh_times[way]:.1f} | {' | '.join(str(n) for n in fresh_queries[way])} |\n"
            for way, label in FRESH_WAYS
        )
    )
    print(body)
    if not args.no_write:
        write_section("hold-outcomes", body, title="Hold outcomes read per decision (issue 14)")
    return 0


# The admission pass's ways (admission_pass): key, row label.
PASS_WAYS = (
    ("once", "history once per pass, layout and demand once per try"),
    ("per step", "history once per pass, layout and demand per step (before)"),
    ("per try", "history per try, layout and demand per step (session 11)"),
)
# A fresh request's ways (fresh_requests): key, row label.
FRESH_WAYS = (
    ("once", "layout and demand once per request"),
    ("per step", "layout and demand per step (before)"),
)
LAYOUT_READ = '"allocations_sliceplacement"."blocked_starts" AS "blocked_starts"'
DEMAND_READ = 'SUM("allocations_allocation"."count") AS "n"'


def admission_pass(
    pool: Any, root: Any, tenant: Any, args: argparse.Namespace
) -> tuple[dict[str, float], dict[str, tuple[int, ...]]]:
    """Per way (PASS_WAYS), the mean ms of an admission pass over --queued requests waiting for room, and (queries,
    history reads, layout reads, demand reads) of one pass. A pass that admits nothing changes nothing: it can be
    timed again."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from allocations import placement, services
    from allocations.admission import outcomes
    from allocations.admission.outcomes import PassHistory
    from allocations.models import Allocation
    from allocations.services import provisioning, queue
    from allocations.services.provisioning import provision_allocation
    from tenants.models import Tenant

    services.set_tenant_quota(
        tenant_id=tenant.pk, pool_id=pool.pk, compute_slices_limit=1000, memory_slices_limit=1000, actor=root
    )
    Tenant.objects.filter(pk=tenant.pk).update(auto_approve_max_compute_slices=7)

    def ask(profile: str) -> Allocation:
        made, _ = services.request_allocation(
            tenant_id=tenant.pk, pool_id=pool.pk, profile=profile, count=1, lease_hours=8, purpose="bench", actor=root
        )
        return provision_allocation(allocation_id=made.pk)

    if ask("7g.80gb").status != Allocation.Status.ACTIVE:
        raise SystemExit("the whole GPU was not placed")
    if {ask("1g.10gb").status for _ in range(args.queued)} != {Allocation.Status.QUEUED}:
        raise SystemExit("the 1g.10gb requests did not all wait for room")
    # The "before" rows swap the pass's read-once blocks for ones that register nothing (the names admit_queued and the
    # simulated backend's placement step look up in their modules).
    read_once = outcomes.read_once_per_pass
    per_try = placement.read_once_per_try
    out: dict[str, tuple[int, ...]] = {}
    ways = {
        "once": (read_once, per_try),
        "per step": (read_once, lambda p: nullcontext()),
        "per try": (lambda p: nullcontext(PassHistory(p.pk)), lambda p: nullcontext()),
    }

    def one_pass(way: str) -> float:
        pass_block, try_block = ways[way]
        with (
            mock.patch.object(queue, "read_once_per_pass", pass_block),
            mock.patch.object(provisioning, "read_once_per_try", try_block),
        ):
            start = time.perf_counter()
            if queue.admit_queued(pool_id=pool.pk):
                raise SystemExit("a pass admitted a request: the bench's passes must change nothing")
            return (time.perf_counter() - start) * 1000

    # The ways take turns (after one warm-up pass each), so a change of load on the shared cores weighs on all alike.
    for way in ways:
        one_pass(way)
    spent = dict.fromkeys(ways, 0.0)
    for _ in range(args.pass_runs):
        for way in ways:
            spent[way] += one_pass(way)
    times = {way: ms / args.pass_runs for way, ms in spent.items()}
    for way in ways:
        with CaptureQueriesContext(connection) as queries:
            one_pass(way)
        sql = [q["sql"] for q in queries.captured_queries]
        out[way] = (
            len(sql),
            *(
                len([q for q in sql if marker in q])
                for marker in ("hold_ended_at IS NOT NULL", LAYOUT_READ, DEMAND_READ)
            ),
        )
    if args.profile:
        import cProfile
        from collections import Counter

        # The pass's queries by statement (literals differ per try: keep the statement's start), most repeated first.
        with CaptureQueriesContext(connection) as queries:
            queue.admit_queued(pool_id=pool.pk)
        shapes = Counter(q["sql"][:160] for q in queries.captured_queries)
        for statement, n in shapes.most_common(40):
            print(f"{n:5d}  {statement}")
        import pstats

        profiler = cProfile.Profile()
        profiler.runcall(queue.admit_queued, pool_id=pool.pk)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
    return times, out


def fresh_requests(
    pool: Any, root: Any, tenant: Any, args: argparse.Namespace
) -> tuple[dict[str, float], dict[str, tuple[int, ...]]]:
    """Per way (FRESH_WAYS), the mean ms of `provision_allocation` for a fresh 1g.10gb request that waits for room,
    and (queries, layout reads, demand reads) of one. Each request is made and provisioned in a transaction rolled
    back afterwards, so every one finds the pool as the last did."""
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from allocations import placement, services
    from allocations.models import Allocation
    from allocations.services import provisioning

    ways = {"once": placement.read_once_per_try, "per step": lambda p: nullcontext()}

    def one_request(way: str, queries: CaptureQueriesContext | None = None) -> float:
        with transaction.atomic(), mock.patch.object(provisioning, "read_once_per_try", ways[way]):
            made, _ = services.request_allocation(
                tenant_id=tenant.pk, pool_id=pool.pk, profile="1g.10gb", count=1, lease_hours=8, purpose="bench",
                actor=root,
            )  # fmt: skip
            with queries if queries is not None else nullcontext():
                start = time.perf_counter()
                done = provisioning.provision_allocation(allocation_id=made.pk)
                spent = (time.perf_counter() - start) * 1000
            if done.status != Allocation.Status.QUEUED:
                raise SystemExit(f"a fresh request ended {done.status}, not queued: the bench measures a wait for room")
            transaction.set_rollback(True)
        return spent

    for way in ways:  # one warm-up each
        one_request(way)
    spent = dict.fromkeys(ways, 0.0)
    for _ in range(args.fresh_runs):
        for way in ways:
            spent[way] += one_request(way)
    out: dict[str, tuple[int, ...]] = {}
    for way in ways:
        captured = CaptureQueriesContext(connection)
        one_request(way, captured)
        sql = [q["sql"] for q in captured.captured_queries]
        out[way] = (len(sql), *(len([q for q in sql if marker in q]) for marker in (LAYOUT_READ, DEMAND_READ)))
    return {way: ms / args.fresh_runs for way, ms in spent.items()}, out


if __name__ == "__main__":
    raise SystemExit(main())
