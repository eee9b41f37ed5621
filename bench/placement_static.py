#!/usr/bin/env python
"""Static MIG in agent mode against DynamicMIG first fit, and what pre-shaping saves (issue 12).

Usage::

    python bench/placement.py --static [--quick] [--seeds N] [--out PATH]

Static agent mode: every GPU starts carved as the GPU Operator's `all-balanced` config (free instances). A
request takes a free instance of its profile when one exists (no reconfiguration); otherwise our policy
(`ours`) places it in empty space, or the reconfiguration planner (`allocations/mig/reconfig.py`) destroys the
fewest free instances on the GPU where that costs least. Either counts as one reconfiguration (the agent
creates or destroys instances, then the DRA plugin restarts). A release keeps its instance as a free one.
DynamicMIG first fit: the driver creates the instance at the first free slot of the first GPU that fits and
destroys it on release (no reconfiguration to count).

1. Fill-until-full on the request sequences of `bench/placement.py` (same seeds and mixes, plus three mixes the
   policy was never tuned on): compute slices served, share of the first-fit -> offline-optimum gap closed
   (distribution over seeds), reconfigurations per 100 requests.
2. Online Poisson arrivals and departures: reconfigurations per 100 requests on the request path, with
   pre-shaping off and on (pre-shaping runs in every gap between arrivals longer than twice the mean gap, on
   the demand the pool has seen; its own GPU reconfigurations are counted apart).
"""

from __future__ import annotations

import itertools
import random
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from allocations.mig.catalog import GpuModel
from allocations.mig.demand import DemandLearner, DemandMix
from allocations.mig.engine import PlacementEngine, empty_fleet
from allocations.mig.fleet import Instance, PlacementRequest
from allocations.mig.layout import is_valid_layout
from allocations.mig.migparted import find_packing
from allocations.mig.offline import offline_optimum
from allocations.mig.preshape import plan_preshape
from allocations.mig.reconfig import ReconfigurationPlan, plan_reconfiguration
from bench.placement import Pod, fill_requests, profile_of, synthetic_online
from bench.replay_events import DEPARTURE, replay_events

# Mixes the placement policy's defaults were never tuned on (the SYNTHETIC ones of bench/placement.py were).
UNTUNED = {
    "untuned-1g-heavy": {"1g": 0.70, "2g": 0.10, "3g": 0.10, "7g": 0.10},
    "untuned-bimodal": {"1g": 0.50, "7g": 0.50},
    "untuned-uniform": {"1g": 1.0, "1g.2x": 1.0, "2g": 1.0, "3g": 1.0, "4g": 1.0, "7g": 1.0},
}
# The GPU Operator's generated `all-balanced` config on an H100/H200-class GPU (dra-mig.md §4).
BALANCED = {"1g": 2, "2g": 1, "3g": 1}


@dataclass
class StaticRun:
    requests: int = 0
    admitted: int = 0
    served: int = 0  # compute slices
    reused: int = 0  # served by a free instance: no reconfiguration
    reconfigurations: int = 0  # on the request path
    operations: int = 0
    preshape_reconfigurations: int = 0  # GPUs reshaped in quiet periods
    preshape_operations: int = 0
    where: dict[str, tuple[str, int, int]] = field(default_factory=dict)


