"""``ours-hold`` weighed in slice-hours (issue 14, session 10): tried on the departures, NOT adopted.

``python bench/placement_lifetimes.py [--trace-dir DIR]``: the HOLD-OUT report (Poisson draws of
``bench/placement_policy_report.py``: concentrations 0.3, 1 and 3, seeds 1000-1005, 5,000 arrivals, 16 and 32
H100s; and the trace at 16, 24 and 32). The rules were compared on the tuning draws by
``bench/placement_hold_rules.py --skip-family --trace-dir DIR``.

On the Alibaba trace at 24 GPUs ``ours-hold`` holds 4g.40gb pods to keep GPUs whole for 7g.80gb; counted in
compute slices that is right, but a 4g pod there runs about twice as long as a 7g, so in slice-hours (what the
online target counts) it is not. The idea tried here: confirm a hold in slice-hours, each instance worth its
compute times its profile's mean lifetime relative to the mix's mean, lifetimes learnt online (never the
arriving pod's own duration: no clairvoyance). docs/placement.md ("Admission", "Lifetimes") has the figures
from ``bench/placement_hold_rules.py`` and why it was left out of ``ours-hold``.

* :class:`LifetimeLearner`: a :class:`DemandLearner` that is also told when each request starts and ends. Its
  mean lifetime per profile is (seconds run by the ended requests + ages of the running ones) / ended requests:
  the mean of the ended ones alone is biased short where lifetimes are heavy-tailed (long requests have not
  ended yet; on the trace the ended 4g pods look *shorter* than the 7g ones for most of the replay), and
  counting the time the running ones have run so far is the usual estimate under censoring (exact for
  exponential lifetimes). ``ended_only=True`` gives the biased estimate, for comparison.
* :class:`LifetimeHold`: ``ours-hold`` whose confirmation also runs in slice-hours once lifetimes are known;
  ``mode="veto"`` holds only when both confirmations agree, ``"replace"`` uses the slice-hours one alone. With
  nothing ended (fill-until-full) it is ``ours-hold``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, not installed

from allocations.mig.catalog import load_catalog  # noqa: E402
from allocations.mig.demand import DemandLearner, DemandMix  # noqa: E402
from allocations.mig.layout import Geometry, LayoutKey  # noqa: E402
from allocations.mig.policies import HoldContext, HoldingFragmentationAware  # noqa: E402

#: Ended requests of a profile before its mean lifetime is used: one early short run is noise.
MIN_ENDED = 3


class LifetimeLearner(DemandLearner):
    def __init__(self, ended_only: bool = False) -> None:
        super().__init__()
        self.ended_only = ended_only
        self._running: dict[str, tuple[str, float]] = {}  # owner -> (profile, start)
        self._ended: dict[str, tuple[int, float]] = {}  # profile -> (ended requests, seconds they ran)
        self._now = float("-inf")

    def observe_start(self, owner: str, profile: str, at: float) -> None:
        self._running[owner] = (profile, at)
        self.advance(at)

    def observe_end(self, owner: str, at: float) -> None:
        found = self._running.pop(owner, None)
        self.advance(at)
        if found is not None:
            profile, began = found
            n, total = self._ended.get(profile, (0, 0.0))
            self._ended[profile] = (n + 1, total + at - began)

    def advance(self, now: float) -> None:
        """The clock the running requests' ages are measured at."""
        self._now = max(self._now, now)

    def lifetimes(self) -> dict[str, float]:
        """Mean lifetime (seconds) per profile with ``MIN_ENDED`` ended requests; empty while none has."""
        ages: dict[str, float] = {}
        if not self.ended_only:
            for profile, began in self._running.values():
                ages[profile] = ages.get(profile, 0.0) + self._now - began
        return {
            name: (total + ages.get(name, 0.0)) / n
            for name, (n, total) in self._ended.items()
            if n >= MIN_ENDED and total > 0
        }


def relative_lifetimes(
    geom: Geometry, weights: tuple[float, ...], lifetimes: Mapping[str, float]
) -> tuple[float, ...] | None:
    """Each profile's mean lifetime (profile order) over the request-weighted mean of the known ones; a profile
    with none learnt counts 1. ``None`` when no profile of the mix has one."""
    known = [(w, lifetimes[p.name]) for w, p in zip(weights, geom.profiles, strict=True) if p.name in lifetimes]
    share = sum(w for w, _ in known)
    mean = sum(w * life for w, life in known) / share if share > 0 else 0.0
    if mean <= 0:
        return None
    return tuple(lifetimes[p.name] / mean if p.name in lifetimes else 1.0 for p in geom.profiles)


