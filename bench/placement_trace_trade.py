"""``python bench/placement_trace_trade.py --trace-dir DIR [--gpus 16 24 32] [--rules NAME ...]``: what
``ours-hold``'s holds and placements trade away on the Alibaba trace replay (issue 14, session 13).

On the trace (``bench/placement.py --departures``) ``ours-hold`` serves more slice-hours than best-fit but admits
less of the offered compute. This replays the trace (default file, H100, as ``bench/placement_departures``) for
first-fit, best-fit, ``ours`` and ``ours-hold`` and prints, per fleet size:

* each policy's slice-hours share split exactly into four terms (in points of offered slice-hours):
  **skill**, the compute admitted as a share of offered (every pod counted at the trace's mean lifetime per compute
  slice); **profile**, the admitted compute times its profile's mean lifetime's excess over the trace's mean (a
  policy that admits more of the profiles that run long gains here); **when**, the admitted compute times the
  excess of the mean lifetime of its profile's pods arriving in the same tenth of the replay over the profile's
  mean (the trace's long pods come in bursts); **pod**, what is left: the admitted pods' own lifetimes' excess over
  their profile-and-tenth mean (the luck of which pod of a kind was admitted). Unlike the Poisson draws
  (``bench/placement_poisson_runs.py``) the trace's lifetimes are not independent of profile or time, so the first
  three terms are what a policy's admissions select; the last is the nearest to a lottery, though not of mean zero
  either (lifetimes drift within a tenth too: the first tenth of the arrivals spans 2,860 of the 3,584 hours);
* per profile: pods offered, admitted per policy, and ``ours-hold``'s holds (placed on a retry, placed forced, lost);
* per lifetime bucket and per tenth of the replay: ``ours-hold`` minus best-fit, compute slices and slice-hours;
* the pods admitted by best-fit and not by ``ours-hold``: refused on arrival (no room) or held and then lost.

``--cut N`` replays again with the 1..N largest pods of that difference given their profile's median lifetime
(what a few long pods did to the rest of the replay). ``--rules`` adds bench-only ``ours-hold`` variants of
``bench/placement_poisson_runs.py`` (e.g. a stronger best-fit pull) or ``bench/placement_hold_outcomes.py`` (prices of
a hold) to the first two tables. The trace is the workload
the issue names: reported, never tuned on here.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, not installed

from allocations.mig.catalog import GpuModel, load_catalog  # noqa: E402
from allocations.mig.engine import PlacementEngine  # noqa: E402
from allocations.mig.policies import Policy  # noqa: E402
from bench.placement import SHAPES, Pod, profile_of, read_trace  # noqa: E402
from bench.placement_departures import HOLD_WAIT_S, compute_share, replay_held  # noqa: E402
from bench.placement_hold_outcomes import rules as priced  # noqa: E402
from bench.placement_poisson_runs import rules as pulled  # noqa: E402

POLICIES = ("first-fit", "best-fit", "ours", "ours-hold")
TENTHS = 10
#: Lifetime buckets (upper bounds, hours) for the duration table.
BUCKETS = (0.25, 1.0, 6.0, 24.0, 168.0, float("inf"))


@dataclass(frozen=True)
class Trade:
    started: dict[int, int]  # admitted pod -> start time
    fitted: frozenset[int]  # pods that fitted when they arrived (a pod not started then was held)
    whole: dict[int, int]  # GPUs a 7g could take when each pod arrived


def variants() -> dict[str, str | Policy]:
    """The bench-only rules of ``bench/placement_poisson_runs.py`` (pulls, reserves) and
    ``bench/placement_hold_outcomes.py`` (prices of a hold)."""
    return {**pulled(), **priced()}


def play(model: GpuModel, gpus: int, pods: Sequence[Pod], policy: str | Policy) -> Trade:
    fitted: set[int] = set()
    whole: dict[int, int] = {}
    largest = profile_of(model, "7g")

    def look(k: int, engine: PlacementEngine) -> None:
        fits = engine.fits_now()
        whole[k] = fits.get(largest, 0)
        if fits[profile_of(model, pods[k].shape)] > 0:
            fitted.add(k)

    started: dict[int, int] = {}
    replay_held(model, gpus, pods, policy, started=started, arriving=look)
    return Trade(started, frozenset(fitted), whole)


class Terms:
    """The exact split of a run's slice-hours share (module docstring)."""

    def __init__(self, pods: Sequence[Pod]) -> None:
        self.c = [SHAPES[p.shape][0] for p in pods]
        self.life = [(p.deleted - p.created) / 3600 for p in pods]
        self.tenth = [min(TENTHS - 1, k * TENTHS // len(pods)) for k in range(len(pods))]
        self.offered = sum(c * h for c, h in zip(self.c, self.life, strict=True))
        self.mean = self.offered / sum(self.c)
        by_shape: dict[str, list[float]] = {}
        by_cell: dict[tuple[str, int], list[float]] = {}
        for k, p in enumerate(pods):
            by_shape.setdefault(p.shape, []).append(self.life[k])
            by_cell.setdefault((p.shape, self.tenth[k]), []).append(self.life[k])
        shape_mean = {s: statistics.fmean(v) for s, v in by_shape.items()}
        self.profile = [shape_mean[p.shape] for p in pods]
        # The pod's own lifetime is left out of its cell's mean: one pod of 457 h would otherwise raise the "when"
        # of its own admission (and the split stays exact whatever the reference).
        self.cell = []
        for k, p in enumerate(pods):
            cell = by_cell[(p.shape, self.tenth[k])]
            self.cell.append((sum(cell) - self.life[k]) / (len(cell) - 1) if len(cell) > 1 else self.profile[k])

    def split(self, admitted: Sequence[int]) -> tuple[float, float, float, float]:
        """Skill, profile, when, pod: in points of offered slice-hours; they sum to the share."""
        out = [0.0, 0.0, 0.0, 0.0]
        for k in admitted:
            c = self.c[k]
            out[0] += c * self.mean
            out[1] += c * (self.profile[k] - self.mean)
            out[2] += c * (self.cell[k] - self.profile[k])
            out[3] += c * (self.life[k] - self.cell[k])
        skill, profile, when, pod = (100 * x / self.offered for x in out)
        return skill, profile, when, pod


def bucket(hours: float) -> int:
    return next(b for b, top in enumerate(BUCKETS) if hours <= top)


def bucket_name(b: int) -> str:
    low = 0.0 if b == 0 else BUCKETS[b - 1]
    return f"> {low:g} h" if BUCKETS[b] == float("inf") else f"{low:g}-{BUCKETS[b]:g} h"


def report(model: GpuModel, gpus: int, pods: Sequence[Pod], extra: Sequence[str], t0: float, cut: int = 0) -> None:
    terms = Terms(pods)
    runs: dict[str, Trade] = {p: play(model, gpus, pods, p) for p in POLICIES}
    for name in extra:
        runs[name] = play(model, gpus, pods, variants()[name])
    print(f"\n## {gpus} GPUs ({time.perf_counter() - t0:.0f} s)\n")
    print(
        "| policy | slice-hours | = skill (compute admitted) | + profile | + when | + pod (luck) | expected "
        "(skill + profile + when) | pods admitted |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in runs.items():
        parts = terms.split(list(r.started))
        print(
            f"| {name} | {sum(parts):.2f} % | {parts[0]:.2f} % | {parts[1]:+.2f} | {parts[2]:+.2f} | {parts[3]:+.2f} "
            f"| {sum(parts[:3]):.2f} % | {len(r.started)} |"
        )
    hold, bf = runs["ours-hold"], runs["best-fit"]
    held = hold.fitted - {k for k, t in hold.started.items() if t == pods[k].created}
    late = {k for k in held if k in hold.started}
    forced = {k for k in late if hold.started[k] - pods[k].created >= HOLD_WAIT_S}
    lost = held - late
    print("\n| profile | offered (pods) | " + " | ".join(runs) + " | ours-hold held: retry / forced / lost |")
    print("|---|---:|" + "---:|" * len(runs) + "---|")
    for s in SHAPES:
        ks = [k for k, p in enumerate(pods) if p.shape == s]
        if not ks:
            continue
        mine = set(ks)
        print(
            f"| {s} ({statistics.fmean(terms.life[k] for k in ks):.1f} h mean) | {len(ks)} | "
            + " | ".join(str(len(mine & r.started.keys())) for r in runs.values())
            + f" | {len(mine & (late - forced))} / {len(mine & forced)} / {len(mine & lost)} |"
        )
    print("\nours-hold - best-fit by lifetime: compute slices admitted / slice-hours in points")
    cells = []
    for b in range(len(BUCKETS)):
        ks = [k for k in range(len(pods)) if bucket(terms.life[k]) == b]
        dc = sum(terms.c[k] * ((k in hold.started) - (k in bf.started)) for k in ks)
        dh = sum(terms.c[k] * terms.life[k] * ((k in hold.started) - (k in bf.started)) for k in ks)
        cells.append(f"{bucket_name(b)} ({len(ks)} pods): {dc:+d} / {100 * dh / terms.offered:+.2f}")
    print("- " + "; ".join(cells))
    print(
        "\n| tenth of the arrivals | hours | pods (7g, median lifetime) | ours-hold - best-fit: compute slices "
        "| slice-hours (points) | 7g finding a whole GPU: best-fit / ours-hold | ours-hold 4g held / lost "
        "| running at its start, admitted by one only (slices): best-fit / ours-hold |"
    )
    print("|---:|---|---|---:|---:|---|---|---|")
    for t in range(TENTHS):
        ks = [k for k in range(len(pods)) if terms.tenth[k] == t]
        sev = [k for k in ks if pods[k].shape == "7g"]
        dc = sum(terms.c[k] * ((k in hold.started) - (k in bf.started)) for k in ks)
        dh = sum(terms.c[k] * terms.life[k] * ((k in hold.started) - (k in bf.started)) for k in ks)
        at = pods[ks[0]].created
        carried = [
            sum(
                terms.c[k]
                for k, s in mine.started.items()
                if k not in other.started and s < at < s + pods[k].deleted - pods[k].created
            )
            for mine, other in ((bf, hold), (hold, bf))
        ]
        four = [k for k in ks if pods[k].shape == "4g"]
        print(
            f"| {t + 1} | {at / 3600:.0f}-{pods[ks[-1]].created / 3600:.0f} | {len(ks)} ({len(sev)}, "
            f"{statistics.median(terms.life[k] for k in ks):.2f} h) | {dc:+d} | {100 * dh / terms.offered:+.2f} "
            f"| {sum(k in bf.started for k in sev)} / {sum(k in hold.started for k in sev)} "
            f"| {sum(k in held for k in four)} / {sum(k in lost for k in four)} | {carried[0]} / {carried[1]} |"
        )
    only_bf = bf.started.keys() - hold.started.keys()
    only_hold = hold.started.keys() - bf.started.keys()
    lost_bf = only_bf & lost
    print(
        f"- admitted by best-fit only: {len(only_bf)} pods, {sum(terms.c[k] for k in only_bf)} slices "
        f"({', '.join(f'{s} {n}' for s, n in sorted(Counter(pods[k].shape for k in only_bf).items()))}); of them "
        f"held by ours-hold and lost: {len(lost_bf)} ({sum(terms.c[k] for k in lost_bf)} slices), refused on "
        f"arrival: {len(only_bf - held)}; by ours-hold only: {len(only_hold)} pods, "
        f"{sum(terms.c[k] for k in only_hold)} slices "
        f"({', '.join(f'{s} {n}' for s, n in sorted(Counter(pods[k].shape for k in only_hold).items()))})"
    )

    def pending(k: int) -> int:
        """Pods ours-hold was holding when pod ``k`` arrived (a lost one counted until its deadline: at most)."""
        now = pods[k].created
        return sum(
            1 for h in held if pods[h].created < now and hold.started.get(h, pods[h].created + HOLD_WAIT_S) >= now
        )

    top = sorted(only_bf | only_hold, key=lambda k: -terms.c[k] * terms.life[k])[:5]
    gap = sum(terms.c[k] * terms.life[k] for k in only_hold) - sum(terms.c[k] * terms.life[k] for k in only_bf)
    sign = 1 if top[0] in only_hold else -1
    print(
        f"- slice-hours, ours-hold - best-fit: {100 * gap / terms.offered:+.2f} points; without the largest of those "
        f"pods: {100 * (gap - sign * terms.c[top[0]] * terms.life[top[0]]) / terms.offered:+.2f}"
    )
    print(
        "- largest pods admitted by one of the two (a 7g fitted at its arrival on N GPUs: best-fit / ours-hold): "
        + "; ".join(
            f"{pods[k].shape} of {terms.life[k]:.0f} h at {pods[k].created / 3600:.0f} h "
            f"({'ours-hold' if k in hold.started else 'best-fit'}, "
            f"{100 * terms.c[k] * terms.life[k] / terms.offered:.2f} points; a 7g fitted then on "
            f"{bf.whole[k]} / {hold.whole[k]} GPUs, ours-hold holding {pending(k)})"
            for k in top
        ),
        flush=True,
    )
    for n in range(1, cut + 1):
        counterfactual(model, gpus, pods, top[:n])


def counterfactual(model: GpuModel, gpus: int, pods: Sequence[Pod], cut: Sequence[int]) -> None:
    """The replay again with the pods ``cut`` (the largest admitted by only one of ours-hold and best-fit) given
    their profile's median lifetime: what those few long pods did to the rest of the replay."""
    median = {
        s: statistics.median(p.deleted - p.created for p in pods if p.shape == s)
        for s in SHAPES
        if any(p.shape == s for p in pods)
    }
    changed = [replace(p, deleted=p.created + int(median[p.shape])) if k in cut else p for k, p in enumerate(pods)]
    cells = []
    for p in POLICIES:
        started: dict[int, int] = {}
        served = replay_held(model, gpus, changed, p, started=started)
        cells.append(f"{p} {100 * served.share:.2f} / {100 * compute_share(changed, started):.2f} %")
    print(
        f"- {len(cut)} largest cut to their profile's median lifetime (slice-hours / compute admitted): "
        + "; ".join(cells),
        flush=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace-dir", type=Path, required=True, help="holds openb_pod_list_default.csv")
    ap.add_argument("--gpus", type=int, nargs="*", default=[16, 24, 32])
    ap.add_argument("--rules", nargs="*", default=[], choices=list(variants()), help="bench-only variants to add")
    ap.add_argument(
        "--cut", type=int, default=0, help="replay again with the 1..N largest pods of the two's difference cut short"
    )
    args = ap.parse_args(argv)
    h100 = load_catalog().model("NVIDIA H100 80GB HBM3")
    pods, _ = read_trace(args.trace_dir / "openb_pod_list_default.csv")
    pods.sort(key=lambda p: p.created)
    t0 = time.perf_counter()
    for gpus in args.gpus:
        report(h100, gpus, pods, args.rules, t0, args.cut)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
