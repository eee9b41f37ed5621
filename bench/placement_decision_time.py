"""``python bench/placement_decision_time.py [--models H100 H200] [--gpus 512] [--alphas 0.3 1 3] [--seeds 1]
[--warm] [--policy NAME] [--profile N]``: how long ``ours-hold``'s decisions take on fills of hold-out draws, and
WHICH decisions it takes (issue 14, session 13).

Each sample is a draw of the hold-out family (``bench/placement_family.py``: concentrations 0.3, 1 and 3, seeds
from 1000, as ``bench/placement.py --policy``), filled from empty on a fleet of 8-GPU nodes; a decision is
``PlacementEngine.place`` (choose + commit), timed in process CPU time (``time.process_time``, like
``decision_cpu_ms`` in ``bench/placement_policy_report.py``: less sensitive to other jobs on a shared machine than
the wall clock). ``--warm``: the learner first saw the sample's 500-request history.

Per sample it prints the mean, p99 and max CPU time, the number of holds, and a hash of the sequence of decisions
(per request: the GPU, the slot and whether it reused a free instance, or ``hold`` / ``none``), so that a change
meant to be faster only can be checked to take exactly the same decisions: run it before and after and compare
the hashes. ``--profile N``: instead, cProfile the fills and print the top ``N`` functions by cumulative time.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import pstats
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from allocations.mig.catalog import load_catalog
from allocations.mig.demand import DemandLearner
from allocations.mig.engine import PlacementEngine, empty_fleet
from allocations.mig.fleet import PlacementRequest
from allocations.mig.policies import get_policy
from bench.placement import load_average
from bench.placement_family import Sample, make_sample
from bench.placement_policy_report import FIRST_SEED

MODELS = {"H100": "NVIDIA H100 80GB HBM3", "H200": "NVIDIA H200"}


@dataclass(frozen=True)
class Timed:
    sample: Sample
    warm: bool
    times: tuple[float, ...]  # CPU seconds per decision
    decisions: tuple[str, ...]

    @property
    def digest(self) -> str:
        return hashlib.sha256("\n".join(self.decisions).encode()).hexdigest()[:16]

    @property
    def holds(self) -> int:
        return sum(d == "hold" for d in self.decisions)


def fill(sample: Sample, warm: bool, policy: str = "ours-hold") -> Timed:
    """``policy``'s decisions on a fill of the sample from empty, each timed (CPU) and recorded."""
    per_node = min(8, sample.gpus)
    learner = DemandLearner()
    if warm:
        for name in sample.history:
            learner.observe(name)
    engine = PlacementEngine(empty_fleet(sample.model, sample.gpus // per_node, per_node), get_policy(policy), learner)
    times: list[float] = []
    decisions: list[str] = []
    for k, name in enumerate(sample.requests):
        held = engine.held
        c0 = time.process_time()
        decision = engine.place(PlacementRequest(name), f"r{k}")
        times.append(time.process_time() - c0)
        if decision is None:
            decisions.append("hold" if engine.held > held else "none")
        else:
            decisions.append(";".join(f"{s.node}/{s.gpu_index}/{s.start}/{int(s.reuse)}" for s in decision.slots))
    return Timed(sample, warm, tuple(times), tuple(decisions))


def p99(times: Sequence[float]) -> float:
    return statistics.quantiles(times, n=100)[98] if len(times) > 1 else times[0]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["H100", "H200"])
    ap.add_argument("--gpus", nargs="+", type=int, default=[512])
    ap.add_argument("--alphas", nargs="+", type=float, default=[0.3, 1.0, 3.0])
    ap.add_argument("--seeds", type=int, default=1, help="draws per concentration, from seed 1000")
    ap.add_argument("--warm", action="store_true", help="learners that first saw the sample's history")
    ap.add_argument("--policy", default="ours-hold", help="the engine's policy (ours-rollout shares the rollouts)")
    ap.add_argument("--profile", type=int, default=0, help="cProfile the fills; print the top N by cumulative time")
    args = ap.parse_args(argv)
    catalog = load_catalog()
    print(f"load average at the start: {load_average()}", flush=True)
    profiler = cProfile.Profile() if args.profile else None
    all_times: list[float] = []
    digests = []
    for m in args.models:
        model = catalog.model(MODELS[m])
        for gpus in args.gpus:
            for alpha in args.alphas:
                for s in range(args.seeds):
                    sample = make_sample(model, gpus, alpha, FIRST_SEED + s)
                    if profiler is not None:
                        profiler.enable()
                    t = fill(sample, args.warm, args.policy)
                    if profiler is not None:
                        profiler.disable()
                    all_times.extend(t.times)
                    digests.append(t.digest)
                    print(
                        f"{m} {gpus} GPUs alpha {alpha:g} seed {sample.seed} {'warm' if args.warm else 'cold'}: "
                        f"{len(t.times)} decisions, {t.holds} held, {t.decisions.count('none')} did not fit; CPU mean "
                        f"{1e3 * statistics.fmean(t.times):.3f} ms, p99 {1e3 * p99(t.times):.2f} ms, max "
                        f"{1e3 * max(t.times):.2f} ms; decisions {t.digest}",
                        flush=True,
                    )
    print(
        f"all: {len(all_times)} decisions; CPU mean {1e3 * statistics.fmean(all_times):.3f} ms, p99 "
        f"{1e3 * p99(all_times):.2f} ms, max {1e3 * max(all_times):.2f} ms; decisions "
        f"{hashlib.sha256(' '.join(digests).encode()).hexdigest()[:16]}; load average at the end: {load_average()}"
    )
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(args.profile)
        print(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
