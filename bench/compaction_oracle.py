"""What any compaction could gain on the online replay (issue 14): oracle replays and where first fit's loss is.

Three questions, on the same pods and fleet as bench/compaction.py:

- ``oracle_replay(moves=None)``: every request is admitted when the running requests and it can be packed on the
  fleet at all, i.e. the whole fleet is repacked optimally on every refusal (unlimited moves, placement ignored).
  No compaction of a fleet that admits every request that fits can serve more this way: it is the bound.
  "Fits" is exact (allocations/mig/offline.py's configuration program: the most compute slices the fleet can
  hold from the running requests and the new one equals their sum); an unproven answer counts as "does not fit"
  and is counted (``unproven``).
- ``oracle_replay(moves=k, budget=0.02)``: first fit, and on a refusal that a repack would admit, the best plan of
  at most ``k`` moves the defrag search finds (allocations/mig/defrag.py, every allocation movable), while the
  moves so far stay within ``budget`` of the allocations admitted so far.
- ``first_fit_losses``: first fit's refusals, split by what they would have needed: more capacity (the fleet's free
  compute or memory slices are fewer than the request's), only a repack (a repack of the running requests and it
  fits), or neither (the free slices add up but no layout of the MIG rules holds them all).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from allocations.mig.catalog import GpuModel
from allocations.mig.defrag import plan_defrag
from allocations.mig.demand import DemandLearner
from allocations.mig.engine import PlacementEngine, empty_fleet
from allocations.mig.fleet import Fleet, Instance, PlacementDecision, PlacementRequest, SlotChoice
from allocations.mig.offline import offline_optimum
from bench.placement import SHAPES, Pod, profile_of
from bench.replay_events import replay_events


@dataclass(frozen=True)
class OracleResult:
    mode: str
    admitted: int
    served: float
    offered_sh: float
    moves: int | None  # None: unlimited (not counted)
    rescues: int
    unproven: int
    seconds: float

    @property
    def share(self) -> float:
        return self.served / self.offered_sh if self.offered_sh else 0.0


CAUSES = ("capacity", "repack", "layout", "unproven")


@dataclass(frozen=True)
class Losses:
    """First fit's refusals: how many, and their offered slice-hours, per cause."""

    refused: Counter[str]
    slice_hours: dict[str, float]
    offered_sh: float


class Packer:
    """Whether a multiset of profiles fits ``gpus`` empty GPUs, memoised (the running set repeats a lot)."""

    def __init__(self, model: GpuModel, gpus: int) -> None:
        self.model, self.gpus = model, gpus
        self.compute = {p.name: p.compute_slices for p in model.profiles}
        self.memory = {p.name: p.memory_slices for p in model.profiles}
        self.memo: dict[tuple[tuple[str, int], ...], bool | None] = {}

    def within_capacity(self, running: Counter[str]) -> bool:
        compute = sum(self.compute[p] * n for p, n in running.items())
        memory = sum(self.memory[p] * n for p, n in running.items())
        return compute <= 7 * self.gpus and memory <= 8 * self.gpus

    def fits(self, running: Counter[str]) -> bool | None:
        """True or False when proven; None when the search stopped first."""
        if not self.within_capacity(running):
            return False
        key = tuple(sorted((p, n) for p, n in running.items() if n))
        if key not in self.memo:
            want = sum(self.compute[p] * n for p, n in key)
            best = offline_optimum(self.model, self.gpus, dict(key), node_limit=2_000)
            if best.value >= want:
                self.memo[key] = True
            elif best.optimal or best.bound < want - 1e-6:
                self.memo[key] = False
            else:
                self.memo[key] = None
        return self.memo[key]


