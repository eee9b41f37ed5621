"""Provisioning benchmark: approve requests on a fake fleet behind a real control plane, with real Celery workers.

    python bench/provision.py                              # 500 requests, 100 nodes x 8 H100, 2 workers
    python bench/provision.py --nodes 10 --requests 50 --no-write   # a quick look, docs left alone

What it does, in order:

1. PostgreSQL as bench/harness.py starts it (private, or a fresh database on DATABASE_URL's server), a private Redis,
   and the local Kubernetes control plane (deploy/control-plane.sh: etcd, kube-apiserver, kube-scheduler,
   kube-controller-manager with DRA; no kubelet).
2. The fleet: N fake nodes with 8 H100 80GB each (allocations/cluster/fake_fleet.py: NVIDIA's DynamicMIG slices), the
   driver's DeviceClasses, and the same nodes and GPU UUIDs registered in one pool of the portal; 10 tenants
   with ample quota, onboarded (namespace, RBAC, device quota).
3. W Celery worker processes (--pool=solo) with FATIA_CLUSTER_BACKEND=kubernetes.
4. R requests of one slice each (a fixed, seeded profile mix), approved through `approve_allocation`, twice:
   back to back ("burst"), and at each of --rates per second ("paced"); everything is released in between. Latency per
   request: approval committed -> the worker recorded the scheduler's allocation (activated_at); p50, p99,
   total time, and the CPU time each process spent per request (/proc).
5. Trickle: requests arriving one at a time (each waits for the previous one to be allocated or refused) on
   --fill-nodes nodes of their own until 130 % of their compute was offered; a refused request (QUEUED) is
   withdrawn. What the cluster allocated (its claims, not our records) is scored against the engine alone placing
   the same requests offline with first-fit and with `ours` (bench/steering_offline.py): the share of `ours`'
   gain in compute slices served that reaches the cluster. --fill-seeds: one trickle per seed of the request
   sequence (default 7), each on a pool and fill nodes of its own; the tables below show the first. Then, unless
   --no-scheduler, the same requests (the first seed's) as claims that pin only the profile (the scheduler's
   choice) until the first refusal, and the burst's profile sequence as such claims on the main nodes: the
   scheduler's own choice at the same load. Layouts are scored
   with the placement engine: how many more slices of each profile would still fit, and how many GPUs are left
   whole.
6. A table on stdout, and the "provision" section of docs/benchmarks.md (bench/report.py) unless --no-write;
   --json PATH writes the figures for bench/steering.py (off / adaptive / always side by side).

--steer sets FATIA_KUBE_STEER_SLOTS for the workers: off, adaptive (the default) or always. --one-queue routes the
workers' claim polls to Celery's default queue, behind provisioning, as before session 13 (bench/one_queue.py). The
burst also prints what placement saw in flight (sampled every 0.5 s) and its per-GPU layouts: a claim whose allocation
is not recorded yet closes its GPU to requests that could displace it (docs/benchmarks.md, session 14's burst runs).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MIX = {"1g.10gb": 35, "1g.20gb": 10, "2g.20gb": 20, "3g.40gb": 15, "4g.40gb": 8, "7g.80gb": 12}
GPU_MODEL = "NVIDIA H100 80GB HBM3"
TENANTS = 10


FILL_LABEL = "bench.fatia.io/fill"
FILL_SEED_LABEL = "bench.fatia.io/fill-seed"  # the trickle's seed: one set of fill nodes per seed
CPU_COLUMNS = (
    "kube-apiserver",
    "etcd",
    "kube-scheduler",
    "kube-controller-manager",
    "Celery workers",
    "PostgreSQL",
    "Redis",
    "bench (approvals)",
)


@dataclass
class Scheduled:
    """The scheduler's own choice (claims that pin only the profile)."""

    latencies: list[float]
    total_s: float
    allocated: int
    cpu: dict[str, float]
    whole: int
    fits: dict[str, int]
    admitted: int  # trickle sequence, until the first refusal


@dataclass
class Trickle:
    """One trickle (requests one at a time on fill nodes of its own) and its offline reference."""

    seed: int
    sequence: list[str]
    served: Any  # steering_offline.Served: what the cluster allocated
    admitted: int  # before the first refusal
    steered: int
    seconds: float
    offline: dict[str, Any]  # policy -> steering_offline.Served
    reached: float | None  # share of `ours`' offline gain over first-fit

    def figures(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "requests": len(self.sequence),
            "compute": self.served.compute,
            "admitted": self.served.admitted,
            "first_refusal": self.admitted,
            "whole": self.served.whole_gpus,
            "steered": self.steered,
            "seconds": self.seconds,
            "offline": {p: {"compute": r.compute, "admitted": r.admitted} for p, r in self.offline.items()},
            "reached": self.reached,
        }