class StaticFleet:
    """A fleet in static agent mode, on the placement engine (free instances are the engine's free codes)."""

    def __init__(self, model: GpuModel, gpus: int) -> None:
        per_node = min(8, gpus)
        fleet = empty_fleet(model, gpus // per_node, per_node)
        carve = find_packing(model, {profile_of(model, s): n for s, n in BALANCED.items()}) or []
        for node in fleet.nodes:
            for gpu in node.gpus:
                gpu.instances = [Instance(p, s) for p, s in carve]
        self.model = model
        self.positions = [(n.name, g.index) for n in fleet.nodes for g in n.gpus]
        self.learner = DemandLearner()
        self.engine = PlacementEngine(fleet, "ours", self.learner)
        self.run = StaticRun()
        self._planned: dict[tuple[tuple[str, int], tuple[Instance, ...], int], bool] = {}

    def request(self, profile: str, owner: str) -> bool:
        self.run.requests += 1
        engine = self.engine
        # A free instance of the profile: taken as it is (first in device order).
        for node, index in self.positions:
            free = next((x for x in engine.instances(node, index) if x.free and x.profile == profile), None)
            if free is not None:
                self.learner.observe(profile)
                self._take(node, index, free.start, profile, owner, reconfigured=0)
                self.run.reused += 1
                return True
        decision = engine.choose(PlacementRequest(profile))  # the learner observes the request here
        if decision is not None:
            engine.commit(decision, owner)
            c = decision.slots[0]
            self._count(profile, owner, (c.node, c.gpu_index, c.start), operations=1)
            return True
        best: tuple[int, int, ReconfigurationPlan] | None = None
        for order, (node, index) in enumerate(self.positions):
            plan = plan_reconfiguration(self.model, engine.instances(node, index), profile)
            if plan is not None and (best is None or (plan.cost, order) < best[:2]):
                best = (plan.cost, order, plan)
        if best is None:
            return False
        cost, order, plan = best
        node, index = self.positions[order]
        start = plan.targets[0][1]
        after = [
            Instance(profile, start, owner) if (x.profile, x.start) == (profile, start) else x
            for x in plan.layout_after
        ]
        engine.set_layout(node, index, after)
        self._count(profile, owner, (node, index, start), operations=cost)
        return True

    def _take(self, node: str, index: int, start: int, profile: str, owner: str, reconfigured: int) -> None:
        after = [x if x.start != start else Instance(profile, start, owner) for x in self.engine.instances(node, index)]
        self.engine.set_layout(node, index, after)
        self.run.admitted += 1
        self.run.served += self.model.profile(profile).compute_slices
        self.run.where[owner] = (node, index, start)

    def _count(self, profile: str, owner: str, where: tuple[str, int, int], operations: int) -> None:
        self.run.admitted += 1
        self.run.served += self.model.profile(profile).compute_slices
        self.run.reconfigurations += 1
        self.run.operations += operations
        self.run.where[owner] = where

    def release(self, owner: str) -> None:
        node, index, start = self.run.where.pop(owner)
        self.engine.release(node, index, start, destroy=False)

    def preshape(self) -> None:
        mix: DemandMix = self.learner.mix()
        for node, index in self.positions:
            instances = tuple(self.engine.instances(node, index))
            key = ((node, index), instances, mix.version)
            if key in self._planned:
                continue  # nothing changed on this GPU since its last plan
            plan = plan_preshape(self.model, instances, mix)
            self._planned[key] = plan is not None
            if plan is None:
                continue
            owners = {x.start: x for x in instances if not x.free}
            self.engine.set_layout(node, index, [owners.get(x.start, x) for x in plan.layout_after])
            self.run.preshape_reconfigurations += 1
            self.run.preshape_operations += len(plan.operations)


class SlotFirstFleet:
    """Static agent mode where `ours` chooses GPU and slot as if free instances were empty space (the packing of
    DynamicMIG with our policy), and the agent makes the layout match: the chosen slot is a free instance of the
    profile (no reconfiguration) or the free instances in its way are destroyed and it is created (one)."""

    def __init__(self, model: GpuModel, gpus: int) -> None:
        per_node = min(8, gpus)
        fleet = empty_fleet(model, gpus // per_node, per_node)
        carve = find_packing(model, {profile_of(model, s): n for s, n in BALANCED.items()}) or []
        self.model = model
        self.learner = DemandLearner()
        self.engine = PlacementEngine(fleet, "ours", self.learner)  # held instances only
        self.free = {(n.name, g.index): set(carve) for n in fleet.nodes for g in n.gpus}
        self.run = StaticRun()

    def request(self, profile: str, owner: str) -> bool:
        self.run.requests += 1
        decision = self.engine.place(PlacementRequest(profile), owner)
        if decision is None:
            return False
        c = decision.slots[0]
        position = (c.node, c.gpu_index)
        self.run.admitted += 1
        self.run.served += self.model.profile(profile).compute_slices
        self.run.where[owner] = (c.node, c.gpu_index, c.start)
        free = self.free[position]
        if (profile, c.start) in free:
            free.discard((profile, c.start))
            self.run.reused += 1
            return True
        held = [(x.profile, x.start) for x in self.engine.instances(*position)]
        mine = self._mask((profile, c.start))
        destroyed = {x for x in free if self._mask(x) & mine}
        keep = sorted(free - destroyed, key=lambda x: self.model.profile(x[0]).memory_slices)
        while keep and not is_valid_layout(self.model, held + keep):
            destroyed.add(keep.pop(0))  # rules beyond overlap (counts, compute): drop the smallest free ones
        self.free[position] = set(keep)
        self.run.reconfigurations += 1
        self.run.operations += len(destroyed) + 1
        return True

    def _mask(self, instance: tuple[str, int]) -> int:
        size = self.model.profile(instance[0]).memory_slices
        return ((1 << size) - 1) << instance[1]

    def release(self, owner: str) -> None:
        node, index, start = self.run.where.pop(owner)
        profile = next(x.profile for x in self.engine.instances(node, index) if x.start == start)
        self.engine.release(node, index, start, destroy=True)
        self.free[(node, index)].add((profile, start))  # static: the instance stays, free

    def preshape(self) -> None:
        mix: DemandMix = self.learner.mix()
        for position, free in self.free.items():
            instances = [*self.engine.instances(*position), *(Instance(p, s) for p, s in sorted(free))]
            plan = plan_preshape(self.model, instances, mix)
            if plan is None:
                continue
            self.free[position] = {(x.profile, x.start) for x in plan.layout_after if x.free}
            self.run.preshape_reconfigurations += 1
            self.run.preshape_operations += len(plan.operations)


class FreeThenSlotFleet(SlotFirstFleet):
    """A free instance of the profile anywhere first (first in device order); otherwise slot first."""

    def request(self, profile: str, owner: str) -> bool:
        for (node, index), free in self.free.items():
            start = min((s for p, s in free if p == profile), default=None)
            if start is None:
                continue
            self.run.requests += 1
            self.learner.observe(profile)
            held = self.engine.instances(node, index)
            self.engine.set_layout(node, index, [*held, Instance(profile, start, owner)])
            free.discard((profile, start))
            self.run.admitted += 1
            self.run.reused += 1
            self.run.served += self.model.profile(profile).compute_slices
            self.run.where[owner] = (node, index, start)
            return True
        return super().request(profile, owner)


STRATEGIES: dict[str, type[StaticFleet] | type[SlotFirstFleet]] = {
    "slot first (ours)": SlotFirstFleet,
    "free instance first": StaticFleet,
    "free instance, else slot first": FreeThenSlotFleet,
}


def first_fit_served(model: GpuModel, gpus: int, requests: Sequence[str]) -> int:
    per_node = min(8, gpus)
    engine = PlacementEngine(empty_fleet(model, gpus // per_node, per_node), "first-fit", DemandLearner())
    return sum(
        model.profile(p).compute_slices for k, p in enumerate(requests) if engine.place(PlacementRequest(p), f"r{k}")
    )


@dataclass
class FillStaticRow:
    mix: str
    strategy: str
    gap_closed: list[float]
    of_optimum: list[float]
    reconf_per_100: list[float]
    reuse_share: list[float]
    first_fit_of_optimum: list[float] = field(default_factory=list)


def fill_static(
    model: GpuModel,
    gpus: int,
    mixes: dict[str, Callable[[random.Random], str]],
    seeds: int,
) -> list[FillStaticRow]:
    rows: list[FillStaticRow] = []
    for mix, draw in mixes.items():
        per = {name: FillStaticRow(mix, name, [], [], [], []) for name in STRATEGIES}
        for seed in range(seeds):
            requests = fill_requests(draw, model, gpus, seed)
            ff = first_fit_served(model, gpus, requests)
            opt = offline_optimum(model, gpus, Counter(requests)).value
            for name, kind in STRATEGIES.items():
                static = kind(model, gpus)
                for k, p in enumerate(requests):
                    static.request(p, f"r{k}")
                run, row = static.run, per[name]
                row.gap_closed.append((run.served - ff) / (opt - ff) if opt > ff else float("nan"))
                row.of_optimum.append(run.served / opt)
                row.reconf_per_100.append(100 * run.reconfigurations / run.requests)
                row.reuse_share.append(run.reused / max(1, run.admitted))
                row.first_fit_of_optimum.append(ff / opt)
        rows.extend(per.values())
    return rows


@dataclass
class OnlineStaticRow:
    mix: str
    strategy: str
    preshape: bool
    admitted: list[float]
    reconf_per_100: list[float]
    ops_per_100: list[float]
    preshape_per_100: list[float]
    preshape_ops_per_100: list[float]


class StaticReplay(Protocol):
    model: GpuModel
    run: StaticRun

    def request(self, profile: str, owner: str) -> bool: ...

    def release(self, owner: str) -> None: ...


S = TypeVar("S", bound=StaticReplay)


def replay_static(static: S, pods: Sequence[Pod], preshape: Callable[[S], None] | None) -> StaticRun:
    """Replay ``pods`` online on ``static``; ``preshape``, when given, runs in every gap between arrivals
    longer than twice the mean gap (a quiet period)."""
    gaps = [b.created - a.created for a, b in zip(pods, pods[1:], strict=False)]
    quiet = 2 * statistics.fmean(gaps) if gaps else 0.0
    last = None
    for t, kind, k in replay_events(pods):
        if kind == DEPARTURE:
            if f"p{k}" in static.run.where:
                static.release(f"p{k}")
            continue
        if preshape is not None and last is not None and t - last > quiet:
            preshape(static)
        last = t
        static.request(profile_of(static.model, pods[k].shape), f"p{k}")
    return static.run


def online_static(
    model: GpuModel,
    gpus: int,
    mixes: dict[str, dict[str, float]],
    seeds: int,
    n: int,
) -> list[OnlineStaticRow]:
    rows = []
    for mix_name, mix in mixes.items():
        for (strategy, kind), preshape in itertools.product(STRATEGIES.items(), (False, True)):
            row = OnlineStaticRow(mix_name, strategy, preshape, [], [], [], [], [])
            for seed in range(seeds):
                pods = synthetic_online(mix, seed, model, gpus, n)
                run = replay_static(kind(model, gpus), pods, (lambda s: s.preshape()) if preshape else None)
                per = 100 / run.requests
                row.admitted.append(run.admitted / run.requests)
                row.reconf_per_100.append(run.reconfigurations * per)
                row.ops_per_100.append(run.operations * per)
                row.preshape_per_100.append(run.preshape_reconfigurations * per)
                row.preshape_ops_per_100.append(run.preshape_operations * per)
            rows.append(row)
    return rows


def dist(values: Sequence[float], fmt: str = "{:.0%}") -> str:
    """mean (min / median / max) over seeds."""
    vals = [v for v in values if v == v]
    if not vals:
        return "n/a"
    parts = [statistics.fmean(vals), min(vals), statistics.median(vals), max(vals)]
    return f"{fmt.format(parts[0])} ({' / '.join(fmt.format(x) for x in parts[1:])})"


def fill_lines(title: str, rows: list[FillStaticRow], seeds: int) -> list[str]:
    lines = [
        f"## {title}",
        "",
        f"Mean (min / median / max) over {seeds} seeds. Gap closed = (static - first fit) / (optimum - first fit) "
        "in compute slices served; first fit is DynamicMIG's (the driver's slot on the first GPU that fits). On "
        "fleets this small the gap is a few slices, so one slice moves the share by tens of percent (hundreds when "
        "the gap is one slice): read it with the two of-optimum columns.",
        "",
        "| mix | static strategy | first fit: of optimum | static: of optimum | gap closed "
        "| reconfigurations / 100 requests | served from a free instance |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.mix} | {r.strategy} | {dist(r.first_fit_of_optimum)} | {dist(r.of_optimum)} | {dist(r.gap_closed)} "
            f"| {dist(r.reconf_per_100, '{:.1f}')} | {dist(r.reuse_share)} |"
        )
    return lines


def online_lines(title: str, rows: list[OnlineStaticRow], seeds: int) -> list[str]:
    lines = [
        f"## {title}",
        "",
        f"Mean (min / median / max) over {seeds} seeds. Request path: reconfigurations a request waits for. "
        "Quiet periods: pre-shaping's own GPU reconfigurations, done while nobody waits.",
        "",
        "| mix | static strategy | pre-shaping | admitted | request-path reconfigurations / 100 "
        "| their operations / 100 | quiet-period reconfigurations / 100 | their operations / 100 |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.mix} | {r.strategy} | {'on' if r.preshape else 'off'} | {dist(r.admitted)} "
            f"| {dist(r.reconf_per_100, '{:.1f}')} "
            f"| {dist(r.ops_per_100, '{:.1f}')} | {dist(r.preshape_per_100, '{:.1f}')} "
            f"| {dist(r.preshape_ops_per_100, '{:.1f}')} |"
        )
    return lines
