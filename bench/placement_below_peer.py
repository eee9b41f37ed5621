"""``python bench/placement_below_peer.py --baseline FILE ...`` / ``--diagnose [--seeds 300]`` /
``--tune [--seeds 300]`` / ``--check [--gpus 8 64] [--rules ...] [--out FILE]``: the samples where ``ours-hold``
serves less than a peer (issue 14, session 14).

The issue wants ``ours`` never below first-fit, best-fit or hami beyond noise (the family's rule: one compute slice or
0.5 % of the reference). On session 14's fresh family the kept rule and the adopted trusted 7g share are below a peer
on 17 of 1,440 runs. Three questions:

* ``--baseline``: how often the peers themselves fall below the best of the *other* peers beyond the same noise, on the
  same draws, next to how often each rule falls below the best peer. Read from the JSON lines that
  ``bench/placement_confirm.py --fresh --out`` writes (nothing rerun).
* ``--diagnose`` (tuning draws only: H100, Dirichlet 0.5 and 2, 8 GPUs, cold learner): for every run where the kept
  rule or the trusted share (``FillLeft(trusted=True)``) is below a peer, which part of the rule loses there. Each
  part is switched off alone (the holds: every held request placed; the unflag path; fill left's refusals) and the
  rank alone is ``ours``; each held or refused request is flipped alone (a held one placed, a refused one placed);
  and what the rule serves per profile against the best peer.
* ``--tune`` (the same tuning draws, cold) and ``--check``: two candidates aimed at the dominant cause, the holds,
  which a fill never gives back (the family drops a held request; the portal retries held requests after releases
  and forces them at a deadline, and a fill has neither): the trusted share with its held requests forced where
  ``ours`` would place them at the first arrival that fits nowhere after their hold (``RETRY_NOFIT``), or once no
  GPU is empty (``RETRY_FULL``; rejected on tuning). ``--check`` runs them against the kept rule and the trusted
  share on a second fresh family (seeds from ``CHECK_FIRST_SEED``, the fresh family's cells), one JSON line per
  sample (``--out``; a rerun skips the samples already there), with the rule stated before the run
  (:func:`verdict`). docs/placement.md "Session 14: where ours-hold falls below a peer" has the numbers.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, not installed

from allocations.mig.demand import DemandLearner  # noqa: E402
from allocations.mig.engine import PlacementEngine, empty_fleet  # noqa: E402
from allocations.mig.fleet import PlacementRequest  # noqa: E402
from allocations.mig.policies import HoldContext, get_policy  # noqa: E402
from bench.placement_confirm import (  # noqa: E402
    FILL_LEFT,
    HOLDOUT_ALPHAS,
    KEPT,
    MODELS,
    STUDY_RULES,
    TRUSTED,
    FillLeft,
    Recording,
    gpu_model,
)
from bench.placement_family import LOAD, PEERS, Sample, make_sample, run_sample  # noqa: E402
from bench.placement_intervals import Record, Row, cell_table, load, outcomes  # noqa: E402

TUNING_ALPHAS = (0.5, 2.0)
CHECK_FIRST_SEED = 9000  # session 14's second fresh family: no bench or doc used these seeds before
CHECK_SEEDS = {8: 100, 64: 20}
PLACED, HELD, REFUSED, NOFIT, LATE = "placed", "held", "refused", "no-fit", "placed late"
PARTS = ("holds", "unflag", "refusals")


def margin(optimum: float) -> float:
    """The family's noise (``bench.placement_family.noise``) from a sample's reference."""
    return max(1.0, 0.005 * optimum)


def below_best(served: dict[str, int], who: str, others: Iterable[str], optimum: float) -> bool:
    """Whether ``who`` serves less than the best of ``others`` beyond noise."""
    return served[who] < max(served[o] for o in others) - margin(optimum)


# ----- 1. the noise baseline ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BaselineRow:
    cell: str  # "H100, 8 GPUs"
    n: int
    peers: dict[str, int]  # peer -> samples below the best of the other peers
    rules: dict[str, tuple[int, int | None]]  # rule -> (cold, warm or None) samples below the best peer
    peers_disagree: int  # samples where at least one peer is below another beyond noise


def baseline(records: Sequence[Record]) -> list[BaselineRow]:
    """Per (model, fleet size): each peer's samples below the best of the other peers, and each rule's below the best
    peer, cold and warm (the peers do not learn: one run serves both)."""
    rows = []
    for gpus in sorted({r.gpus for r in records}):
        for short in MODELS:
            group = [r for r in records if r.gpus == gpus and r.model == short]
            if not group:
                continue
            peers = {
                p: sum(below_best(r.peers, p, [o for o in PEERS if o != p], r.optimum) for r in group) for p in PEERS
            }
            disagree = sum(any(below_best(r.peers, p, PEERS, r.optimum) for p in PEERS) for r in group)
            rules: dict[str, tuple[int, int | None]] = {}
            for rule in group[0].cold:
                cold = sum(below_best({**r.peers, **r.cold}, rule, PEERS, r.optimum) for r in group)
                warm = (
                    sum(below_best({**r.peers, **r.warm}, rule, PEERS, r.optimum) for r in group)
                    if all(r.warm for r in group)
                    else None
                )
                rules[rule] = (cold, warm)
            rows.append(BaselineRow(f"{short}, {gpus} GPUs", len(group), peers, rules, disagree))
    return rows


#: Short labels for the tables (the rules' names are long).
LABELS = {KEPT: "kept", FILL_LEFT: "fill left", TRUSTED: "trusted share"}


def print_baseline(rows: Sequence[BaselineRow]) -> None:
    rules = [r for r in STUDY_RULES if r in rows[0].rules] + [r for r in rows[0].rules if r not in STUDY_RULES]
    print("samples below the best of the others beyond noise (peers: of the other two peers; rules: of the 3 peers)")
    print(
        "| cell (samples) | "
        + " | ".join(PEERS)
        + " | peers disagree | "
        + " | ".join(f"{LABELS.get(r, r)} cold / warm" for r in rules)
        + " |"
    )
    print("|---|" + "---:|" * (len(PEERS) + 1 + len(rules)))

    def pair(c: int, w: int | None) -> str:
        return f"{c} / {w}" if w is not None else str(c)

    for x in rows:
        print(
            f"| {x.cell} ({x.n}) | "
            + " | ".join(str(x.peers[p]) for p in PEERS)
            + f" | {x.peers_disagree} | "
            + " | ".join(pair(*x.rules[r]) for r in rules)
            + " |"
        )
    n = sum(x.n for x in rows)
    total_peers = " | ".join(f"{sum(x.peers[p] for x in rows)} of {n}" for p in PEERS)
    cells = []
    for r in rules:
        cold = sum(x.rules[r][0] for x in rows)
        warms = [x.rules[r][1] for x in rows]
        warm = sum(w for w in warms if w is not None)
        runs = n + sum(x.n for x in rows if x.rules[r][1] is not None)
        cells.append(f"{cold} / {warm} ({cold + warm} of {runs} runs)")
    print(f"| sum ({n}) | {total_peers} | {sum(x.peers_disagree for x in rows)} of {n} | " + " | ".join(cells) + " |")


# ----- a run with parts of the rule switched off ----------------------------------------------------------------------


class Staged(Recording):
    """The kept rule with the unflag path switchable (``unflag_on``); ``never`` / ``flip`` as :class:`Recording`."""

    unflag_on = True

    def unflags(self, ctx: HoldContext) -> bool:
        return self.unflag_on and super().unflags(ctx)


@dataclass(frozen=True)
class Knobs:
    """Which parts of the rule run: ``refusals`` on is ``FillLeft(trusted=True)``, off the kept rule. ``flip``: the
    request whose hold verdict is inverted; ``let``: the request whose refusal is not applied (placed instead)."""

    refusals: bool = False
    holds: bool = True
    unflag: bool = True
    flip: int = -1
    let: int = -1
    #: Candidates (section 3): when the requests held so far are placed, forced as ``ours`` would place them:
    #: ``"no-fit"`` at the first arrival that fits nowhere after their hold, ``"full"`` once no GPU is empty.
    retry: str = ""


@dataclass
class Event:
    k: int
    profile: str
    compute: int
    outcome: str


@dataclass
class Play:
    served: int
    events: list[Event] = field(default_factory=list)

    def by_profile(self) -> Counter[str]:
        """Compute slices served per profile."""
        out: Counter[str] = Counter()
        for e in self.events:
            if e.outcome in (PLACED, LATE):
                out[e.profile] += e.compute
        return out


#: What fill left's refusal reads: the 7g still to come from the trusted share (a pure function of its arguments).
_TRUSTED_SHARE = FillLeft(trusted=True)


def refuses(sample: Sample, engine: PlacementEngine, learner: DemandLearner, served: int, compute: int) -> bool:
    """``FillLeft(trusted=True)``'s refusal of a placement that opens an empty GPU (``bench/placement_confirm.py``
    ``serve``): the 7g a fill of ``LOAD`` x the pool still brings reach the empty GPUs left."""
    empty = sum(1 for slot in engine._slots if not slot.key)  # noqa: SLF001
    pool = sample.model.compute_slices * sample.gpus
    left = min(LOAD * (pool - served), LOAD * pool - served - engine.held) - compute
    coming, _ = _TRUSTED_SHARE.coming(sample.model, learner.counts(), learner._prior_weight, left)  # noqa: SLF001
    return coming >= empty


def play(sample: Sample, knobs: Knobs = Knobs(), warm: bool = False, policy: Staged | None = None) -> Play:
    """The kept rule (or the trusted share) on the sample with the parts ``knobs`` switches off, every decision
    recorded. With every part on it serves what ``bench/placement_confirm.py``'s ``serve`` does (tested)."""
    per_node = min(8, sample.gpus)
    learner = DemandLearner()
    for name in sample.history if warm else ():
        learner.observe(name)
    engine = PlacementEngine(empty_fleet(sample.model, sample.gpus // per_node, per_node), policy or Staged(), learner)
    rule = engine.policy
    if not isinstance(rule, Staged):
        raise TypeError(rule)
    rule.never = not knobs.holds
    rule.unflag_on = knobs.unflag
    largest = max(sample.model.profiles, key=lambda p: p.compute_slices)
    out = Play(0)
    waiting: list[Event] = []  # held requests not placed yet (``retry``)
    for k, name in enumerate(sample.requests):
        compute = sample.model.profile(name).compute_slices
        rule.last = None
        rule.flip = k == knobs.flip
        decision = engine.choose(PlacementRequest(name))
        rule.flip = False
        outcome = HELD if decision is None and rule.last is not None else NOFIT  # held: the engine asked, and held
        if decision is not None and knobs.refusals and name != largest.name and k != knobs.let:
            slots = [engine._slots[engine._slot_index[(c.node, c.gpu_index)]] for c in decision.slots]  # noqa: SLF001
            if any(not slot.key for slot in slots) and refuses(sample, engine, learner, out.served, compute):
                decision, outcome = None, REFUSED
        if decision is not None:
            engine.commit(decision, f"r{k}")
            out.served += compute
            outcome = PLACED
        event = Event(k, name, compute, outcome)
        out.events.append(event)
        if outcome == HELD and knobs.retry:
            waiting.append(event)
        full = all(slot.key for slot in engine._slots)  # noqa: SLF001
        if waiting and ((knobs.retry == "no-fit" and outcome == NOFIT) or (knobs.retry == "full" and full)):
            out.served += retry(engine, waiting)
            waiting.clear()
    return out


def retry(engine: PlacementEngine, waiting: Sequence[Event]) -> int:
    """Place the held requests ``waiting``, in the order they came, where ``ours`` would (forced: no hold; the
    learner does not count them twice); those that no longer fit are lost. Returns the compute placed."""
    placed = 0
    for e in waiting:
        decision = engine._choose_one(PlacementRequest(e.profile, force=True), engine._snapshot())  # noqa: SLF001
        if decision is not None:
            engine.commit(decision, f"r{e.k}")
            e.outcome = LATE
            placed += e.compute
    return placed


def play_peer(sample: Sample, peer: str) -> Play:
    per_node = min(8, sample.gpus)
    engine = PlacementEngine(empty_fleet(sample.model, sample.gpus // per_node, per_node), get_policy(peer))
    out = Play(0)
    for k, name in enumerate(sample.requests):
        compute = sample.model.profile(name).compute_slices
        placed = engine.place(PlacementRequest(name), f"r{k}") is not None
        out.served += compute if placed else 0
        out.events.append(Event(k, name, compute, PLACED if placed else NOFIT))
    return out


# ----- 2. the diagnosis (tuning draws) ------------------------------------------------------------------------------


@dataclass
class Case:
    """One run below a peer: the rule (kept or trusted), the best peer and what each part is worth there."""

    sample: Sample
    optimum: float
    rule: str
    served: int
    peer: str
    peer_served: int
    ours: int  # the rank alone (no admission)
    flag_only: int  # the kept rule without holds and unflag path: the flag's order alone
    without: dict[str, int]  # part switched off alone -> served
    flips: list[tuple[Event, int]]  # held or refused request placed alone -> change of compute served
    by_profile: dict[str, int]  # compute served per profile, rule minus the best peer

    @property
    def deficit(self) -> int:
        return self.peer_served - self.served

    def cause(self) -> str:
        """The part whose removal alone lifts the run within noise of the best peer (the one that recovers most);
        else ``rank`` when ``ours`` alone is below that peer beyond noise; else ``together``."""
        recovered = {p: s - self.served for p, s in self.without.items()}
        fixes = [p for p, r in recovered.items() if self.served + r >= self.peer_served - margin(self.optimum)]
        if fixes:
            return max(fixes, key=lambda p: recovered[p])
        if self.ours < self.peer_served - margin(self.optimum):
            return "rank"
        return "together"


def diagnose_sample(sample: Sample, optimum: float) -> list[Case]:
    """The cases (kept and trusted runs below the best peer) of one sample, with every part's worth."""
    peers = {p: play_peer(sample, p) for p in PEERS}
    best = max(PEERS, key=lambda p: peers[p].served)
    cases = []
    for rule, refusals in ((KEPT, False), (TRUSTED, True)):
        full = play(sample, Knobs(refusals=refusals))
        if full.served >= peers[best].served - margin(optimum):
            continue
        ours = play_peer(sample, "ours").served
        flag_only = play(sample, Knobs(holds=False, unflag=False)).served
        without = {
            "holds": play(sample, Knobs(refusals=refusals, holds=False)).served,
            "unflag": play(sample, Knobs(refusals=refusals, unflag=False)).served,
        }
        if refusals:
            without["refusals"] = play(sample, Knobs()).served
        flips = []
        for e in full.events:
            if e.outcome == HELD:
                flips.append((e, play(sample, Knobs(refusals=refusals, flip=e.k)).served - full.served))
            elif e.outcome == REFUSED:
                flips.append((e, play(sample, Knobs(refusals=refusals, let=e.k)).served - full.served))
        ours_profiles, peer_profiles = full.by_profile(), peers[best].by_profile()
        diff = {p: ours_profiles[p] - peer_profiles[p] for p in set(ours_profiles) | set(peer_profiles)}
        cases.append(
            Case(sample, optimum, rule, full.served, best, peers[best].served, ours, flag_only, without, flips, diff)
        )
    return cases


def diagnose_task(task: tuple[float, int]) -> list[Case]:
    alpha, seed = task
    sample = make_sample(gpu_model("H100"), 8, alpha, seed)
    optimum = run_sample(sample, ()).optimum
    return diagnose_sample(sample, optimum)


def print_diagnosis(cases: Sequence[Case], samples: int) -> None:
    print(f"\n{samples} tuning samples (H100, 8 GPUs, cold, concentrations {TUNING_ALPHAS}): runs below the best peer")
    for rule in (KEPT, TRUSTED):
        mine = [c for c in cases if c.rule == rule]
        print(f"  {rule}: {len(mine)} runs, {sum(c.deficit for c in mine)} slices under the best peer")
    print(
        "\n| sample | rule | best peer | deficit | ours (rank alone) - peer | flag order only | without holds / "
        "unflag / refusals | cause | flips that gain (k profile decision +slices) | rule - peer per profile |"
    )
    print("|---|---|---|---:|---:|---:|---|---|---|---|")
    for c in sorted(cases, key=lambda c: (c.sample.alpha, c.sample.seed, c.rule)):
        without = " / ".join(f"{c.without[p] - c.served:+d}" if p in c.without else "-" for p in PARTS)
        gains = "; ".join(f"{e.k} {e.profile} {e.outcome} {d:+d}" for e, d in c.flips if d > 0) or "none"
        profiles = ", ".join(f"{p} {v:+d}" for p, v in sorted(c.by_profile.items()) if v)
        print(
            f"| {c.sample.alpha:g}/{c.sample.seed} | {'trusted' if c.rule == TRUSTED else 'kept'} | {c.peer} "
            f"| {c.deficit} | {c.ours - c.peer_served:+d} | {c.flag_only - c.peer_served:+d} | {without} "
            f"| {c.cause()} | {gains} | {profiles} |"
        )
    print("\ncauses (runs, slices under the best peer):")
    for rule in (KEPT, TRUSTED):
        mine = [c for c in cases if c.rule == rule]
        causes = Counter(c.cause() for c in mine)
        slices = Counter[str]()
        for c in mine:
            slices[c.cause()] += c.deficit
        print(f"  {rule}: " + ", ".join(f"{k} {v} ({slices[k]})" for k, v in causes.most_common()))
    print("\nsingle flips (held placed / refusal not applied) that gain, per profile and decision: count, slices")
    for rule in (KEPT, TRUSTED):
        flips = Counter[tuple[str, str, str]]()
        gained = Counter[tuple[str, str, str]]()
        every = Counter[tuple[str, str, str]]()
        for c in cases:
            for e, d in c.flips if c.rule == rule else ():
                key = (c.cause(), e.profile, e.outcome)
                every[key] += 1
                flips[key] += d > 0
                gained[key] += max(0, d)
        print(f"  {LABELS[rule]}, by the run's cause:")
        for key, n in sorted(every.items()):
            print(f"    {key[0]}: {key[1]} {key[2]}: {flips[key]} of {n} gain, {gained[key]:+d}")
    print("\nrule - best peer, compute slices per profile, summed over the runs:")
    for rule in (KEPT, TRUSTED):
        total = Counter[str]()
        for c in cases:
            if c.rule == rule:
                total.update(c.by_profile)
        print(f"  {rule}: " + ", ".join(f"{p} {v:+d}" for p, v in sorted(total.items()) if v))


# ----- 3. candidates and the check ----------------------------------------------------------------------------------


#: The rules of the check: the kept rule, the adopted trusted share and the candidates (both on the trusted share).
RETRY_NOFIT = "trusted share, held requests forced at the first arrival that fits nowhere"
RETRY_FULL = "trusted share, held requests forced once no GPU is empty"
RULES: dict[str, Knobs] = {
    KEPT: Knobs(),
    TRUSTED: Knobs(refusals=True),
    RETRY_NOFIT: Knobs(refusals=True, retry="no-fit"),
    RETRY_FULL: Knobs(refusals=True, retry="full"),
}
CANDIDATES = (RETRY_NOFIT, RETRY_FULL)
LABELS.update({RETRY_NOFIT: "(a) forced at the first no-fit", RETRY_FULL: "(b) forced once no GPU is empty"})
#: ``--rules`` names.
SHORT = {"kept": KEPT, "trusted": TRUSTED, "no-fit": RETRY_NOFIT, "full": RETRY_FULL}
HEADLINE = "H100, 8 GPUs, cold"


def verdict(cells: dict[str, list[Row]]) -> list[str]:
    """The check's rule, stated before it ran (docs/placement.md, "Session 14: where ours-hold falls below a peer"):
    a candidate PASSES if its runs below any peer beyond noise, summed over every cell run, are fewer than the
    adopted trusted share's, and its H100 8-GPU cold per-sample mean is no more than 1 point under the trusted
    share's; else it FAILS."""
    below = {x.rule: 0 for x in cells[HEADLINE]}
    for rows in cells.values():
        for x in rows:
            below[x.rule] += x.any_below
    mean = {x.rule: x.mean for x in cells[HEADLINE]}
    out = []
    for rule in below:
        if rule in CANDIDATES:
            passes = below[rule] < below[TRUSTED] and mean[rule] >= mean[TRUSTED] - 0.01
            out.append(
                f"CHECK {'PASS' if passes else 'FAIL'}: {rule}: below any peer {below[rule]} (trusted share "
                f"{below[TRUSTED]}, kept {below.get(KEPT, '-')}), {HEADLINE} per sample {100 * mean[rule]:.1f} % "
                f"(trusted share {100 * mean[TRUSTED]:.1f} %)"
            )
    return out


def serve_rule(sample: Sample, rule: str, warm: bool) -> int:
    return play(sample, RULES[rule], warm).served


Task = tuple[str, int, float, int]


def measure(task: Task, rules: tuple[str, ...], warm: bool) -> str:
    short, gpus, alpha, seed = task
    sample = make_sample(gpu_model(short), gpus, alpha, seed)
    o = run_sample(sample, PEERS)
    cold = {r: serve_rule(sample, r, False) for r in rules}
    hot = {r: serve_rule(sample, r, True) for r in rules} if warm else {}
    return Record(short, gpus, alpha, seed, o.optimum, o.proven, dict(o.served), cold, hot).dumps()


def measure_all(tasks: Sequence[Task], rules: tuple[str, ...], warm: bool, out: Path, jobs: int) -> None:
    """Append to ``out`` the record of every task not already there."""
    done = {(r.model, r.gpus, r.alpha, r.seed) for r in load(out.read_text().splitlines())} if out.exists() else set()
    todo = [t for t in tasks if t not in done]
    print(f"{len(tasks) - len(todo)} of {len(tasks)} samples already in {out}", flush=True)
    job = functools.partial(measure, rules=rules, warm=warm)
    with out.open("a") as f:
        results: Iterator[str]
        pool = ProcessPoolExecutor(jobs) if jobs > 1 else None
        results = pool.map(job, todo) if pool is not None else map(job, todo)
        for line in results:
            f.write(line + "\n")
            f.flush()
        if pool is not None:
            pool.shutdown()


def study(records: Sequence[Record], rules: Sequence[str]) -> dict[str, list[Row]]:
    """Every cell's table (``bench/placement_intervals.py``) and the runs below any peer summed over the cells."""
    cells: dict[str, list[Row]] = {}
    for gpus in sorted({r.gpus for r in records}):
        for short in MODELS:
            group = sorted((r for r in records if r.gpus == gpus and r.model == short), key=lambda r: (r.alpha, r.seed))
            for warm in (False, True):
                if not group or (warm and not all(r.warm for r in group)):
                    continue
                title = f"{short}, {gpus} GPUs, {'warm' if warm else 'cold'}"
                cells[title] = cell_table(title, outcomes(group, gpu_model(short), warm), rules, KEPT)
    print(f"\nover {len(cells)} cells: runs below any peer beyond noise")
    for rule in rules:
        print(
            f"  {LABELS.get(rule, rule)}: {sum(x.any_below for rows in cells.values() for x in rows if x.rule == rule)}"
        )
    return cells


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--baseline", type=Path, nargs="*", help="the noise baseline from these records (JSON lines)")
    ap.add_argument("--diagnose", action="store_true", help="the runs below a peer on the tuning draws")
    ap.add_argument("--tune", action="store_true", help="the candidates on the tuning draws (cold)")
    ap.add_argument("--check", action="store_true", help="the candidates on the second fresh family (seeds from 9000)")
    ap.add_argument("--gpus", type=int, nargs="*", default=[8], choices=list(CHECK_SEEDS), help="with --check")
    ap.add_argument("--rules", nargs="*", default=list(SHORT), choices=list(SHORT), help="with --tune / --check")
    ap.add_argument("--seeds", type=int, default=300, help="with --diagnose / --tune: seeds 0..N-1 per concentration")
    ap.add_argument("--out", type=Path, help="with --tune / --check: the records (JSON lines)")
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    if args.baseline:
        records = load(line for f in args.baseline for line in f.read_text().splitlines())
        print_baseline(baseline(records))
        return 0
    if args.diagnose:
        draws = [(a, s) for a in TUNING_ALPHAS for s in range(args.seeds)]
        if args.jobs > 1:
            with ProcessPoolExecutor(args.jobs) as pool:
                found = [c for cs in pool.map(diagnose_task, draws) for c in cs]
        else:
            found = [c for t in draws for c in diagnose_task(t)]
        print(f"diagnosed in {time.perf_counter() - t0:.0f} s")
        print_diagnosis(found, len(draws))
        return 0
    if args.tune or args.check:
        tasks: list[Task]
        if args.tune:
            tasks = [("H100", 8, a, s) for a in TUNING_ALPHAS for s in range(args.seeds)]
        else:
            tasks = [
                (short, gpus, a, CHECK_FIRST_SEED + s)
                for gpus in args.gpus
                for short in MODELS
                for a in HOLDOUT_ALPHAS
                for s in range(CHECK_SEEDS[gpus])
            ]
        name = "tune" if args.tune else "check"
        out = args.out or Path(__file__).resolve().parent.parent / "var" / f"placement-below-peer-{name}.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        rules = tuple(SHORT[r] for r in args.rules)
        measure_all(tasks, rules, args.check, out, args.jobs)
        wanted = set(tasks)
        records = [r for r in load(out.read_text().splitlines()) if (r.model, r.gpus, r.alpha, r.seed) in wanted]
        print(f"measured in {time.perf_counter() - t0:.0f} s")
        cells = study(records, rules)
        if args.check:
            print_baseline(baseline(records))
            for line in verdict(cells):
                print(line)
        return 0
    ap.print_usage()
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
