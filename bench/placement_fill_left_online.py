"""``python bench/placement_fill_left_online.py [--seeds 6] [--hours 1]``: whether ``FillLeft``
(``bench/placement_confirm.py``) moves the online tuning draws (issue 14, session 13). TUNING draws only.

Fill left refuses, until the pool's first release, a request that would open an empty GPU while the 7g that a
fill of ``LOAD`` x the pool still brings reach the empty GPUs left. Online (``bench/placement_departures.py``
``replay_held``: Poisson arrivals, heavy-tailed lifetimes) a refused request queues as a held one does: retried
after each departure (where fill left no longer acts) and forced at its deadline. The draws are those of
``bench/placement_hold_outcomes.py`` (H100, 16 and 32 GPUs, Dirichlet 0.5 and 2, lognormal and Pareto lifetimes,
2,000 arrivals); a few seeds, since the rule acts on the first minutes of each run only.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, not installed

from allocations.mig.catalog import GpuModel, load_catalog  # noqa: E402
from allocations.mig.demand import DemandLearner, DemandMix  # noqa: E402
from allocations.mig.engine import PlacementEngine  # noqa: E402
from allocations.mig.fleet import Fleet, PlacementDecision, PlacementRequest  # noqa: E402
from allocations.mig.policies import HoldingFragmentationAware, Policy  # noqa: E402
from bench.placement import Pod  # noqa: E402
from bench.placement_confirm import FillLeft  # noqa: E402
from bench.placement_departures import Served, replay_held  # noqa: E402
from bench.placement_family import LOAD  # noqa: E402
from bench.placement_hold_outcomes import tuning_runs, versus_peers  # noqa: E402


class FillLeftEngine(PlacementEngine):
    """The kept engine (``ours-hold``) with ``rule``'s refusal before the pool's first release: a single-model pool,
    as the bench's."""

    def __init__(
        self, fleet: Fleet, policy: Policy | str, demand: DemandMix | DemandLearner, rule: FillLeft | None
    ) -> None:
        super().__init__(fleet, policy, demand)
        self.rule = rule
        self.released_once = False
        self.refused = 0

    def release(self, node: str, gpu_index: int, start: int, destroy: bool = True) -> None:
        self.released_once = True
        super().release(node, gpu_index, start, destroy)

    def place(self, request: PlacementRequest, owner: str) -> PlacementDecision | None:
        decision = self.choose(request)
        if decision is not None and self.refuses(request, decision):
            self.refused += 1
            decision = None
        if decision is not None:
            self.commit(decision, owner)
        return decision

    def refuses(self, request: PlacementRequest, decision: PlacementDecision) -> bool:
        if self.rule is None or self.released_once or request.force or not isinstance(self.demand, DemandLearner):
            return False
        slot = self._slots[self._slot_index[(decision.slots[0].node, decision.slots[0].gpu_index)]]
        model = slot.geom.model
        largest = max(model.profiles, key=lambda p: p.compute_slices)
        if request.profile == largest.name or slot.key:
            return False  # the largest profile itself, or a GPU already open
        empty = sum(1 for s in self._slots if not s.key)
        allocated, pool = self.allocated_compute()
        left = min(LOAD * (pool - allocated), LOAD * pool - allocated - self.held)
        left -= model.profile(request.profile).compute_slices if self.rule.own else 0
        coming, _ = self.rule.coming(model, self.demand.counts(), self.demand._prior_weight, left)  # noqa: SLF001
        return coming >= empty + self.rule.margin


def replay_fill_left(
    model: GpuModel, gpus: int, pods: Sequence[Pod], rule: FillLeft | None
) -> tuple[Served, FillLeftEngine]:
    """``ours-hold``'s online replay (``replay_held``) with ``rule``'s refusals; ``None``: the kept rule."""
    engines: list[FillLeftEngine] = []

    def make(fleet: Fleet, policy: Policy | str, demand: DemandMix | DemandLearner) -> PlacementEngine:
        engines.append(FillLeftEngine(fleet, policy, demand, rule))
        return engines[-1]

    return replay_held(model, gpus, pods, HoldingFragmentationAware(), make_engine=make), engines[0]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hours", type=float, nargs="*", default=[1.0], help="mean lifetimes of the draws")
    ap.add_argument("--seeds", type=int, default=6, help="seeds per concentration")
    args = ap.parse_args(argv)
    h100 = load_catalog().model("NVIDIA H100 80GB HBM3")
    rules: dict[str, FillLeft | None] = {
        "ours-hold (kept)": None,
        "fill left": FillLeft(),
        "fill left, the 7g share blended with the prior": FillLeft(trusted=True),
    }
    t0 = time.perf_counter()
    for hours in args.hours:
        shares: dict[str, list[float]] = {n: [] for n in rules}
        refused: dict[str, int] = dict.fromkeys(rules, 0)
        peers: list[float] = []
        labels: list[str] = []
        for draw in tuning_runs(h100, args.seeds, hours):
            peers.append(draw.peer)
            labels.append(draw.label)
            for name, rule in rules.items():
                run, engine = replay_fill_left(h100, draw.gpus, draw.pods, rule)
                shares[name].append(run.share)
                refused[name] += engine.refused
        print(f"\nTuning draws, mean lifetime {hours:g} h, {len(peers)} runs ({time.perf_counter() - t0:.0f} s)\n")
        print(
            "| rule | served of offered | vs the better of first-fit and best-fit: mean | runs below by > 0.5 "
            "points | worst | refusals | runs moved vs kept (points) |"
        )
        print("|---|---:|---:|---:|---:|---:|---|")
        kept = shares["ours-hold (kept)"]
        for name, got in shares.items():
            moved = [f"{lab} {100 * (a - b):+.2f}" for lab, a, b in zip(labels, got, kept, strict=True) if a != b]
            print(
                f"| {name} | {versus_peers(got, peers)} | {refused[name]} | {len(moved)}: {', '.join(moved)} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
