"""What the admission pass's quota locks cost in a pool with cohorts (issue 14, session 14): since session 13 the pass
locked the quota rows of every tenant it holds a queued request of, in pk order, before its first try (services/locks.py
says why: a deadlock otherwise); since session 14 it takes them when a try first needs one (services/locks.PassQuotas:
its first quota or cohort lock, such as a borrower's charge).

    python bench/pass_quota_locks.py                 # python: a venv with `pip install -e ".[dev]"`
    python bench/pass_quota_locks.py --no-write      # docs/benchmarks.md left alone

1. A database as bench/harness.py makes one (a private PostgreSQL, or a fresh database on DATABASE_URL), migrated.
2. Per queue length (--queued) and mix (--mixes): a pool of --gpus H100 (one per node) in one cohort. A filler
   tenant runs every GPU whole within its guarantee; --tenants tenants queue 1g.10gb requests in turn, within a
   large guarantee (lenders) or with none (each of their requests borrows from the cohort when admitted): half of
   the tenants borrow (`half`) or none does (`none`); then one GPU is released, so a pass admits 7 of them and tries
   the rest.
3. The pass's steps are called one by one (services/queue.py: lock_queue, then try_queued) three ways: the quota
   rows taken at the first lock (as it runs: services/locks.quotas_at_first_lock), before the first try (session
   13: services/locks.lock_quotas) or never (before session 13: the deadlock), each pass in a transaction rolled
   back afterwards, so every pass sees the same queue; the ways take turns. Reported: the whole pass, and session
   13's quota step alone.
4. A concurrent approval: while a pass runs, a lender tenant with requests in the queue asks for one more
   1g.10gb (services.request_allocation: its quota row, then the cohort's), started right after session 13's quota
   step (or where it would be), or half a pass later (half the way's warm-up pass); its time from start to return,
   against the same request with no pass running. Whichever way, it waits for the cohort row once the pass charged
   a borrower (borrow_again keeps it).
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import install_cleanups, log, open_database, portal_settings, temporary_dir  # noqa: E402

GPU_MODEL = "NVIDIA H100 80GB HBM3"
WAYS = ("first lock", "first try", "never")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", default="10,50,200", help="queue lengths, comma-separated")
    parser.add_argument("--mixes", default="half,none", help="which tenants borrow: half, none (comma-separated)")
    parser.add_argument("--tenants", type=int, default=6, help="tenants with queued requests")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs in the pool (one per node)")
    parser.add_argument("--runs", type=int, default=5, help="passes timed per way and queue length")
    parser.add_argument("--no-write", action="store_true", help="do not rewrite docs/benchmarks.md")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    install_cleanups()
    from bench.report import command_line, write_section

    command = command_line(["bench/pass_quota_locks.py", *(argv if argv is not None else sys.argv[1:])])
    database_url = open_database()
    os.environ.update(portal_settings(database_url=database_url, data_dir=temporary_dir("fatia-bench-data-")))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    rows = []
    cases = [(int(q), mix) for mix in args.mixes.split(",") for q in args.queued.split(",")]
    for n, (queued, mix) in enumerate(cases):
        log(f"queue of {queued}, {mix} borrowing")
        rows.append((queued, mix, *measure(args, queued, mix, slug=f"c{n}")))
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    body = (
        f"Command: `{command}`\n\nLoad average when it ended (1 / 5 / 15 min): {load}; other jobs share the cores, so\n"
        "compare the rows of one run, not runs.\n\n"
        f"A pool of {args.gpus} H100 in one cohort, its GPUs run whole by a filler tenant; {args.tenants} tenants "
        "queue 1g.10gb in turn\n(borrowing: `half` of the tenants borrow every request, `none` of them does), then one "
        "GPU is released: each\npass admits 7 and tries the rest, rolled back after it. Median of "
        f"{args.runs} passes per way (the ways take turns).\nThe quota rows taken: at the pass's first quota or cohort "
        "lock (as it runs, session 14), before its first\ntry (session 13), never (before: the deadlock). The "
        "approval: a lender with queued requests asks for one more\n1g.10gb while a pass runs, started right after "
        "session 13's quota step (or where it would be: `start`)\nor half a pass later (`mid`); alone it takes the "
        "last column's time.\n\n"
        "| Queued | Borrowing | Pass ms: first lock / first try / never | Quota step ms "
        "| Approval ms at start: first lock / first try / never | Approval ms at mid: same | Alone |\n"
        "|---:|---|---|---:|---|---|---:|\n"
        + "".join(
            f"| {q} | {mix} | {' / '.join(f'{p[w]:.0f}' for w in WAYS)} | {step:.2f} | "
            f"{' / '.join(f'{a[(w, 0)]:.0f}' for w in WAYS)} | {' / '.join(f'{a[(w, 1)]:.0f}' for w in WAYS)} | "
            f"{alone:.0f} |\n"
            for q, mix, p, step, a, alone in rows
        )
    )
    print(body)
    if not args.no_write:
        title = "The admission pass's quota locks in a pool with cohorts (issue 14)"
        write_section("pass-quota-locks", body, title=title)
    return 0


def measure(
    args: argparse.Namespace, queued: int, mix: str, *, slug: str
) -> tuple[dict[str, float], float, dict[tuple[str, int], float], float]:
    """Per way: the median pass (ms); the quota step's median (ms); per way and start (0: at the step, 1: half a pass
    later), the median concurrent approval (ms); the approval alone (ms)."""
    from django.db import connection, transaction

    from allocations import services
    from allocations.services.locks import lock_quotas, quotas_at_first_lock
    from allocations.services.queue import lock_queue, try_queued

    pool, lender, actor = queued_pool(args, queued, mix, slug=slug)

    def one_pass(way: str, after_step: threading.Event | None = None) -> tuple[float, float]:
        """(pass ms, quota step ms), rolled back."""
        with transaction.atomic():
            start = time.perf_counter()
            queue = lock_queue(pool_id=pool.pk)
            if queue is None:
                raise SystemExit("nothing queued")
            tenants = {a.tenant_id for a in queue.queued}
            step_start = time.perf_counter()
            if way == "first try":
                lock_quotas(pool_id=pool.pk, tenant_ids=tenants)
            step = time.perf_counter() - step_start
            if after_step is not None:
                after_step.set()
            if way == "first lock":
                with quotas_at_first_lock(pool_id=pool.pk, tenant_ids=tenants):
                    admitted = try_queued(queue)
            else:
                admitted = try_queued(queue)
            spent = time.perf_counter() - start
            if len(admitted) != 7:
                raise SystemExit(f"the pass admitted {len(admitted)}, not 7")
            transaction.set_rollback(True)
        return spent * 1000, step * 1000

    def approve() -> float:
        """One more 1g.10gb of the lender (ms), rolled back."""
        with transaction.atomic():
            start = time.perf_counter()
            services.request_allocation(
                tenant_id=lender.pk, pool_id=pool.pk, profile="1g.10gb", count=1, lease_hours=1, purpose="bench",
                actor=actor,
            )  # fmt: skip
            spent = time.perf_counter() - start
            transaction.set_rollback(True)
        return spent * 1000

    def during_pass(way: str, delay_s: float) -> float:
        after_step, result = threading.Event(), {}

        def run() -> None:
            try:
                after_step.wait(60)
                time.sleep(delay_s)  # the bench's own pacing: where in the pass the approval starts
                result["ms"] = approve()
            finally:
                connection.close()

        thread = threading.Thread(target=run)
        thread.start()
        one_pass(way, after_step)
        thread.join()
        return float(result["ms"])

    half = {way: one_pass(way)[0] / 2000 for way in WAYS}  # warm-up: half a pass, in seconds
    passes: dict[str, list[float]] = {way: [] for way in WAYS}
    steps: list[float] = []
    approvals: dict[tuple[str, int], list[float]] = {(way, at): [] for way in WAYS for at in (0, 1)}
    alone: list[float] = []
    for _ in range(args.runs):
        for way in WAYS:
            spent, step = one_pass(way)
            passes[way].append(spent)
            if way == "first try":
                steps.append(step)
            approvals[(way, 0)].append(during_pass(way, 0.0))
            approvals[(way, 1)].append(during_pass(way, half[way]))
        alone.append(approve())
    return (
        {way: statistics.median(v) for way, v in passes.items()},
        statistics.median(steps),
        {key: statistics.median(v) for key, v in approvals.items()},
        statistics.median(alone),
    )


def queued_pool(args: argparse.Namespace, queued: int, mix: str, *, slug: str) -> tuple[Any, Any, Any]:
    """The pool, its first lender tenant and an actor (see the module's step 2)."""
    from django.contrib.auth.models import User

    from allocations import services
    from allocations.models import Allocation, Cohort, Quota
    from allocations.services.provisioning import provision_allocation, teardown_allocation
    from tenants.models import Tenant

    root = User.objects.filter(username="bench-root").first() or User.objects.create_superuser(
        "bench-root", "root@example.com", secrets.token_urlsafe(16)
    )
    pool = services.create_node_pool(name=f"Bench {slug}", slug=slug, gpu_model=GPU_MODEL, actor=root)
    for n in range(args.gpus):
        services.register_node(pool_id=pool.pk, name=f"{slug}-node-{n}", gpu_count=1, actor=root)
    filler = Tenant.objects.create(name=f"Filler {slug}", slug=f"filler-{slug}", auto_approve_max_compute_slices=7)
    tenants = [
        Tenant.objects.create(name=f"T{k} {slug}", slug=f"t{k}-{slug}", auto_approve_max_compute_slices=7)
        for k in range(args.tenants)
    ]
    guarantee = {filler.pk: (7 * args.gpus, 8 * args.gpus)}  # every GPU whole, within its guarantee
    borrows = {k for k in range(len(tenants)) if mix == "half" and k % 2 == 1}  # tenants[0] always lends
    guarantee.update({t.pk: (0, 0) if k in borrows else (1000, 1000) for k, t in enumerate(tenants)})
    for tenant_id, (compute, memory) in guarantee.items():
        services.set_tenant_quota(
            tenant_id=tenant_id, pool_id=pool.pk, compute_slices_limit=compute, memory_slices_limit=memory, actor=root
        )
    cohort = Cohort.objects.create(pool=pool, name=f"bench {slug}", reclaim_grace_minutes=30)
    Quota.objects.filter(pool=pool).update(cohort=cohort)

    def ask(tenant: Any, profile: str) -> Allocation:
        made, _ = services.request_allocation(
            tenant_id=tenant.pk, pool_id=pool.pk, profile=profile, count=1, lease_hours=8, purpose="bench", actor=root
        )
        return provision_allocation(allocation_id=made.pk)

    whole = [ask(filler, "7g.80gb") for _ in range(args.gpus)]
    if {a.status for a in whole} != {Allocation.Status.ACTIVE}:
        raise SystemExit("the filler's GPUs were not all placed")
    waiting = [ask(tenants[k % len(tenants)], "1g.10gb") for k in range(queued)]
    if {a.status for a in waiting} != {Allocation.Status.QUEUED}:
        raise SystemExit("the 1g.10gb requests did not all wait for room")
    borrowing = sum(1 for a in waiting if a.borrowed_compute_slices)
    log(f"{queued} queued, {borrowing} of them borrowing")
    services.release_allocation(allocation_id=whole[0].pk, actor=root)
    teardown_allocation(allocation_id=whole[0].pk)
    return pool, tenants[0], root


if __name__ == "__main__":
    raise SystemExit(main())
