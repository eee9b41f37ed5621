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
from bench.placement_hold_outcomes import tuning_runs, versus_peers  # noqa: E402


class FillLeftEngine(PlacementEngine):
    """The engine, counting the requests its policy's fill-left rule refused (:attr:`PlacementEngine.kept_empty`)."""

    def __init__(self, fleet: Fleet, policy: Policy | str, demand: DemandMix | DemandLearner) -> None:
        super().__init__(fleet, policy, demand)
        self.refused = 0

    def choose(self, request: PlacementRequest) -> PlacementDecision | None:
        decision = super().choose(request)
        self.refused += self.kept_empty is not None
        return decision


def replay_fill_left(
    model: GpuModel, gpus: int, pods: Sequence[Pod], rule: FillLeft | None
) -> tuple[Served, FillLeftEngine]:
    """``ours-hold``'s online replay (``replay_held``) with ``rule``'s refusals (the engine's fill left, as the
    candidate sets it: :attr:`HoldingFragmentationAware.FILL_LEFT`); ``None``: the kept rule."""
    engines: list[FillLeftEngine] = []

    def make(fleet: Fleet, policy: Policy | str, demand: DemandMix | DemandLearner) -> PlacementEngine:
        engines.append(FillLeftEngine(fleet, policy, demand))
        return engines[-1]

    policy = HoldingFragmentationAware()
    policy.FILL_LEFT = "off"  # the kept rule: session 13's (the engine's default is the trusted share since session 14)
    if rule is not None:
        if not rule.in_engine:
            raise ValueError(f"{rule.name}: a bench-only variant, not the engine's rule")
        policy.FILL_LEFT = rule.FILL_LEFT
    return replay_held(model, gpus, pods, policy, make_engine=make), engines[0]


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