def _fleet(model: GpuModel, gpus: int) -> Fleet:
    nodes = -(-gpus // 8)
    fleet = empty_fleet(model, nodes, 8)
    extra = nodes * 8 - gpus
    if extra:
        fleet.nodes[-1].gpus = fleet.nodes[-1].gpus[: 8 - extra]
    return fleet


def oracle_replay(
    model: GpuModel, gpus: int, pods: Sequence[Pod], *, moves: int | None = None, budget: float = 0.02
) -> OracleResult:
    """See the module docstring: ``moves=None`` is the unlimited oracle, else first fit plus bounded repacks."""
    t0 = time.process_time()
    packer = Packer(model, gpus)
    engine = PlacementEngine(_fleet(model, gpus), "first-fit", DemandLearner()) if moves is not None else None
    running: Counter[str] = Counter()
    where: dict[str, tuple[str, int, int]] = {}
    profiles: dict[str, str] = {}
    admitted = moved = rescues = unproven = 0
    served = offered_sh = 0.0
    for _, kind, k in replay_events(pods):
        owner = f"pod{k}"
        if kind == 0:
            if owner in profiles:
                running[profiles.pop(owner)] -= 1
                if engine is not None:
                    engine.release(*where.pop(owner))
            continue
        pod = pods[k]
        name = profile_of(model, pod.shape)
        hours = (pod.deleted - pod.created) / 3600
        offered_sh += SHAPES[pod.shape][0] * hours
        if engine is None:
            running[name] += 1
            fits = packer.fits(running)
            running[name] -= 1
            unproven += fits is None
            if not fits:
                continue
        else:
            d = engine.place(PlacementRequest(name), owner)
            if d is None:
                allowed = min(moves or 0, math.floor(budget * admitted) - moved)
                running[name] += 1
                fits = packer.fits(running) if allowed > 0 else False
                running[name] -= 1
                unproven += fits is None
                if not fits:
                    continue
                fleet = engine.snapshot()
                for n in fleet.nodes:  # every allocation may move
                    for g in n.gpus:
                        g.instances = [
                            Instance(i.profile, i.start, i.owner, idle=i.owner is not None) for i in g.instances
                        ]
                plan = plan_defrag(fleet, request=PlacementRequest(name), max_moves=allowed)
                if plan is None or plan.placement is None:
                    continue
                for m in plan.moves:
                    slot = SlotChoice(m.to_node, m.to_gpu, m.profile, m.to_start, m.reuse)
                    engine.commit(PlacementDecision(m.to_node, (slot,), "move"), m.owner)
                    engine.release(m.from_node, m.from_gpu, m.from_start)
                    where[m.owner] = (m.to_node, m.to_gpu, m.to_start)
                moved += len(plan.moves)
                rescues += 1
                c = plan.placement
                d = PlacementDecision(c.node, (c,), "rescue")
                engine.commit(d, owner)
            where[owner] = (d.node, d.gpu_index, d.start)
        admitted += 1
        served += SHAPES[pod.shape][0] * hours
        running[name] += 1
        profiles[owner] = name
    mode = (
        "oracle: optimal repack on every refusal"
        if moves is None
        else f"oracle: first-fit + repacks of <= {moves} moves"
    )
    return OracleResult(
        mode,
        admitted,
        served,
        offered_sh,
        None if moves is None else moved,
        rescues,
        unproven,
        time.process_time() - t0,
    )


def first_fit_losses(model: GpuModel, gpus: int, pods: Sequence[Pod]) -> Losses:
    """First fit's refusals by cause (see the module docstring), counted at the moment of each refusal."""
    packer = Packer(model, gpus)
    engine = PlacementEngine(_fleet(model, gpus), "first-fit", DemandLearner())
    running: Counter[str] = Counter()
    where: dict[str, tuple[str, int, int]] = {}
    profiles: dict[str, str] = {}
    refused: Counter[str] = Counter()
    slice_hours: dict[str, float] = dict.fromkeys(CAUSES, 0.0)
    offered_sh = 0.0
    for _, kind, k in replay_events(pods):
        owner = f"pod{k}"
        if kind == 0:
            if owner in where:
                engine.release(*where.pop(owner))
                running[profiles.pop(owner)] -= 1
            continue
        pod = pods[k]
        name = profile_of(model, pod.shape)
        sh = SHAPES[pod.shape][0] * (pod.deleted - pod.created) / 3600
        offered_sh += sh
        d = engine.place(PlacementRequest(name), owner)
        if d is None:
            running[name] += 1
            if not packer.within_capacity(running):
                cause = "capacity"
            else:
                fits = packer.fits(running)
                cause = "repack" if fits else ("unproven" if fits is None else "layout")
            running[name] -= 1
            refused[cause] += 1
            slice_hours[cause] += sh
            continue
        where[owner] = (d.node, d.gpu_index, d.start)
        running[name] += 1
        profiles[owner] = name
    return Losses(refused, slice_hours, offered_sh)