def valued_fill(
    geom: Geometry,
    key: LayoutKey,
    weights: tuple[float, ...],
    values: tuple[float, ...],
    persistence: float,
    memo: dict[LayoutKey, float],
) -> float:
    """``allocations.mig.policies.expected_fill`` with each instance of profile q worth ``values[q]`` instead of
    its compute (here: compute x relative lifetime, i.e. slice-hours)."""
    found = memo.get(key)
    if found is not None:
        return found
    gain = miss = 0.0
    for q, w in enumerate(weights):
        if not w:
            continue
        options = geom.options(key, q)
        if options:
            best = max(valued_fill(geom, o.after, weights, values, persistence, memo) for o in options)
            gain += w * (values[q] + best)
        else:
            miss += w
    value = gain / (1.0 - persistence * miss)
    memo[key] = value
    return value


class LifetimeHold(HoldingFragmentationAware):
    """``ours-hold`` with its confirmation also in slice-hours, lifetimes from ``learner`` (see the module)."""

    def __init__(self, learner: LifetimeLearner, mode: str = "veto") -> None:
        super().__init__()
        self.learner = learner
        self.mode = mode
        self._memo: dict[tuple[int, tuple[float, ...], tuple[float, ...]], dict[LayoutKey, float]] = {}

    def holds(self, ctx: HoldContext) -> bool:
        held = super().holds(ctx)
        if self.mode == "veto" and not held:
            return False
        geom = ctx.geom
        weights = tuple(round(w, 2) for w in DemandMix(ctx.counts, self.CONFIRM_PRIOR).weights(geom.model))
        lives = relative_lifetimes(geom, weights, self.learner.lifetimes())
        if lives is None:
            return held
        values = tuple(c * round(life, 2) for c, life in zip(geom.compute, lives, strict=True))
        if len(self._memo) > 64:
            self._memo.clear()
        memo = self._memo.setdefault((id(geom), weights, values), {})
        before = valued_fill(geom, ctx.key, weights, values, self.persistence, memo)
        after = values[ctx.i] + valued_fill(geom, ctx.option.after, weights, values, self.persistence, memo)
        return round(before - after, 9) > self.CONFIRM + self.CONFIRM_GPUS / max(1, ctx.gpus)


def main(argv: Sequence[str] | None = None) -> int:
    # Imported here: bench.placement_departures imports this module for LifetimeLearner; run as a script this
    # module is __main__, so the classes the replay recognises are the imported module's.
    from bench.placement import Pod, read_trace
    from bench.placement_departures import poisson_pods, replay, replay_held
    from bench.placement_lifetimes import LifetimeHold, LifetimeLearner

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace-dir", type=Path, help="also replay the Alibaba trace (openb_pod_list_default.csv)")
    args = ap.parse_args(argv)
    h100 = load_catalog().model("NVIDIA H100 80GB HBM3")
    names = ("first-fit", "best-fit", "ours", "ours-hold", "ours-hold + veto", "ours-hold, slice-hours alone")

    def shares(gpus: int, pods: Sequence[Pod]) -> dict[str, float]:
        out = {name: replay(h100, gpus, pods, name).share for name in names[:4]}
        for name, mode in zip(names[4:], ("veto", "replace"), strict=True):
            learner = LifetimeLearner()
            out[name] = replay_held(h100, gpus, pods, LifetimeHold(learner, mode), demand=learner).share
        return out

    print("| workload | GPUs | " + " | ".join(names) + " |\n|---|---:|" + "---:|" * len(names))
    if args.trace_dir is not None:
        trace, _ = read_trace(args.trace_dir / "openb_pod_list_default.csv")
        trace.sort(key=lambda p: p.created)
        for gpus in (16, 24, 32):
            got = shares(gpus, trace)
            cells = [f"{100 * got[n]:.3f} %" for n in names]
            print(f"| trace-default | {gpus} | " + " | ".join(cells) + " |", flush=True)
    for tail in ("lognormal", "pareto"):
        for gpus in (16, 32):
            runs = [
                shares(gpus, poisson_pods(h100, gpus, alpha, 1000 + seed, tail, 5000))
                for alpha in (0.3, 1.0, 3.0)
                for seed in range(6)
            ]
            cells = []
            for n in names:
                worst = min(min(r[n] - r["first-fit"], r[n] - r["best-fit"]) for r in runs)
                cells.append(f"{100 * statistics.fmean(r[n] for r in runs):.2f} % ({100 * worst:+.2f})")
            label = f"Poisson {tail}, mean of {len(runs)} (worst run vs either peer)"
            print(f"| {label} | {gpus} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
