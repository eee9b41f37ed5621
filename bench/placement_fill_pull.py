"""``python bench/placement_fill_pull.py [--gpus 8 64] [--alphas 0.5 2 | 0.2] [--skip-family] [--skip-online]
[--seeds 3] [--hours 1 8]``: a stronger best-fit pull in ``ours-hold`` only while the pool fills (issue 14,
session 12; measured, not adopted). TUNING draws only; the hold-out is never read here.

``bench/placement_poisson_runs.py`` found that a pull of 0.2-0.3 per free compute slice (``TIGHTNESS``, 0.1 in
``ours``' rank) admits more compute with departures and gains on the fill-until-full family at 8 GPUs, but moves
slice-hours within the heavy tail's luck, two cells down. The variant here keeps the stronger pull only until
the pool sees its first release (the engine's ``churn`` is 0: the regime of ``ours-hold``'s fill terms) and goes
back to 0.1 from then on, so the online replays can move only through the placements of that first fill.

The rank does not see the engine's churn, and the engine caches ranks per demand snapshot, so this is a
bench-only pair: :class:`FillPullEngine` tells its policy when the first release lands and drops the cached
ranks then. Family: as ``bench/placement_hold_rules.py`` (H100, seeds 0-39 at 8 GPUs and 0-19 at 64, cold and
warm learner, ``--alphas 0.2`` for the concentrated draws). Online: ``replay_held`` on the Poisson tuning draws
(16 and 32 GPUs, Dirichlet 0.5 and 2, lognormal and Pareto lifetimes, 2,000 arrivals), each rule against the
kept ``ours-hold`` run by run; ``fill pull 0.1`` must equal it on every run (checked).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, not installed

from allocations.mig.catalog import GpuModel, load_catalog  # noqa: E402
from allocations.mig.demand import DemandLearner, DemandMix  # noqa: E402
from allocations.mig.engine import PlacementEngine  # noqa: E402
from allocations.mig.fleet import Fleet, PlacementDecision, PlacementRequest  # noqa: E402
from allocations.mig.policies import FragmentationAware, HoldingFragmentationAware, Policy  # noqa: E402
from bench.placement import SHAPES  # noqa: E402
from bench.placement_departures import poisson_pods, replay_held  # noqa: E402
from bench.placement_family import Outcome, Sample  # noqa: E402
from bench.placement_sweep import print_table, serve, sweep  # noqa: E402

SEEDS = {8: 40, 64: 20}
ONLINE_GPUS = (16, 32)
ONLINE_ALPHAS = (0.5, 2.0)
PODS = 2000
KEPT = "ours-hold (kept, pull 0.1)"


class FillPull(HoldingFragmentationAware):
    """``ours-hold`` whose best-fit pull is ``fill_pull`` per free compute slice until its engine sees a release
    (:class:`FillPullEngine` sets ``filling``), then ``ours``' own."""

    def __init__(self, fill_pull: float) -> None:
        super().__init__()
        self.fill_pull = fill_pull
        self.filling = True
        self.TIGHTNESS = fill_pull
        self.name = f"ours-hold, fill pull {fill_pull:g}"

    def fill_over(self) -> None:
        self.filling = False
        self.TIGHTNESS = FragmentationAware.TIGHTNESS


class FillPullEngine(PlacementEngine):
    """An engine that ends its :class:`FillPull` policy's fill at the first release: the engine's ``churn`` is
    positive from the next request on, which is when ``ours-hold``'s own fill terms stop. It also counts the
    requests it saw before that release (``fill_requests``)."""

    def __init__(self, fleet: Fleet, policy: str | Policy, demand: DemandMix | DemandLearner) -> None:
        super().__init__(fleet, policy, demand)
        self.requests = 0
        self.fill_requests: int | None = None

    def choose(self, request: PlacementRequest) -> PlacementDecision | None:
        self.requests += 1
        return super().choose(request)

    def release(self, node: str, gpu_index: int, start: int, destroy: bool = True) -> None:
        super().release(node, gpu_index, start, destroy)
        if self.fill_requests is None:
            self.fill_requests = self.requests
        if isinstance(self.policy, FillPull) and self.policy.filling:
            self.policy.fill_over()
            # The cached ranks carry the fill's pull; the engine keys them on the demand snapshot only.
            self._ranks.clear()


def rules() -> dict[str, HoldingFragmentationAware]:
    return {
        KEPT: HoldingFragmentationAware(),
        "fill pull 0.1 (must equal the kept rule)": FillPull(0.1),
        "fill pull 0.2": FillPull(0.2),
        "fill pull 0.3": FillPull(0.3),
        "fill pull 0.5": FillPull(0.5),
    }


