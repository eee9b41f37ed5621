"""``python bench/placement_confirm.py [--gpus 8] [--alphas 0.5 2] [--worst N] [--rules NAME ...]`` (tuning draws
only): where ``ours-hold``'s per-sample misses come from on a cold 8-GPU fill (issue 14, session 13).

Diagnosis, per sample (H100, Dirichlet 0.5 and 2, seeds 0-39 at 8 GPUs, learners from the prior):

* the distribution of the gap closed (``<= 0``, ``0-50``, ``50-100``, ``100 %``, and the samples without a gap) and
  which samples pull the per-sample mean below the pooled figure (small gaps in slices weigh as much as large ones);
* every request's decision in ``ours-hold``'s run (placed, placed although the rank flagged it, held, did not fit),
  each placed or held one **flipped alone** (a held request forced, a placed one refused: it is seen, not
  committed), the rest of the run replayed by the rule: the flip's change of compute served. A hold whose flip
  serves more is a *wrong hold* (the room it kept was not used); a placement whose refusal serves more is a *missed
  hold*. Single flips do not add up (two wrong holds may each be cheap), so the best single flip is reported as a
  lower bound of what a better admission would have recovered;
* beside it, per profile, what the optimum (``allocations/mig/offline.py``, which refuses with hindsight) serves
  against ``ours-hold``, and the must-accept reference (``bench/placement_reference.py``: best placement, no
  refusal).

Candidates (``--rules``, bench-only subclasses of the kept rule; docs/placement.md "Session 13: which holds are
confirmed" quotes them) are compared with the kept rule on the same draws.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, not installed

from allocations.mig.catalog import load_catalog  # noqa: E402
from allocations.mig.demand import DemandLearner  # noqa: E402
from allocations.mig.engine import PlacementEngine, empty_fleet  # noqa: E402
from allocations.mig.fleet import PlacementRequest  # noqa: E402
from allocations.mig.offline import offline_optimum  # noqa: E402
from allocations.mig.policies import HoldContext, HoldingFragmentationAware  # noqa: E402
from bench.placement_family import Sample, make_sample, run_sample  # noqa: E402
from bench.placement_reference import must_accept_optimum, true_weights  # noqa: E402

H100 = "NVIDIA H100 80GB HBM3"
SEEDS = {8: 40, 64: 20}
PLACED, FLAGGED, HELD, NOFIT = "placed", "placed-flagged", "held", "no-fit"


@dataclass
class Step:
    """One request's decision in a run."""

    k: int
    profile: str
    compute: int
    outcome: str
    stranded: float = math.nan  # the confirmation's change with the counts of now (flagged requests only)
    limit: float = math.nan
    seen: float = 0.0  # requests in the counts of now
    held: float = 0.0  # compute held so far in the run (before this request)
    allocated: float = 0.0  # share of the pool's compute allocated before this request


class Recording(HoldingFragmentationAware):
    """The kept rule, recording what its confirmation saw; ``flip`` inverts its verdict for the current request."""

    def __init__(self) -> None:
        super().__init__()
        self.last: tuple[float, float, float, bool] | None = None
        self.flip = False

    def holds(self, ctx: HoldContext) -> bool:
        limit = self.CONFIRM + self.CONFIRM_GPUS / max(1, ctx.gpus)
        verdict = self.judge(ctx)
        self.last = (self.priced(ctx, self.stranded_now(ctx)), limit, sum(ctx.counts.values()), verdict)
        return verdict != self.flip

    def judge(self, ctx: HoldContext) -> bool:
        return super().holds(ctx)


def candidates() -> dict[str, Recording]:
    return {"ours-hold (kept)": Recording()}


