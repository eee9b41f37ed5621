"""The fill-until-full sweep the hold research benches share (issue 14): serve each tuning draw with a policy, run
the draws of a column with the peers and every rule, and print the column's table.

``bench/placement_hold_rules.py``, ``placement_hold_young.py``, ``placement_hold_spread.py`` and
``placement_fill_pull.py`` each try their own rules on the same tuning draws (``make_sample``: H100, a Dirichlet
concentration, seeds from 0) and report them the same way; the loop and the table live here so that a column means
the same in all of them.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, not installed

from allocations.mig.catalog import GpuModel  # noqa: E402
from allocations.mig.demand import DemandLearner, DemandMix  # noqa: E402
from allocations.mig.engine import PlacementEngine, empty_fleet  # noqa: E402
from allocations.mig.fleet import Fleet, PlacementRequest  # noqa: E402
from allocations.mig.policies import Policy  # noqa: E402
from bench.placement_family import PEERS, Outcome, Sample, make_sample, run_sample, summarise  # noqa: E402

#: Builds the engine a sample is served by (``PlacementEngine`` or a bench's own subclass).
EngineFactory = Callable[[Fleet, Policy, DemandLearner | DemandMix], PlacementEngine]

#: An extra column of a table: its header, its alignment (``---:`` or ``---``) and its cell for a rule's name.
Column = tuple[str, str, Callable[[str], str]]


def serve(sample: Sample, policy: Policy, warm: bool, engine: EngineFactory = PlacementEngine) -> int:
    """Compute slices the policy serves on the fill-until-full sample; ``warm``: its learner first sees the
    sample's 500-request history."""
    per_node = min(8, sample.gpus)
    learner = DemandLearner()
    for name in sample.history if warm else ():
        learner.observe(name)
    placer = engine(empty_fleet(sample.model, sample.gpus // per_node, per_node), policy, learner)
    served = 0
    for k, name in enumerate(sample.requests):
        if placer.place(PlacementRequest(name), f"r{k}") is not None:
            served += sample.model.profile(name).compute_slices
    return served


def sweep(
    model: GpuModel, gpus: int, alphas: Sequence[float], seeds: int, served: Callable[[Sample], Mapping[str, int]]
) -> list[Outcome]:
    """The column's outcomes: per concentration, seeds 0 to ``seeds - 1``, the peers' and ``served(sample)``'s."""
    outcomes: list[Outcome] = []
    for alpha in alphas:
        for seed in range(seeds):
            sample = make_sample(model, gpus, alpha, seed)
            o = run_sample(sample, PEERS)
            o.served.update(served(sample))
            outcomes.append(o)
    return outcomes


def print_table(
    outcomes: Sequence[Outcome],
    names: Sequence[str],
    heading: str,
    t0: float,
    *,
    worst: bool = False,
    columns: Sequence[Column] = (),
) -> None:
    """A column's table: per rule, the per-sample mean and pooled share of the first-fit -> optimum gap closed,
    (``worst``) the worst sample's, the samples below a peer beyond noise, then ``columns``; under ``heading`` and
    the seconds since ``t0``."""
    print(f"\n{heading} ({time.perf_counter() - t0:.0f} s)\n")
    head = [
        "rule",
        "per sample: mean",
        "pooled",
        *(["worst"] if worst else []),
        "below a peer",
        *(c[0] for c in columns),
    ]
    align = ["---", "---:", "---:", *(["---:"] if worst else []), "---:", *(c[1] for c in columns)]
    print(f"| {' | '.join(head)} |\n|{'|'.join(align)}|")
    for name in names:
        s = summarise(outcomes, name)
        cells = [name, f"{100 * s.mean:.1f} %", f"{100 * s.pooled:.1f} %"]
        cells += [f"{100 * s.worst:.0f} %"] if worst else []
        cells += [str(max(s.below.values())), *(c[2](name) for c in columns)]
        print(f"| {' | '.join(cells)} |", flush=True)


def side_by_side(
    samples: Sequence[Sample],
    names: Sequence[str],
    served: Callable[[Sample, str, bool], int],
    kept: str,
    title: str,
    t0: float,
    warm_too: bool,
) -> None:
    """Rules side by side on ``samples`` (``served(sample, name, warm)``), cold and, with ``warm_too``, with a warm
    learner: per-sample mean, pooled, worst, samples below a peer, and the samples each moves against ``kept``."""
    cold: list[Outcome] = []
    warm: list[Outcome] = []
    for sample in samples:
        o = run_sample(sample, PEERS)
        w = Outcome(o.sample, o.optimum, o.proven, dict(o.served))
        for name in names:
            o.served[name] = served(sample, name, False)
            if warm_too:
                w.served[name] = served(sample, name, True)
        cold.append(o)
        warm.append(w)
    for label, outcomes in (("cold", cold), ("warm learner", warm))[: 2 if warm_too else 1]:
        print(f"\n{title}, {len(outcomes)} samples, {label} ({time.perf_counter() - t0:.0f} s)\n")
        print("| rule | per sample: mean | pooled | worst | below a peer | samples moved vs kept: slices |")
        print("|---|---:|---:|---:|---:|---|")
        for name in names:
            s = summarise(outcomes, name)
            moved = [
                f"{o.sample.alpha:g}/{o.sample.seed}: {o.served[name] - o.served[kept]:+d}"
                for o in outcomes
                if o.served[name] != o.served[kept]
            ]
            print(
                f"| {name} | {100 * s.mean:.1f} % | {100 * s.pooled:.1f} % | {100 * s.worst:.0f} % "
                f"| {max(s.below.values())} | {len(moved)}: {', '.join(moved)} |",
                flush=True,
            )
