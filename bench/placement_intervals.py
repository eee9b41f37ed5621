"""Per-sample records of a family study and their tables with bootstrap intervals (issue 14, session 14).

A fill-until-full family's per-sample mean of the gap closed rests on a few slices per sample (at 8 GPUs one slice
moves a sample by 17-50 points), so two rules' means are only compared with their sampling error: a 95 % interval
from resampling the samples (``DRAWS`` draws, a fixed seed, so a rerun prints the same interval).
``bench/placement_confirm.py --fresh`` writes one :class:`Record` per sample (JSON lines) and prints
:func:`cell_table` per cell and :func:`totals` over all of them; ``--report FILE`` reprints them from the file.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, not installed

from allocations.mig.catalog import GpuModel  # noqa: E402
from bench.placement_family import PEERS, Outcome, Sample, noise, summarise  # noqa: E402

DRAWS = 2000
BOOTSTRAP_SEED = 14


@dataclass(frozen=True)
class Record:
    """One sample: the peers' and each rule's compute served (cold learner, and warm when run) and the reference."""

    model: str  # short name (H100, H200)
    gpus: int
    alpha: float
    seed: int
    optimum: float
    proven: bool
    peers: dict[str, int]
    cold: dict[str, int]
    warm: dict[str, int]

    def dumps(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def load(lines: Iterable[str]) -> list[Record]:
    return [Record(**json.loads(line)) for line in lines if line.strip()]


def outcomes(records: Sequence[Record], model: GpuModel, warm: bool) -> list[Outcome]:
    """The records as the family's outcomes (peers and the rules' cold or warm runs), for ``summarise``."""
    out = []
    for r in records:
        sample = Sample(model, r.gpus, r.alpha, r.seed, {}, (), ())
        out.append(Outcome(sample, r.optimum, r.proven, {**r.peers, **(r.warm if warm else r.cold)}))
    return out


def bootstrap(values: Sequence[float], draws: int = DRAWS, seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """95 % interval of the mean of ``values`` by resampling them with replacement."""
    if not values:
        return math.nan, math.nan
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(values, k=len(values))) for _ in range(draws))
    return means[round(0.025 * draws)], means[round(0.975 * draws) - 1]


def below_any(outcomes: Sequence[Outcome], rule: str) -> int:
    """Samples on which the rule serves less than at least one peer beyond noise (as ``summarise``'s per peer)."""
    return sum(1 for o in outcomes if any(o.served[rule] < o.served[p] - noise(o) for p in PEERS))


@dataclass(frozen=True)
class Row:
    rule: str
    n: int  # samples with a gap
    mean: float
    low: float
    high: float
    pooled: float
    bins: tuple[int, int, int, int]  # <= 0, 0-50, 50-100, 100 %
    below: dict[str, int]
    any_below: int
    up: list[tuple[str, int]]
    down: list[tuple[str, int]]


def row(outcomes: Sequence[Outcome], rule: str, kept: str) -> Row:
    s = summarise(outcomes, rule)
    closed = [c for o in outcomes if not math.isnan(c := o.closed(rule))]
    low, high = bootstrap(closed)
    bins = (
        sum(1 for c in closed if c <= 0),
        sum(1 for c in closed if 0 < c <= 0.5),
        sum(1 for c in closed if 0.5 < c < 1),
        sum(1 for c in closed if c >= 1),
    )
    moved = [(f"{o.sample.alpha:g}/{o.sample.seed}", o.served[rule] - o.served[kept]) for o in outcomes]
    up = [m for m in moved if m[1] > 0]
    down = [m for m in moved if m[1] < 0]
    return Row(rule, s.n, s.mean, low, high, s.pooled, bins, s.below, below_any(outcomes, rule), up, down)


def cell_table(title: str, outcomes: Sequence[Outcome], rules: Sequence[str], kept: str) -> list[Row]:
    """Print one cell's table (per rule: per-sample mean [95 % interval], pooled, distribution, samples below each
    peer and any, samples moved against ``kept``) and return its rows."""
    unproven = sum(1 for o in outcomes if not o.proven)
    print(f"\n{title}: {len(outcomes)} samples, reference unproven on {unproven} (LP bound used)\n")
    print(
        "| rule | per sample [95 % interval] (n) | pooled | <= 0 / 0-50 / 50-100 / 100 % | below first-fit / "
        "best-fit / hami / any | moved vs kept: up (slices) / down (slices) |"
    )
    print("|---|---|---:|---|---|---|")
    rows = [row(outcomes, r, kept) for r in rules]
    for x in rows:
        moved = " / ".join(
            f"{len(ms)} ({sum(v for _, v in ms):+d})" + (f": {', '.join(f'{k} {v:+d}' for k, v in ms)}" if ms else "")
            for ms in (x.up, x.down)
        )
        below = " / ".join(str(x.below[p]) for p in PEERS)
        print(
            f"| {x.rule} | {100 * x.mean:.1f} % [{100 * x.low:.1f}, {100 * x.high:.1f}] ({x.n}) "
            f"| {100 * x.pooled:.1f} % | {' / '.join(map(str, x.bins))} | {below} / {x.any_below} | {moved} |",
            flush=True,
        )
    return rows


@dataclass(frozen=True)
class Verdict:
    line: str  # "ADOPT raw", "ADOPT trusted" or "KEEP"
    below: dict[str, int]  # rule -> samples below any peer, summed over the cells
    headline: dict[str, float]  # rule -> the H100 8-GPU cold per-sample mean


def decide(cells: dict[str, list[Row]], headline_cell: str, kept: str, verdicts: dict[str, str]) -> Verdict:
    """Session 14's pre-registered rule: a candidate qualifies if its samples below any peer, summed over every
    cell, are no more than ``kept``'s and its per-sample mean in ``headline_cell`` is above ``kept``'s; the
    qualifying candidate with the higher headline mean is adopted (``verdicts``: rule -> its line), else KEEP."""
    rules = [x.rule for x in next(iter(cells.values()))]
    below = {r: sum(x.any_below for rows in cells.values() for x in rows if x.rule == r) for r in rules}
    headline = {x.rule: x.mean for x in cells[headline_cell]}
    qualified = [r for r in verdicts if below[r] <= below[kept] and headline[r] > headline[kept]]
    if not qualified:
        return Verdict("KEEP", below, headline)
    return Verdict(verdicts[max(qualified, key=lambda r: headline[r])], below, headline)