def run(sample: Sample, policy: Recording, flip: int = -1) -> tuple[int, list[Step]]:
    """Compute served by the rule on the sample (cold learner) and every request's step, request ``flip`` inverted:
    a held (or flagged and placed) request has the confirmation's verdict inverted; an unflagged placed one is seen
    and not committed (refused)."""
    per_node = min(8, sample.gpus)
    engine = PlacementEngine(empty_fleet(sample.model, sample.gpus // per_node, per_node), policy, DemandLearner())
    sized = engine.policy  # the engine sizes a copy of the policy for its fleet (open cost)
    assert isinstance(sized, Recording)
    policy = sized
    total = sample.model.compute_slices * sample.gpus
    served = 0
    steps: list[Step] = []
    for k, name in enumerate(sample.requests):
        compute = sample.model.profile(name).compute_slices
        held_before, allocated = engine.held, served / total
        policy.last = None
        policy.flip = k == flip
        decision = engine.choose(PlacementRequest(name))
        policy.flip = False
        verdict = policy.last[3] if policy.last is not None else False
        if decision is not None and k == flip and policy.last is None:
            decision = None  # refused: an unflagged placement flipped
        if decision is not None:
            engine.commit(decision, f"r{k}")
            served += compute
        if policy.last is None:
            outcome = PLACED if decision is not None or k == flip else NOFIT
        else:
            outcome = HELD if verdict else FLAGGED
        step = Step(k, name, compute, outcome, held=held_before, allocated=allocated)
        if policy.last is not None:
            step.stranded, step.limit, step.seen, _ = policy.last
        steps.append(step)
    return served, steps


@dataclass
class Diagnosis:
    sample: Sample
    optimum: float
    first_fit: int
    peers: dict[str, int]
    served: int
    steps: list[Step]
    flips: dict[int, int] = field(default_factory=dict)  # request -> change of compute served when flipped alone
    optimum_placed: dict[str, int] = field(default_factory=dict)
    must_accept: int | None = None

    @property
    def gap(self) -> float:
        return self.optimum - self.first_fit

    def closed(self, served: int | None = None) -> float:
        """As :meth:`bench.placement_family.Outcome.closed` (NaN under 2 slices or 1 % of the optimum)."""
        if self.gap < max(2.0, 0.01 * self.optimum):
            return math.nan
        return ((self.served if served is None else served) - self.first_fit) / self.gap

    def served_by_profile(self) -> Counter[str]:
        return Counter(s.profile for s in self.steps if s.outcome in (PLACED, FLAGGED))


def diagnose(sample: Sample, flips: bool) -> Diagnosis:
    outcome = run_sample(sample, ["first-fit", "best-fit", "hami", "ours-hold"])
    best = offline_optimum(sample.model, sample.gpus, Counter(sample.requests), node_limit=2000)
    served, steps = run(sample, Recording())
    if served != outcome.served["ours-hold"]:
        raise AssertionError(f"recording changed the rule: {served} != {outcome.served['ours-hold']}")
    d = Diagnosis(sample, outcome.optimum, outcome.served["first-fit"], dict(outcome.served), served, steps)
    d.optimum_placed = dict(best.placed)
    if flips:
        for s in steps:
            if s.outcome != NOFIT:
                d.flips[s.k] = run(sample, Recording(), flip=s.k)[0] - served
    return d


def bins(values: Sequence[float]) -> str:
    edges = [(-math.inf, 0.0, "<= 0 %"), (0.0, 0.5, "0-50 %"), (0.5, 1.0, "50-100 %"), (1.0, math.inf, "100 %")]
    out = []
    for lo, hi, label in edges:
        n = sum(1 for v in values if (v <= hi if hi == 0.0 else lo < v <= hi) or (lo == 1.0 and v >= 1.0))
        if lo == 0.5:
            n = sum(1 for v in values if 0.5 < v < 1.0)
        if lo == 1.0:
            n = sum(1 for v in values if v >= 1.0)
        out.append(f"{label}: {n}")
    return ", ".join(out)


def report(diags: Sequence[Diagnosis], worst: int) -> None:
    closed = [(d.closed(), d) for d in diags]
    scored = [(c, d) for c, d in closed if not math.isnan(c)]
    values = [c for c, _ in scored]
    gaps = sum(max(0.0, d.gap) for d in diags)
    pooled = sum(d.served - d.first_fit for d in diags) / gaps
    print(f"\n{len(diags)} samples, {len(scored)} with a gap; per sample {100 * statistics.fmean(values):.1f} %, "
          f"pooled {100 * pooled:.1f} %")
    print(f"distribution: {bins(values)}")
    for lo, hi in ((2, 4), (4, 7), (7, 11), (11, 1000)):
        group = [c for c, d in scored if lo <= d.gap < hi]
        if group:
            print(f"gap {lo}-{hi - 1} slices: {len(group)} samples, mean closed {100 * statistics.fmean(group):.1f} %")
    print("\n| sample | gap | ours-hold - first-fit | closed | must-accept - ff | holds (wrong) | best flip | "
          "flips that gain: k profile outcome stranded/limit seen alloc delta | ours - optimum per profile |")
    print("|---|---:|---:|---:|---:|---|---:|---|---|")
    for c, d in sorted(scored, key=lambda cd: cd[0])[:worst]:
        held = [s for s in d.steps if s.outcome == HELD]
        wrong = [s for s in held if d.flips.get(s.k, 0) > 0]
        gains = [s for s in d.steps if d.flips.get(s.k, 0) > 0]
        best = max(d.flips.values(), default=0)
        ours = d.served_by_profile()
        diff = {p: ours.get(p, 0) - d.optimum_placed.get(p, 0) for p in set(ours) | set(d.optimum_placed)}
        ma = d.must_accept - d.first_fit if d.must_accept is not None else "-"
        flips = "; ".join(
            f"{s.k} {s.profile} {s.outcome} {s.stranded:.2f}/{s.limit:.2f} {s.seen:.0f} "
            f"{100 * s.allocated:.0f}% {d.flips[s.k]:+d}"
            for s in gains
        )
        print(f"| {d.sample.alpha:g}/{d.sample.seed} | {d.gap:.0f} | {d.served - d.first_fit:+d} | {100 * c:.0f} % "
              f"| {ma} | {len(held)} ({len(wrong)}) | {best:+d} | {flips} | "
              f"{', '.join(f'{p} {v:+d}' for p, v in sorted(diff.items()) if v)} |")
    # Aggregate over every flip: which decisions, when a flip alone gains.
    print("\n| decision | count | flip gains (>0) | flip loses (<0) | mean change |")
    print("|---|---:|---:|---:|---:|")
    for kind in (HELD, FLAGGED, PLACED):
        ch = [d.flips[s.k] for d in diags for s in d.steps if s.outcome == kind and s.k in d.flips]
        if ch:
            print(f"| {kind} | {len(ch)} | {sum(1 for x in ch if x > 0)} | {sum(1 for x in ch if x < 0)} "
                  f"| {statistics.fmean(ch):+.2f} |")
    print("\nholds by the counts seen (n) and by the pool's allocated share: holds, wrong (flip gains), right (flip loses)")
    for label, key, edges in (
        ("n", lambda s: s.seen, (0, 10, 20, 30, 40, 1000)),
        ("allocated", lambda s: s.allocated, (0, 0.25, 0.5, 0.75, 2)),
        ("margin", lambda s: s.stranded - s.limit, (0, 0.1, 0.2, 0.4, 1000)),
    ):
        row = []
        for lo, hi in zip(edges, edges[1:], strict=False):
            hs = [(d, s) for d in diags for s in d.steps if s.outcome == HELD and lo <= key(s) < hi and s.k in d.flips]
            row.append(f"[{lo:g},{hi:g}): {len(hs)}/{sum(1 for d, s in hs if d.flips[s.k] > 0)}"
                       f"/{sum(1 for d, s in hs if d.flips[s.k] < 0)}")
        print(f"  {label}: " + "  ".join(row))
    profiles = Counter(s.profile for d in diags for s in d.steps if s.outcome == HELD)
    for p, n in profiles.most_common():
        wrong = sum(1 for d in diags for s in d.steps if s.outcome == HELD and s.profile == p and d.flips.get(s.k, 0) > 0)
        right = sum(1 for d in diags for s in d.steps if s.outcome == HELD and s.profile == p and d.flips.get(s.k, 0) < 0)
        print(f"  {p}: {n} holds, {wrong} wrong, {right} right")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gpus", type=int, default=8, choices=list(SEEDS))
    ap.add_argument("--alphas", type=float, nargs="*", default=[0.5, 2.0])
    ap.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 (default 40 at 8 GPUs, 20 at 64)")
    ap.add_argument("--worst", type=int, default=12, help="samples listed (worst gap closed first)")
    ap.add_argument("--no-flips", action="store_true")
    args = ap.parse_args(argv)
    model = load_catalog().model(H100)
    t0 = time.perf_counter()
    diags = []
    for alpha in args.alphas:
        for seed in range(args.seeds or SEEDS[args.gpus]):
            diags.append(diagnose(make_sample(model, args.gpus, alpha, seed), not args.no_flips))
    scored = sorted((d for d in diags if not math.isnan(d.closed())), key=lambda d: d.closed())
    for d in scored[: args.worst]:
        if args.gpus <= 8:
            d.must_accept = must_accept_optimum(
                model, d.sample.gpus, d.sample.requests, true_weights(model, d.sample.requests), beam=1000
            ).value
    print(f"tuning H100, {args.gpus} GPUs, cold, concentrations {args.alphas} ({time.perf_counter() - t0:.0f} s)")
    report(diags, args.worst)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