@dataclass
class Result:
    latencies: list[float]
    total_s: float
    active: int
    failed: int
    differs: int
    approving_s: float
    cpu: dict[str, float]
    steered: int  # requests planned off first fit (audit steer_past)
    load: float  # the machine's 1-minute load average, mean over the run (a shared machine: read times with it)
    slowest: list[tuple[int, float, bool]]  # (allocation, approval -> recorded s, steered), the 5 slowest
    # Per tenth of the requests in approval order: (first and last rank, mean s approval -> placements recorded by the
    # provision task, mean s placements recorded -> allocation recorded by the claim's poll, mean s in all)
    stages: list[tuple[int, int, float, float, float]]
    # What placement saw in flight, sampled every 0.5 s from the first approval to the last activation: (s since the
    # first approval, requests approved and not yet planned, planned with claims not yet allocated, GPUs those claims
    # pin). A GPU with such a claim is not a candidate for a request that could displace it (plan_slices_for_scheduler).
    in_flight: list[tuple[float, int, int, int]]
    first_ten: list[tuple[int, float, float]]  # (rank, approval -> provisioned s, provisioned -> active s)


# What each process spends: comm names as /proc shows them (at most 15 characters).
COMPONENTS = {
    "etcd": "etcd",
    "kube-apiserver": "kube-apiserver",
    "kube-scheduler": "kube-scheduler",
    "kube-controller": "kube-controller-manager",
    "postgres": "PostgreSQL",
    "redis-server": "Redis",
}


