#!/usr/bin/env python
"""Queueing and fair sharing benchmark (issue 15): bursty tenants replayed on a simulated MIG pool.

Usage::

    python bench/fairness.py [--days N] [--seeds N] [--quick] [--out PATH]

Three or more tenants send bursts of requests (time compressed: a week of demand replays in seconds) to one
pool of H100s. Every tenant stays within its quota (its guarantee): a request past it waits on the tenant's side
until its own requests end, in every policy alike, since borrowing is not built yet. Three policies:

- ``fail``: today's behaviour before the queue. A request that does not fit the free layout ends FAILED, its quota
  given back; its owner tries again every RETRY_MIN minutes.
- ``fifo``: strict quotas with one FIFO queue per pool. Admission stops at the first request that does not fit
  (head-of-line blocking, Kueue's StrictFIFO).
- ``ours``: the portal's queue: fair order across tenants with decayed usage (allocations/queue_order.py, the
  module the portal runs), priority then FIFO inside a tenant, requests that do not fit skipped (backfill), and
  past the starvation bound the node where the future free layout fits the head-of-line request soonest
  (allocations/queue_eta.py) is reserved for it.

All policies place with the same placement engine and policy ("ours", allocations/mig). Figures: utilisation
(compute slices held over time, of the pool's), per-tenant wait p50/p99 (arrival to start, and submission to
start: the part the pool causes, not the tenant's own quota), and Jain's fairness index over the tenants'
service ratios (mean of run / (wait + run) per tenant). Results go to the "fairness" section of
docs/benchmarks.md (or --out FILE) and to stdout.
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, not installed

from allocations.mig.catalog import GpuModel, load_catalog  # noqa: E402
from allocations.mig.demand import DemandMix  # noqa: E402
from allocations.mig.engine import PlacementEngine, empty_fleet  # noqa: E402
from allocations.mig.fleet import PlacementDecision, PlacementRequest  # noqa: E402
from allocations.queue_eta import Lease, QueuedAsk, estimate_starts  # noqa: E402
from allocations.queue_order import Waiting, fair_order  # noqa: E402
from bench.report import command_line, write_section  # noqa: E402

MODEL = "NVIDIA H100 80GB HBM3"
NODES, GPUS_PER_NODE = 4, 2
RETRY_MIN = 15
HALF_LIFE_S = 4 * 3600  # FATIA_QUEUE_HALF_LIFE_S default
RESERVE_AFTER_S = 3600  # FATIA_QUEUE_RESERVE_AFTER_S default
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class TenantSpec:
    name: str
    quota: int  # compute slices (its guarantee; the quotas add up to the pool)
    mix: dict[str, float]  # profile -> weight
    burst_gap_h: float  # mean hours between bursts
    burst_size: tuple[int, int]  # requests per burst, uniform
    run_h: float  # mean run time, hours


TENANTS = (
    TenantSpec("vision", 21, {"1g.10gb": 4, "2g.20gb": 3, "3g.40gb": 2}, 4.0, (4, 12), 3.0),
    TenantSpec("nlp", 21, {"3g.40gb": 2, "4g.40gb": 2, "7g.80gb": 1}, 6.0, (3, 8), 5.0),
    TenantSpec("speech", 14, {"1g.10gb": 3, "2g.20gb": 2, "4g.40gb": 1}, 5.0, (3, 10), 2.0),
)
# Quotas as Fatia sets them are limits, not guarantees: admins often hand out more than the pool holds. The
# benchmark runs the quotas as listed (they add up to the pool: guarantees) and scaled by this factor.
OVERSUBSCRIBED = 1.5


@dataclass
class Req:
    pk: int
    tenant: int
    profile: str
    compute: int
    arrive: float
    run_s: float
    submitted: float = math.nan
    queued_at: float = math.nan
    start: float = math.nan
    retry_at: float = 0.0
    where: list[tuple[str, int, int]] = field(default_factory=list)


def demand(seed: int, days: float, model: GpuModel) -> list[Req]:
    rng = random.Random(seed)
    reqs: list[Req] = []
    horizon = days * 86400
    for t_index, spec in enumerate(TENANTS):
        t = rng.expovariate(1 / (spec.burst_gap_h * 3600))
        profiles, weights = zip(*spec.mix.items(), strict=True)
        while t < horizon:
            at = t
            for _ in range(rng.randint(*spec.burst_size)):
                profile = rng.choices(profiles, weights)[0]
                run = max(600.0, rng.expovariate(1 / (spec.run_h * 3600)))
                reqs.append(Req(0, t_index, profile, model.profile(profile).compute_slices, at, run))
                at += rng.expovariate(1 / 600)
            t += rng.expovariate(1 / (spec.burst_gap_h * 3600))
    reqs.sort(key=lambda r: r.arrive)
    for pk, r in enumerate(reqs, start=1):
        r.pk = pk
    return reqs


@dataclass
class Result:
    scale: float
    policy: str
    utilisation: float
    waits: dict[int, list[float]]  # tenant -> arrival-to-start, seconds
    pool_waits: dict[int, list[float]]  # tenant -> submission-to-start (the pool's part)
    failures: int
    jain: float
    unstarted: int


class Sim:
    def __init__(self, policy: str, model: GpuModel, reqs: list[Req], days: float, scale: float) -> None:
        self.policy = policy
        self.scale = scale
        self.quota = [round(t.quota * scale) for t in TENANTS]
        self.model = model
        self.reqs = reqs
        self.horizon = days * 86400
        self.engine = PlacementEngine(empty_fleet(model, NODES, GPUS_PER_NODE), "ours", DemandMix())
        self.capacity = NODES * GPUS_PER_NODE * 7
        self.backlog: list[deque[Req]] = [deque() for _ in TENANTS]
        self.charged = [0] * len(TENANTS)  # held + queued compute (quota use)
        self.held = [0] * len(TENANTS)  # held compute only (usage for fairness and utilisation)
        self.peak_held = [0] * len(TENANTS)
        self.usage = [0.0] * len(TENANTS)  # decayed usage, at self.usage_at
        self.usage_at = 0.0
        self.queue: list[Req] = []
        self.running: dict[int, Req] = {}
        self.events: list[tuple[float, int, str, int]] = []
        self.seq = 0
        self.busy_area = 0.0
        self.last_t = 0.0
        self.failures = 0

    def push(self, t: float, kind: str, pk: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, pk))

    def advance(self, t: float) -> None:
        """Integrate utilisation and decay usage up to t (the held counts were constant since the last event)."""
        dt = t - self.last_t
        self.busy_area += sum(self.held) * dt
        keep = 2 ** (-dt / HALF_LIFE_S)
        self.usage = [u * keep + h * (1 - keep) for u, h in zip(self.usage, self.held, strict=True)]
        self.last_t = t

    def place(self, r: Req, t: float, avoid: str | None = None) -> bool:
        decision = self.engine.place(PlacementRequest(r.profile), str(r.pk))
        if decision is None:
            return False
        if avoid is not None and any(s.node == avoid for s in decision.slots):
            self.undo(decision)
            return False
        r.where = [(s.node, s.gpu_index, s.start) for s in decision.slots]
        r.start = t
        self.held[r.tenant] += r.compute
        self.peak_held[r.tenant] = max(self.peak_held[r.tenant], self.held[r.tenant])
        self.running[r.pk] = r
        self.push(t + r.run_s, "end", r.pk)
        return True

    def undo(self, decision: PlacementDecision) -> None:
        for s in decision.slots:
            self.engine.release(s.node, s.gpu_index, s.start)

    def submit(self, t: float) -> None:
        """Each tenant sends the head of its backlog while its quota allows (and, for `fail`, its retry is due)."""
        for tenant, quota in enumerate(self.quota):
            backlog = self.backlog[tenant]
            while backlog and self.charged[tenant] + backlog[0].compute <= quota and backlog[0].retry_at <= t:
                r = backlog.popleft()
                if math.isnan(r.submitted):
                    r.submitted = t
                self.charged[tenant] += r.compute
                if self.policy == "fail":
                    if not self.place(r, t):
                        self.failures += 1
                        self.charged[tenant] -= r.compute
                        r.retry_at = t + RETRY_MIN * 60
                        backlog.appendleft(r)
                        self.push(r.retry_at, "retry", r.pk)
                        break
                else:
                    r.queued_at = t
                    self.queue.append(r)

    def admit(self, t: float) -> None:
        if self.policy == "fifo":
            while self.queue and self.place(self.queue[0], t):
                self.queue.pop(0)
        elif self.policy == "ours":
            self.admit_fair(t)

    def admit_fair(self, t: float) -> None:
        now = EPOCH + timedelta(seconds=t)
        order = fair_order(
            [Waiting(r.pk, r.tenant, 0, EPOCH + timedelta(seconds=r.queued_at), r.compute) for r in self.queue],
            usage=dict(enumerate(self.usage)),
            quota=dict(enumerate(self.quota)),
        )
        by_pk = {r.pk: r for r in self.queue}
        # As the portal: the first request in order past the bound has its node reserved while it does not fit,
        # and no other request is placed there (allocations/queue_reservation.py).
        head = next(
            (by_pk[w.allocation_id] for w in order if t - by_pk[w.allocation_id].queued_at >= RESERVE_AFTER_S), None
        )
        reserved: str | None = None
        admitted: set[int] = set()
        if head is not None:
            if self.place(head, t):
                admitted.add(head.pk)
            else:
                reserved = self.reservation(head, now)
        for w in order:
            r = by_pk[w.allocation_id]
            if r.pk not in admitted and r is not head and self.place(r, t, avoid=reserved):
                admitted.add(r.pk)
        self.queue = [r for r in self.queue if r.pk not in admitted]

    def reservation(self, r: Req, now: datetime) -> str | None:
        leases = [Lease(str(pk), EPOCH + timedelta(seconds=x.start + x.run_s)) for pk, x in self.running.items()]
        ask = QueuedAsk(r.pk, r.profile, 1, max(1, round(r.run_s / 3600)))
        found = estimate_starts(self.engine.snapshot(), leases=leases, queue=[ask], now=now, pool="default")
        return found[r.pk].node if r.pk in found else None

    def run(self) -> Result:
        for r in self.reqs:
            self.push(r.arrive, "arrive", r.pk)
        by_pk = {r.pk: r for r in self.reqs}
        while self.events and self.events[0][0] <= self.horizon:
            t, _, kind, pk = heapq.heappop(self.events)
            self.advance(t)
            r = by_pk[pk]
            if kind == "arrive":
                self.backlog[r.tenant].append(r)
            elif kind == "end":
                del self.running[pk]
                for node, gpu, start in r.where:
                    self.engine.release(node, gpu, start)
                self.held[r.tenant] -= r.compute
                self.charged[r.tenant] -= r.compute
            self.submit(t)
            self.admit(t)
            self.submit(t)  # quota an admission did not change, but a FAILED retry or an end may have
        self.advance(self.horizon)
        waits: dict[int, list[float]] = {i: [] for i in range(len(TENANTS))}
        pool_waits: dict[int, list[float]] = {i: [] for i in range(len(TENANTS))}
        ratios: dict[int, list[float]] = {i: [] for i in range(len(TENANTS))}
        unstarted = 0
        for r in self.reqs:
            if math.isnan(r.start):
                unstarted += 1
                continue
            waits[r.tenant].append(r.start - r.arrive)
            pool_waits[r.tenant].append(r.start - r.submitted)
            ratios[r.tenant].append(r.run_s / (r.start - r.arrive + r.run_s))
        xs = [statistics.fmean(v) for v in ratios.values() if v]
        jain = sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)) if xs else 0.0
        return Result(
            self.scale,
            self.policy,
            self.busy_area / (self.capacity * self.horizon),
            waits,
            pool_waits,
            self.failures,
            jain,
            unstarted,
        )


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f}"


def table(results: list[Result], seeds: int) -> list[str]:
    lines = [
        "| Quotas | Policy | Utilisation | Jain | Failed tries | "
        + " | ".join(f"{t.name} wait p50 / p99 (min) | {t.name} pool wait p99 (min)" for t in TENANTS)
        + " |",
        "|---" * (5 + 2 * len(TENANTS)) + "|",
    ]
    for scale in sorted({r.scale for r in results}):
        for policy in POLICIES:
            mine = [r for r in results if r.policy == policy and r.scale == scale]
            waits = {i: [w for r in mine for w in r.waits[i]] for i in range(len(TENANTS))}
            pool = {i: [w for r in mine for w in r.pool_waits[i]] for i in range(len(TENANTS))}
            cells = [
                f"x {scale:g}",
                policy,
                f"{100 * statistics.fmean(r.utilisation for r in mine):.1f} %",
                f"{statistics.fmean(r.jain for r in mine):.3f}",
                f"{sum(r.failures for r in mine) / seeds:.0f}",
            ]
            for i in range(len(TENANTS)):
                cells.append(f"{minutes(pct(waits[i], 0.5))} / {minutes(pct(waits[i], 0.99))}")
                cells.append(minutes(pct(pool[i], 0.99)))
            lines.append("| " + " | ".join(cells) + " |")
    return lines


POLICIES = ("fail", "fifo", "ours")


def mean_of(results: list[Result], policy: str, scale: float, attr: str) -> float:
    return statistics.fmean(getattr(r, attr) for r in results if r.policy == policy and r.scale == scale)


def worst_pool_p99(results: list[Result], policy: str, scale: float) -> float:
    return max(
        pct([w for r in results if r.policy == policy and r.scale == scale for w in r.pool_waits[i]], 0.99)
        for i in range(len(TENANTS))
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=float, default=7.0, help="simulated days of demand per seed")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2 days, 2 seeds")
    ap.add_argument("--out", type=Path, default=None, help="write a separate file instead of docs/benchmarks.md")
    args = ap.parse_args(argv)
    days, seeds = (2.0, 2) if args.quick else (args.days, args.seeds)
    model = load_catalog().model(MODEL)
    results: list[Result] = []
    started = time.perf_counter()
    offered = 0.0
    for seed in range(seeds):
        reqs = demand(seed, days, model)
        offered += sum(r.compute * r.run_s for r in reqs) / (NODES * GPUS_PER_NODE * 7 * days * 86400)
        for scale in (1.0, OVERSUBSCRIBED):
            for policy in POLICIES:
                fresh = [Req(**{**r.__dict__, "where": []}) for r in reqs]
                results.append(Sim(policy, model, fresh, days, scale).run())
    elapsed = time.perf_counter() - started
    util = {(p, s): mean_of(results, p, s, "utilisation") for p in POLICIES for s in (1.0, OVERSUBSCRIBED)}
    gain = max(100 * (util[("ours", s)] - util[("fifo", s)]) for s in (1.0, OVERSUBSCRIBED))
    body = "\n".join(
        [
            f"Command: `{command_line(argv if argv is not None else sys.argv)}`",
            "",
            f"{NODES} nodes x {GPUS_PER_NODE} {MODEL}, {NODES * GPUS_PER_NODE * 7} compute slices; tenants "
            + ", ".join(f"{t.name} (quota {t.quota}, bursts every {t.burst_gap_h:g} h)" for t in TENANTS)
            + f"; {days:g} simulated days x {seeds} seeds, offered load {100 * offered / seeds:.0f} % of the pool "
            f"(all runs replayed in {elapsed:.1f} s). Quotas x 1: they add up to the pool (guarantees); "
            f"x {OVERSUBSCRIBED:g}: handed out past it, as Fatia's quota limits allow. Half-life "
            f"{HALF_LIFE_S / 3600:g} h, starvation bound {RESERVE_AFTER_S / 60:.0f} min, a failed request retried "
            f"every {RETRY_MIN} min.",
            "",
            *table(results, seeds),
            "",
            "Wait: arrival to start, including the time a request waits for its own tenant's quota (the same rule "
            "in every policy: no borrowing). Pool wait: submission (within quota) to start, what the pool's layout "
            "and the order cause. Jain: over the tenants' mean run / (wait + run), 1 = equal.",
            "",
            "Against issue 15's targets:",
            f"- Utilisation at least 10 points above strict quotas with a FIFO queue: at best {gain:+.1f} points "
            "(ours against fifo, same quotas). **Not met, and not reachable without borrowing**: every policy here "
            "keeps each tenant within its own quota, so quota left idle stays idle; what the queue adds over FIFO "
            "is what backfill recovers from head-of-line blocking. Lending idle quota (cohorts, a later session) is "
            "what the target needs.",
            f"- No tenant within its guarantee waits longer than the reclaim grace plus one provisioning time: with "
            f"quotas as guarantees (x 1) the worst per-tenant pool-wait p99 with ours is "
            f"{minutes(worst_pool_p99(results, 'ours', 1.0))} min (fifo "
            f"{minutes(worst_pool_p99(results, 'fifo', 1.0))}, fail-and-retry "
            f"{minutes(worst_pool_p99(results, 'fail', 1.0))}). The bound is about reclaiming borrowed slices "
            "(a later session); without borrowing a request within its guarantee waits only for fragmentation, "
            "which the queue turns from repeated failures into one wait.",
        ]
    )
    print(body)
    if args.out is not None:
        args.out.write_text(body + "\n")
    else:
        write_section("fairness", body, title="Queueing and fair sharing (issue 15)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