def family(model: GpuModel, gpus: int, alphas: Sequence[float], t0: float) -> None:
    """The fill-until-full columns, cold and warm learner: no release, so the fill pull throughout."""
    warm_served: list[dict[str, int]] = []

    def served(sample: Sample) -> dict[str, int]:
        # Each rule cold, then warm on the same draw; the warm column shares the draw's peers and optimum.
        cold: dict[str, int] = {}
        warm: dict[str, int] = {}
        for name, p in rules().items():
            cold[name] = serve(sample, p, False, FillPullEngine)
            warm[name] = serve(sample, p, True, FillPullEngine)
        warm_served.append(warm)
        return cold

    cold = sweep(model, gpus, alphas, SEEDS[gpus], served)
    warm = [Outcome(o.sample, o.optimum, o.proven, {**o.served, **w}) for o, w in zip(cold, warm_served, strict=True)]
    for label, outcomes in (("cold", cold), ("warm learner", warm)):

        def moved(name: str, outcomes: list[Outcome] = outcomes) -> str:
            slices = [o.served[name] - o.served[KEPT] for o in outcomes if o.served[name] != o.served[KEPT]]
            return f"{len(slices)}: {', '.join(f'{d:+d}' for d in slices)}"

        heading = f"{gpus} GPUs, concentrations {list(alphas)}, {len(outcomes)} tuning samples, {label}"
        column = ("samples moved vs kept: slices", "---", moved)
        print_table(outcomes, list(rules()), heading, t0, worst=True, columns=[column])


def online(model: GpuModel, hours: float, seeds: int, t0: float) -> None:
    print(f"\nDepartures, mean lifetime {hours:g} h, seeds 0-{seeds - 1} per cell ({time.perf_counter() - t0:.0f} s)\n")
    print(
        "| rule | lifetimes | GPUs | served of offered | vs kept: mean | runs moved | worst | best | "
        "compute admitted vs kept | requests before the first release |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for tail in ("lognormal", "pareto"):
        for gpus in ONLINE_GPUS:
            runs = [
                poisson_pods(model, gpus, a, s, tail, PODS, hours * 3600) for a in ONLINE_ALPHAS for s in range(seeds)
            ]
            compute = [sum(SHAPES[p.shape][0] for p in pods) for pods in runs]
            base: list[tuple[float, float]] = []
            for name, policy in rules().items():
                got: list[tuple[float, float]] = []
                fill: list[int] = []
                for pods, offered in zip(runs, compute, strict=True):
                    started: dict[int, int] = {}
                    engines: list[FillPullEngine] = []

                    def make(
                        fleet: Fleet,
                        policy: str | Policy,
                        demand: DemandMix | DemandLearner,
                        engines: list[FillPullEngine] = engines,
                    ) -> PlacementEngine:
                        engines.append(FillPullEngine(fleet, policy, demand))
                        return engines[-1]

                    share = replay_held(model, gpus, pods, policy, started=started, make_engine=make).share
                    got.append((share, sum(SHAPES[pods[k].shape][0] for k in started) / offered))
                    e = engines[0]
                    fill.append(e.fill_requests if e.fill_requests is not None else e.requests)
                if name == KEPT:
                    base = got
                d = [a[0] - b[0] for a, b in zip(got, base, strict=True)]
                skill = [a[1] - b[1] for a, b in zip(got, base, strict=True)]
                if name.startswith("fill pull 0.1") and (any(d) or any(skill)):
                    raise SystemExit("the fill pull of 0.1 must replay as the kept rule")
                print(
                    f"| {name} | {tail} | {gpus} | {100 * statistics.fmean(a for a, _ in got):.2f} % "
                    f"| {100 * statistics.fmean(d):+.2f} | {sum(abs(x) > 1e-12 for x in d)} of {len(d)} "
                    f"| {100 * min(d):+.2f} | {100 * max(d):+.2f} | {100 * statistics.fmean(skill):+.2f} "
                    f"| {statistics.fmean(fill):.0f} |",
                    flush=True,
                )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gpus", type=int, nargs="*", default=[8, 64], choices=list(SEEDS))
    ap.add_argument("--alphas", type=float, nargs="*", default=[0.5, 2.0], choices=[0.2, 0.5, 2.0])
    ap.add_argument("--skip-family", action="store_true")
    ap.add_argument("--skip-online", action="store_true")
    ap.add_argument("--seeds", type=int, default=3, help="online seeds per concentration")
    ap.add_argument("--hours", type=float, nargs="*", default=[1.0], help="online mean lifetimes")
    args = ap.parse_args(argv)
    h100 = load_catalog().model("NVIDIA H100 80GB HBM3")
    t0 = time.perf_counter()
    for gpus in [] if args.skip_family else args.gpus:
        family(h100, gpus, args.alphas, t0)
    for hours in [] if args.skip_online else args.hours:
        online(h100, hours, args.seeds, t0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