def cpu_seconds(worker_pids: list[int]) -> dict[str, float]:
    """CPU seconds (user + system) so far per component, read from /proc; workers by pid, this process too."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = dict.fromkeys([*COMPONENTS.values(), "Celery workers", "bench (approvals)"], 0.0)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        # utime, stime, and cutime, cstime: children reaped (PostgreSQL's exited backends count for the postmaster)
        seconds = sum(int(f) for f in fields[11:15]) / tick
        pid = int(entry.name)
        if pid in worker_pids:
            out["Celery workers"] += seconds
        elif pid == os.getpid():
            out["bench (approvals)"] += seconds
        elif comm in COMPONENTS:
            out[COMPONENTS[comm]] += seconds
    return out


def stages_by_order(
    timed: list[tuple[int, float, float]], parts: int = 10
) -> list[tuple[int, int, float, float, float]]:
    """(rank, approval -> provisioned s, provisioned -> active s) in approval order, as means per tenth of the
    requests: where a request's time went, by when it was approved."""
    out = []
    size = max(1, -(-len(timed) // parts))
    for i in range(0, len(timed), size):
        part = timed[i : i + size]
        before = sum(t[1] for t in part) / len(part)
        after = sum(t[2] for t in part) / len(part)
        out.append((part[0][0], part[-1][0], before, after, before + after))
    return out


def in_flight_summary(samples: list[tuple[float, int, int, int]]) -> str:
    """Means and peaks of Result.in_flight, over the whole burst and per fifth of its samples."""
    if not samples:
        return "in flight: no sample"
    n = len(samples)

    def means(part: list[tuple[float, int, int, int]]) -> str:
        k = len(part)
        return "/".join(f"{sum(s[i] for s in part) / k:.0f}" for i in (1, 2, 3))

    fifths = [samples[i * n // 5 : (i + 1) * n // 5] for i in range(5)]
    return (
        f"in flight (approved not planned / claims not allocated / GPUs they pin; {n} samples, 0.5 s apart): mean "
        f"{means(samples)}, peak {max(s[1] for s in samples)}/{max(s[2] for s in samples)}/"
        f"{max(s[3] for s in samples)}; by fifth of the burst: {', '.join(means(f) for f in fifths if f)}"
    )


def layout_counts(layout: dict[tuple[str, int], list[Any]]) -> Counter[str]:
    """How many GPUs hold each layout (profiles by start, e.g. "1g.10gb@0 3g.40gb@4")."""
    return Counter(
        " ".join(f"{i.profile}@{i.start}" for i in sorted(instances, key=lambda i: i.start))
        for instances in layout.values()
        if instances
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument(
        "--rates",
        type=float,
        nargs="*",
        default=[5.0, 10.0],
        help="approvals per second of the paced runs (none: skip)",
    )
    parser.add_argument("--fill-nodes", type=int, default=4, help="nodes of the fill-until-failure comparison")
    parser.add_argument(
        "--fill-seeds",
        type=int,
        nargs="+",
        default=[7],
        help="seeds of the trickle's request sequence, one trickle each (the report's tables: the first)",
    )
    parser.add_argument(
        "--steer",
        choices=["off", "adaptive", "always"],
        nargs="?",
        const="always",
        default="adaptive",
        help="FATIA_KUBE_STEER_SLOTS for the workers (bare --steer: always)",
    )
    parser.add_argument("--no-scheduler", action="store_true", help="skip the scheduler-alone comparisons")
    parser.add_argument(
        "--one-queue",
        action="store_true",
        help="claim polls on Celery's default queue, behind provisioning, as before session 13 (bench/one_queue.py)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here (bench/steering.py)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(ROOT))
    from bench import steering_offline
    from bench.harness import (
        at_exit,
        install_cleanups,
        open_database,
        portal_settings,
        start_control_plane,
        start_private_redis,
        temporary_dir,
    )
    from bench.report import command_line

    install_cleanups()
    command = command_line(["bench/provision.py", *(argv if argv is not None else sys.argv[1:])])
    database_url = open_database()
    broker = start_private_redis().url
    cp = start_control_plane()
    data_dir = temporary_dir("fatia-bench-data-")
    env = {
        **os.environ,
        **portal_settings(database_url=database_url, data_dir=data_dir),
        "CELERY_BROKER_URL": broker,
        "PYTHONPATH": str(ROOT),
        "FATIA_CLUSTER_BACKEND": "kubernetes",
        "FATIA_KUBECONFIG": str(cp / "portal.kubeconfig"),
        "FATIA_KUBE_ALLOCATION_TIMEOUT_S": str(int(args.timeout)),
        "FATIA_KUBE_STEER_SLOTS": args.steer,
    }
    os.environ.update(env)
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.db.models import Count
    from kubernetes import client, config

    from allocations import services
    from allocations.cluster import fake_fleet, kube
    from allocations.cluster import placements as cluster_placements
    from allocations.cluster import sync as kube_sync
    from allocations.mig.catalog import load_catalog
    from allocations.mig.engine import fits_now
    from allocations.mig.fleet import Fleet, Gpu, Instance, Node
    from allocations.models import Allocation, OutboxMessage, SlicePlacement
    from tenants import services as tenant_services
    from tenants.models import AuditEvent

    call_command("migrate", verbosity=0)

    def layout_fleet(layout: dict[tuple[str, int], list[Instance]]) -> Fleet:
        names = [f"h100-{n:03d}" for n in range(args.nodes)]
        return Fleet([Node(n, [Gpu(n, i, model, layout.get((n, i), [])) for i in range(8)]) for n in names])

    admin = config.new_client_from_config(config_file=str(cp / "admin.kubeconfig"), persist_config=False)
    model = load_catalog().model(GPU_MODEL)

    # The fleet, in the cluster and in the portal.
    started = time.perf_counter()
    fake_fleet.ensure_device_classes(admin)
    root = User.objects.create_user("bench-root", is_staff=True)
    pool = services.create_node_pool(name="H100 fleet", slug="h100", gpu_model=GPU_MODEL, actor=root)
    for n in range(args.nodes):
        node = fake_fleet.publish_node(admin, model, f"h100-{n:03d}", 8)
        kube_sync.register_cluster_node(pool_id=pool.pk, name=node.name, gpu_uuids=list(node.gpu_uuids))

    def unlimited_quota(tenant_id: int, pool_id: int) -> None:
        # The bench measures provisioning: a quota no run reaches.
        services.set_tenant_quota(
            tenant_id=tenant_id, pool_id=pool_id, compute_slices_limit=10_000, memory_slices_limit=10_000, actor=root
        )

    tenants = []
    for t in range(TENANTS):
        tenant = tenant_services.create_tenant(
            name=f"Bench {t}", slug=f"bench-{t}", actor=root, auto_approve_max_compute_slices=0
        )
        unlimited_quota(tenant.pk, pool.pk)
        kube_sync.onboard_tenant(tenant_id=tenant.pk)
        tenants.append(tenant)
    core = client.CoreV1Api(admin)
    for tenant in tenants:
        ns = kube_sync.tenant_namespace(tenant)
        while not core.list_namespaced_service_account(ns, field_selector="metadata.name=default").items:
            time.sleep(0.2)
    print(f"fleet of {args.nodes} x 8 GPUs published and registered in {time.perf_counter() - started:.1f} s")

    rng = random.Random(4)  # noqa: S311 (a benchmark's profile mix, not a secret)
    profiles = rng.choices(list(MIX), weights=list(MIX.values()), k=args.requests)

    def request_all(sequence: list[str], pool_id: int) -> list[int]:
        made = []
        for i, profile in enumerate(sequence):
            allocation, _ = services.request_allocation(
                tenant_id=tenants[i % TENANTS].pk,
                pool_id=pool_id,
                profile=profile,
                count=1,
                lease_hours=4,
                purpose="bench",
                actor=root,
            )
            made.append(allocation.pk)
        return made

    from django.db import connections

    connections.close_all()
    # --one-queue: the workers route claim polls to the default queue (the ordering sessions 11-12 measured).
    worker_env = {**env, "DJANGO_SETTINGS_MODULE": "bench.one_queue"} if args.one_queue else env
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "portal",
                "worker",
                "--pool=solo",
                "--loglevel=WARNING",
                "-n",
                f"bench{w}@%h",
            ],
            env=worker_env,
            cwd=ROOT,
        )  # fmt: skip
        for w in range(args.workers)
    ]
    worker_pids = [w.pid for w in workers]
    for worker in workers:
        at_exit(worker.terminate)
    # The clock starts once the workers have done every task queued before they started (the tenants' onboarding,
    # sent when their quotas were set): else the burst's first requests wait behind them (session 13's first tenth).
    open_before = dict(
        OutboxMessage.objects.filter(done_at__isnull=True)
        .values_list("task_name")
        .annotate(n=Count("pk"))
        .values_list("task_name", "n")
    )
    waited_from = time.perf_counter()
    while OutboxMessage.objects.filter(done_at__isnull=True).exists() and time.perf_counter() - waited_from < 120:
        time.sleep(0.2)
    print(
        f"tasks queued before the workers started: {open_before or 'none'}; done "
        f"{time.perf_counter() - waited_from:.1f} s after the workers' start"
    )

    class InFlight(threading.Thread):
        """Samples what placement sees in flight (Result.in_flight) on a connection of its own."""

        def __init__(self, pending: list[int], first: float) -> None:
            super().__init__(daemon=True)
            self.pending, self.first = pending, first
            self.stop = threading.Event()
            self.samples: list[tuple[float, int, int, int]] = []

        def run(self) -> None:
            try:
                while not self.stop.wait(0.5):
                    counts = dict(
                        Allocation.objects.filter(pk__in=self.pending)
                        .values_list("status")
                        .annotate(n=Count("pk"))
                        .values_list("status", "n")
                    )
                    gpus = (
                        SlicePlacement.objects.filter(
                            allocation__pk__in=self.pending, allocation__status=Allocation.Status.PROVISIONING
                        )
                        .values("gpu")
                        .distinct()
                        .count()
                    )
                    self.samples.append(
                        (
                            time.time() - self.first,
                            counts.get(Allocation.Status.APPROVED, 0),
                            counts.get(Allocation.Status.PROVISIONING, 0),
                            gpus,
                        )
                    )
            finally:
                connections.close_all()

    def approve_and_wait(pending: list[int], rate: float) -> Result:
        """Approve one after another (at `rate` per second, or as fast as approving goes when 0), then wait
        until every request is ACTIVE or FAILED."""
        differs_before = AuditEvent.objects.filter(verb="placement_differs").count()
        cpu_before = cpu_seconds(worker_pids)
        approved_at: dict[int, float] = {}
        first = time.time()
        sampler = InFlight(pending, first)
        sampler.start()
        for n, pk in enumerate(pending):
            if rate:
                time.sleep(max(0.0, first + n / rate - time.time()))
            services.approve_allocation(allocation_id=pk, actor=root)
            approved_at[pk] = time.time()
        approving_s = time.time() - first
        deadline = time.monotonic() + args.timeout
        loads = [os.getloadavg()[0]]
        while time.monotonic() < deadline:
            loads.append(os.getloadavg()[0])
            done = Allocation.objects.filter(
                pk__in=pending, status__in=[Allocation.Status.ACTIVE, Allocation.Status.FAILED]
            )
            if done.count() == len(pending):
                break
            time.sleep(0.2)
        sampler.stop.set()
        sampler.join()
        rows = list(Allocation.objects.filter(pk__in=pending).values_list("pk", "status", "activated_at"))
        latencies = [at.timestamp() - approved_at[pk] for pk, status, at in rows if status == "active" and at]
        last = max((at.timestamp() for _, status, at in rows if status == "active" and at), default=first)
        cpu_after = cpu_seconds(worker_pids)
        steered = {
            int(pk)
            for pk in AuditEvent.objects.filter(verb="provision", object_id__in=[str(pk) for pk in pending])
            .filter(after__has_key="steer_past")
            .values_list("object_id", flat=True)
        }
        waited = sorted(
            ((pk, at.timestamp() - approved_at[pk]) for pk, status, at in rows if status == "active" and at),
            key=lambda row: -row[1],
        )
        provisioned = dict(
            AuditEvent.objects.filter(verb="provision", object_id__in=[str(pk) for pk in pending]).values_list(
                "object_id", "created_at"
            )
        )
        activated = {pk: at.timestamp() for pk, status, at in rows if status == "active" and at}
        timed = [
            (rank, provisioned[str(pk)].timestamp() - approved_at[pk], activated[pk] - provisioned[str(pk)].timestamp())
            for rank, pk in enumerate(pending, start=1)
            if pk in activated and str(pk) in provisioned
        ]
        return Result(
            stages=stages_by_order(timed),
            latencies=latencies,
            total_s=last - first,
            active=sum(1 for _, s, _ in rows if s == "active"),
            failed=sum(1 for _, s, _ in rows if s == "failed"),
            differs=AuditEvent.objects.filter(verb="placement_differs").count() - differs_before,
            approving_s=approving_s,
            cpu={k: cpu_after[k] - cpu_before[k] for k in cpu_after},
            steered=len(steered),
            load=sum(loads) / len(loads),
            slowest=[(pk, s, pk in steered) for pk, s in waited[:5]],
            in_flight=sampler.samples,
            first_ten=timed[:10],
        )

    def release_all(pending: list[int]) -> None:
        for pk in Allocation.objects.filter(pk__in=pending, status=Allocation.Status.ACTIVE).values_list(
            "pk", flat=True
        ):
            services.release_allocation(allocation_id=pk, actor=root)
        while Allocation.objects.filter(pk__in=pending, status=Allocation.Status.RELEASING).exists():
            time.sleep(0.5)
        while kube.list_claims(kube.LABEL_ALLOCATION):
            time.sleep(0.5)

    # 1. Burst: every request approved back to back.
    burst_ids = request_all(profiles, pool.pk)
    burst = approve_and_wait(burst_ids, rate=0)
    print(
        f"burst: {burst.active} active, {burst.failed} failed in {burst.total_s:.1f} s, {burst.steered} steered, "
        f"load average {burst.load:.1f}"
    )
    print("burst, slowest (allocation, s, steered):", burst.slowest)
    print("burst by approval order (ranks: approval -> provisioned, provisioned -> active, in all; mean s):")
    for first_rank, last_rank, before, after, total in burst.stages:
        print(f"  {first_rank:4d}-{last_rank:<4d} {before:7.1f} {after:7.1f} {total:7.1f}")
    print(in_flight_summary(burst.in_flight))
    print("burst, the first 10 approved (approval -> provisioned s):", [round(t[1], 1) for t in burst.first_ten])
    # Only what the scheduler allocated (ACTIVE) counts for the layout.
    ours_layout: dict[tuple[str, int], list[Instance]] = {}
    active_rows = SlicePlacement.objects.filter(
        allocation__pk__in=burst_ids, allocation__status=Allocation.Status.ACTIVE
    )
    for sp in active_rows.select_related("gpu__node"):
        ours_layout.setdefault((sp.gpu.node.name, sp.gpu.index), []).append(
            Instance(sp.profile, sp.start, owner="held")
        )
    fleet = layout_fleet(ours_layout)
    ours_fits = fits_now(fleet)
    ours_whole = sum(1 for n in fleet.nodes for g in n.gpus if not g.instances)
    burst_layouts = layout_counts(ours_layout)
    print(f"burst, GPUs in use: {len(ours_layout)}; their layouts (profiles by start, count of GPUs):")
    for layout_name, n in burst_layouts.most_common(12):
        print(f"  {n:4d}  {layout_name}")
    print(f"  {sum(burst_layouts.values()) - sum(n for _, n in burst_layouts.most_common(12)):4d}  others")
    release_all(burst_ids)

    # 2. Paced: the same sequence approved at steady rates.
    paced: dict[float, Result] = {}
    for rate in args.rates:
        paced_ids = request_all(profiles, pool.pk)
        paced[rate] = approve_and_wait(paced_ids, rate=rate)
        print(f"paced at {rate:g}/s: {paced[rate].active} active, {paced[rate].failed} failed")
        release_all(paced_ids)

    # 3. Trickle on a small pool of its own, one request at a time, until 130 % of its compute was offered; once
    # per seed of the sequence, each on a pool and nodes of its own (a pool's demand learner starts empty).
    def run_trickle(seed: int, prefix: str) -> Trickle:
        fill_rng = random.Random(seed)  # noqa: S311
        fill_sequence: list[str] = []
        while sum(model.profile(p).compute_slices for p in fill_sequence) < 1.3 * args.fill_nodes * 8 * 7:
            fill_sequence += fill_rng.choices(list(MIX), weights=list(MIX.values()))
        fill_pool = services.create_node_pool(name=f"H100 fill {prefix}", slug=prefix, gpu_model=GPU_MODEL, actor=root)
        for n in range(args.fill_nodes):
            name = f"{prefix}-{n:03d}"
            node = fake_fleet.publish_node(admin, model, name, 8)
            client.CoreV1Api(admin).patch_node(
                name, body={"metadata": {"labels": {FILL_LABEL: "true", FILL_SEED_LABEL: str(seed)}}}
            )
            kube_sync.register_cluster_node(pool_id=fill_pool.pk, name=node.name, gpu_uuids=list(node.gpu_uuids))
        for tenant in tenants:
            unlimited_quota(tenant.pk, fill_pool.pk)
        fill_ids: list[int] = []
        first_refusal: int | None = None
        trickle_started = time.perf_counter()
        for n, profile in enumerate(fill_sequence):
            [pk] = request_all([profile], fill_pool.pk)
            fill_ids.append(pk)
            services.approve_allocation(allocation_id=pk, actor=root)
            while Allocation.objects.filter(
                pk=pk, status__in=[Allocation.Status.APPROVED, Allocation.Status.PROVISIONING]
            ).exists():
                time.sleep(0.02)
            if Allocation.objects.get(pk=pk).status != Allocation.Status.ACTIVE:
                first_refusal = n if first_refusal is None else first_refusal
                services.release_allocation(allocation_id=pk, actor=root)  # QUEUED -> WITHDRAWN: none departs here
        trickle_s = time.perf_counter() - trickle_started
        ours_admitted = first_refusal if first_refusal is not None else len(fill_sequence)
        # What the cluster allocated, read from the claims (not our records).
        fill_nodes = [f"{prefix}-{n:03d}" for n in range(args.fill_nodes)]
        profile_of = dict(Allocation.objects.filter(pk__in=fill_ids).values_list("uuid", "profile"))
        trickle_layout: dict[tuple[str, int], list[Instance]] = {}
        for c in kube.list_claims(kube.LABEL_ALLOCATION):
            if c.allocation is None or c.allocation.node_name not in fill_nodes:
                continue
            for d in c.allocation.devices:
                where = cluster_placements.placement_of(d.device)
                allocation_uuid = uuid.UUID(c.labels[kube.LABEL_ALLOCATION])
                if where and allocation_uuid in profile_of:
                    trickle_layout.setdefault((c.allocation.node_name, where[0]), []).append(
                        Instance(profile_of[allocation_uuid], where[1], owner=str(allocation_uuid))
                    )
        trickle_active = Allocation.objects.filter(pk__in=fill_ids, status=Allocation.Status.ACTIVE).count()
        trickle = steering_offline.served(
            steering_offline.layout_fleet(fill_nodes, model, trickle_layout), trickle_active, first_refusal
        )
        trickle_steered = (
            AuditEvent.objects.filter(verb="provision", object_id__in=[str(pk) for pk in fill_ids])
            .filter(after__has_key="steer_past")
            .count()
        )
        offline = {
            policy: steering_offline.fill(fill_sequence, fill_nodes, model, policy) for policy in ("first-fit", "ours")
        }
        offline_gain = offline["ours"].compute - offline["first-fit"].compute
        reached = (trickle.compute - offline["first-fit"].compute) / offline_gain if offline_gain else None
        print(
            f"trickle, seed {seed}: {trickle_active} active, {trickle.compute} compute slices ({trickle_steered} "
            f"steered) in {trickle_s:.1f} s; offline first-fit {offline['first-fit'].compute}, "
            f"ours {offline['ours'].compute}"
        )
        release_all(fill_ids)
        return Trickle(seed, fill_sequence, trickle, ours_admitted, trickle_steered, trickle_s, offline, reached)

    trickles = [
        run_trickle(seed, "h100-fill" if n == 0 else f"h100-fill{seed}") for n, seed in enumerate(args.fill_seeds)
    ]
    # The provision section and the scheduler-alone comparison read the first seed's.
    first_trickle = trickles[0]
    fill_sequence, trickle, ours_admitted = first_trickle.sequence, first_trickle.served, first_trickle.admitted
    trickle_steered, trickle_s, offline, reached = (
        first_trickle.steered,
        first_trickle.seconds,
        first_trickle.offline,
        first_trickle.reached,
    )
    offline_gain = offline["ours"].compute - offline["first-fit"].compute
    for w in workers:
        w.terminate()
    for w in workers:
        w.wait(timeout=60)

    # 4. The scheduler's own choice: the burst sequence as claims that pin only the profile (no GPU, no node).
    def scheduler_alone() -> Scheduled:
        """The burst sequence, then the trickle sequence until the first refusal, as claims that pin only the
        profile: the scheduler's own choice."""
        spec = kube.TenantSpec(
            namespace="bench-scheduler", tenant_slug="bench", member_group="bench", max_devices=100_000
        )
        kube.ensure_tenant_namespace(spec)
        while not core.list_namespaced_service_account("bench-scheduler", field_selector="metadata.name=default").items:
            time.sleep(0.2)
        time.sleep(2)  # the quota controller's first count

        def scheduler_claim(name: str, profile: str, node_selector: dict[str, str] | None) -> None:
            claim = kube.ClaimSpec(
                namespace=spec.namespace,
                name=name,
                allocation_uuid=name,
                tenant_slug="bench",
                requests=(kube.DeviceRequestSpec(name="mig-0", profile=profile, gpu_uuid=""),),
            )
            kube.apply_resource_claim(claim)
            body = kube.holder_pod_body(
                kube.HolderPodSpec(
                    namespace=spec.namespace,
                    name=name,
                    claim_names=(name,),
                    node_name="",
                    allocation_uuid=name,
                    tenant_slug="bench",
                )
            )
            if node_selector:
                body["spec"]["nodeSelector"] = node_selector
            else:
                body["spec"]["affinity"] = {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": FILL_LABEL, "operator": "DoesNotExist"}]}
                            ]
                        }
                    }
                }
            client.CoreV1Api(admin).patch_namespaced_pod(
                name, spec.namespace, body=body, field_manager="bench", force=True, _content_type=kube.APPLY
            )

        applied: dict[str, float] = {}
        sched_cpu_before = cpu_seconds([])
        sched_first = time.time()
        for i, profile in enumerate(profiles):
            name = f"sched-{i:04d}"
            scheduler_claim(name, profile, None)
            applied[name] = time.time()
        allocated: dict[str, float] = {}
        claims: list[kube.ClaimState] = []
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline and len(allocated) < len(profiles):
            claims = kube.list_claims(kube.LABEL_TENANT + "=bench")
            now = time.time()
            for c in claims:
                if c.allocation is not None and c.name not in allocated:
                    allocated[c.name] = now
            time.sleep(0.5)
        sched_cpu_after = cpu_seconds([])
        sched_cpu = {k: sched_cpu_after[k] - sched_cpu_before[k] for k in sched_cpu_after}
        layout: dict[tuple[str, int], list[Instance]] = {}
        for c in claims:
            if c.allocation is None or not c.name.startswith("sched-"):
                continue
            for d in c.allocation.devices:
                where = cluster_placements.placement_of(d.device)
                if where:
                    profile = profiles[int(c.name.removeprefix("sched-"))]
                    layout.setdefault((c.allocation.node_name, where[0]), []).append(
                        Instance(profile, where[1], owner="held")
                    )
        sched_fleet = layout_fleet(layout)
        sched_fits = fits_now(sched_fleet)
        sched_whole = sum(1 for n in sched_fleet.nodes for g in n.gpus if not g.instances)
        sched_lat = [allocated[n] - applied[n] for n in allocated]
        sched_total = (max(allocated.values()) - sched_first) if allocated else 0.0

        # 5. The scheduler's own choice on the fill nodes, one claim at a time until one cannot be allocated.
        sched_admitted = 0
        for i, profile in enumerate(fill_sequence):
            name = f"fill-{i:04d}"
            scheduler_claim(name, profile, {FILL_LABEL: "true", FILL_SEED_LABEL: str(first_trickle.seed)})
            outcome = wait_allocated_or_unschedulable(admin, spec.namespace, name)
            if outcome != "allocated":
                break
            sched_admitted += 1
        return Scheduled(sched_lat, sched_total, len(allocated), sched_cpu, sched_whole, sched_fits, sched_admitted)

    sched = scheduler_alone() if not args.no_scheduler else None

    portal_choice = {
        "off": "steering off: our GPU, the scheduler's first-fit slot",
        "adaptive": "steering adaptive: our GPU and slot while requests come one at a time, else first fit",
        "always": "steering always: our GPU and slot, the scheduler steered with DeviceTaintRules",
    }[args.steer]

    def ms(values: list[float], q: float) -> str:
        return f"{percentile(values, q) * 1000:.0f} ms" if values else "-"

    def cpu_row(label: str, cpu: dict[str, float], n: int) -> str:
        return f"| {label} | " + " | ".join(f"{cpu[k] * 1000 / max(n, 1):.0f}" for k in CPU_COLUMNS) + " |"

    def fits_row(label: str, whole: int, fits: dict[str, int]) -> str:
        return f"| {label} | {whole} | " + " | ".join(str(fits.get(p, 0)) for p in MIX) + " |"

    share = "-" if reached is None else f"{reached * 100:.0f} %"
    body = [
        f"Command: `{command}`",
        "",
        f"{args.requests} single-slice requests (mix {', '.join(f'{p} {w}%' for p, w in MIX.items())}) on "
        f"{args.nodes} fake nodes x 8 H100 80GB, {args.workers} Celery workers (solo pool), Redis, PostgreSQL and "
        "the local kube-apiserver, kube-scheduler and kube-controller-manager 1.37.2 all on this machine "
        f"({os.cpu_count()} cores); {portal_choice}.",
        "",
        "| | p50 | p99 | total | active | failed | scheduler's slot differs from the plan |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        f"| Portal, burst: all approved back to back ({burst.approving_s:.1f} s), approval -> allocation recorded | "
        f"{ms(burst.latencies, 0.5)} | {ms(burst.latencies, 0.99)} | {burst.total_s:.1f} s | {burst.active} | "
        f"{burst.failed} | {burst.differs} |",
        *(
            f"| Portal, paced: approved at {rate:g}/s, approval -> allocation recorded | "
            f"{ms(r.latencies, 0.5)} | {ms(r.latencies, 0.99)} | {r.total_s:.1f} s | {r.active} | "
            f"{r.failed} | {r.differs} |"
            for rate, r in paced.items()
        ),
        *(
            [
                "| Scheduler alone: claim + pod applied back to back -> seen allocated (profile only; 0.5 s polling) | "
                f"{ms(sched.latencies, 0.5)} | {ms(sched.latencies, 0.99)} | {sched.total_s:.1f} s | "
                f"{sched.allocated} | {len(profiles) - sched.allocated} | |"
            ]
            if sched
            else []
        ),
        "",
        "Target: p50 < 1 s, p99 < 3 s.",
        "",
        "CPU milliseconds per request, by process:",
        "",
        "| | " + " | ".join(CPU_COLUMNS) + " |",
        "| --- | " + " | ".join("---" for _ in CPU_COLUMNS) + " |",
        cpu_row("Portal, burst", burst.cpu, len(profiles)),
        *(cpu_row(f"Portal, paced at {rate:g}/s", r.cpu, len(profiles)) for rate, r in paced.items()),
        *([cpu_row("Scheduler alone", sched.cpu, len(profiles))] if sched else []),
        "",
        "What is left after the burst (placement engine's count, each profile alone):",
        "",
        "| | whole GPUs free | " + " | ".join(f"{p} fit" for p in MIX) + " |",
        "| --- | --- | " + " | ".join("---" for _ in MIX) + " |",
        fits_row("Portal", ours_whole, ours_fits),
        *([fits_row("Scheduler's choice", sched.whole, sched.fits)] if sched else []),
        "",
        f"Trickle: {len(fill_sequence)} requests of the same mix (130 % of the compute of {args.fill_nodes} nodes x 8 "
        "H100 of their own), one at a time, each allocated or refused (and withdrawn) before the next; what the "
        f"cluster allocated, against the engine alone placing the same requests offline ({trickle_s:.0f} s):",
        "",
        "| | compute slices served | requests admitted | before the first refusal | whole GPUs free | steered |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| Portal on the cluster | {trickle.compute} | {trickle.admitted} | {ours_admitted} | {trickle.whole_gpus} | "
        f"{trickle_steered} |",
        *(
            f"| Offline {policy} | {r.compute} | {r.admitted} | "
            f"{r.first_refusal if r.first_refusal is not None else r.admitted} | {r.whole_gpus} | |"
            for policy, r in offline.items()
        ),
        *([f"| Scheduler alone (profile only), until the first refusal | | | {sched.admitted} | | |"] if sched else []),
        "",
        f"Share of `ours`' offline gain over first-fit that reaches the cluster: {share} "
        f"({trickle.compute - offline['first-fit'].compute} of {offline_gain} compute slices). Target: >= 80 %.",
    ]
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "steer": args.steer,
                    "burst": {"active": burst.active, "failed": burst.failed, "whole": ours_whole, "fits": ours_fits},
                    "burst_s": burst.total_s,
                    "burst_p50_s": percentile(burst.latencies, 0.5) if burst.latencies else None,
                    "burst_p99_s": percentile(burst.latencies, 0.99) if burst.latencies else None,
                    "burst_steered": burst.steered,
                    "burst_load": burst.load,
                    "burst_slowest": burst.slowest,
                    "burst_stages": burst.stages,
                    "burst_in_flight": burst.in_flight,
                    "burst_layouts": dict(burst_layouts),
                    "one_queue": args.one_queue,
                    "burst_cpu_ms": {k: v * 1000 / max(len(profiles), 1) for k, v in burst.cpu.items()},
                    "trickle": {
                        "requests": len(fill_sequence),
                        "compute": trickle.compute,
                        "admitted": trickle.admitted,
                        "first_refusal": ours_admitted,
                        "whole": trickle.whole_gpus,
                        "steered": trickle_steered,
                        "seconds": trickle_s,
                    },
                    "offline": {p: {"compute": r.compute, "admitted": r.admitted} for p, r in offline.items()},
                    "reached": reached,
                    "trickles": [t.figures() for t in trickles],
                    "scheduler": {"whole": sched.whole, "fits": sched.fits, "admitted": sched.admitted}
                    if sched
                    else None,
                }
            )
        )
    text = "\n".join(body)
    print(text)
    if not args.no_write:
        from bench.report import write_section

        print(f"wrote {write_section('provision', text, title='Provisioning on Kubernetes')}")
    return 0


def wait_allocated_or_unschedulable(admin: Any, namespace: str, name: str, timeout: float = 60.0) -> str:
    """ "allocated" once the claim has an allocation, "unschedulable" once the scheduler says so for its pod."""
    from kubernetes import client

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        claim = client.ResourceV1Api(admin).read_namespaced_resource_claim(name, namespace)
        if claim.status is not None and claim.status.allocation is not None:
            return "allocated"
        pod = client.CoreV1Api(admin).read_namespaced_pod(name, namespace)
        for cond in (pod.status.conditions if pod.status else None) or []:
            if cond.type == "PodScheduled" and cond.status == "False" and cond.reason == "Unschedulable":
                return "unschedulable"
        time.sleep(0.05)
    return "timeout"


if __name__ == "__main__":
    sys.exit(main())
