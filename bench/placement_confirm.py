"""``python bench/placement_confirm.py [--gpus 8] [--alphas 0.5 2] [--worst N]`` (diagnosis, tuning draws only) and
``python bench/placement_confirm.py --rules NAME ... [--gpus 8 64] [--alphas 0.2] [--holdout] [--cold-only]``
(candidates against the kept rule): where ``ours-hold``'s per-sample misses come from on a cold 8-GPU fill (issue
14, session 13).

Diagnosis (H100, Dirichlet 0.5 and 2, seeds 0-39 at 8 GPUs, learners from the prior):

* the distribution of the gap closed (``<= 0``, ``0-50``, ``50-100``, ``100 %``) and its mean by the gap's size in
  slices (a sample's per-sample figure moves by 100 / gap points per slice);
* every request's decision in ``ours-hold``'s run (placed, placed although the rank flagged it, held, did not fit),
  each placed or held one **flipped alone** (a held request placed, a flagged one held, an unflagged one refused:
  seen, not committed), the rest of the run replayed by the rule: the flip's change of compute served. A hold whose
  flip serves more is a *wrong hold*; a placement whose refusal serves more a *missed hold*. Beside them, the run
  with **every** hold placed (what the holds are worth together), the holds by feature (counts of now, the pool's
  allocated share, margin over the threshold, compute held before, holds of the profile since a larger arrival);
* per profile, what the optimum (``allocations/mig/offline.py``, which refuses with hindsight) serves against
  ``ours-hold``; for the worst samples the must-accept reference (``bench/placement_reference.py``).

Candidates (bench-only subclasses of the kept rule, ``--rules``; docs/placement.md "Session 13: which holds are
confirmed, and the 7g that the gap is made of" quotes them): a young learner's holds cut after repeated holds of a
profile (``Streak``) or by a tighter budget; an oracle that keeps empty GPUs for the 7g the rest of the fill brings
(it reads the fill's end: a bound, not a rule); and ``FillLeft``, the same with what the fill still offers estimated
from the pool alone. ``--holdout``: the family cells of ``bench/placement.py --policy`` (as
``bench/placement_trust.py --holdout``; ``--gpus 512``: 3 seeds per concentration, as
``bench/placement_policy_report.py``). Session 13, second pass: fill left's refinements, ``FillLeft(small=True)``
(the GPUs the smaller requests still to come open anyway) and ``FillLeft(trusted=True)`` (the 7g share blended with
the learner's prior); the online check is ``bench/placement_fill_left_online.py``.

Session 14 (``--fresh [--gpus 8 64] [--out FILE] [--jobs N]``): the hold-out family had been looked at too often to
settle fill left, so the same cells and generator on seeds from ``FRESH_FIRST_SEED`` that no bench or doc had used,
more of them (``FRESH_SEEDS``), the kept rule, fill left and the trusted 7g share side by side, each cell's
per-sample mean with a bootstrap 95 % interval (``bench/placement_intervals.py``), and the pre-registered decision
over every cell run (docs/placement.md "Session 14: a fresh hold-out family decides fill left"). One JSON line per
sample goes to ``--out`` (a rerun with the same file skips the samples already there); ``--report FILE`` reprints
the tables and the decision from it. ``--holdout-interval``: the same table for the old hold-out's H100 8-GPU cold
cell (kept rule and fill left).
"""

from __future__ import annotations

import argparse
import functools
import math
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, not installed

from allocations.mig import fill_left  # noqa: E402
from allocations.mig.catalog import GpuModel, load_catalog  # noqa: E402
from allocations.mig.demand import DemandLearner  # noqa: E402
from allocations.mig.engine import PlacementEngine, empty_fleet  # noqa: E402
from allocations.mig.fill_left import FillLeftRule  # noqa: E402
from allocations.mig.fleet import PlacementRequest  # noqa: E402
from allocations.mig.offline import offline_optimum  # noqa: E402
from allocations.mig.policies import HoldContext, HoldingFragmentationAware  # noqa: E402
from bench.placement_family import LOAD, PEERS, Sample, make_sample, run_sample  # noqa: E402
from bench.placement_intervals import Record, Row, cell_table, decide, load, outcomes  # noqa: E402
from bench.placement_reference import must_accept_optimum, true_weights  # noqa: E402
from bench.placement_sweep import side_by_side  # noqa: E402

H100 = "NVIDIA H100 80GB HBM3"
SEEDS = {8: 40, 64: 20, 512: 6}
MODELS = {"H100": H100, "H200": "NVIDIA H200"}
HOLDOUT_ALPHAS = (0.3, 1.0, 3.0)
HOLDOUT_FIRST_SEED = 1000
HOLDOUT_SEEDS = {8: 30, 64: 12, 512: 3}  # as bench/placement_policy_report.py
KEPT = "ours-hold (kept)"
# Session 14's fresh family: seeds from 7000 (no bench or doc used them before), more per concentration.
FRESH_FIRST_SEED = 7000
FRESH_SEEDS = {8: 100, 64: 20}
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
    """The kept rule, recording what its confirmation saw; ``flip`` inverts its verdict for the current request.

    The kept rule is session 13's: fill left off (the engine's default since session 14 is the trusted 7g share,
    ``FillLeft(trusted=True)`` here), so that the candidates are measured against what they were chosen against."""

    FILL_LEFT: FillLeftRule = "off"

    def __init__(self) -> None:
        super().__init__()
        self.last: tuple[float, float, float, bool] | None = None
        self.flip = False
        self.never = False  # every hold placed instead: what the holds of a run are worth together

    def holds(self, ctx: HoldContext) -> bool:
        limit = self.CONFIRM + self.CONFIRM_GPUS / max(1, ctx.gpus)
        verdict = self.judge(ctx)
        self.last = (self.priced(ctx, self.stranded_now(ctx)), limit, sum(ctx.counts.values()), verdict)
        return False if self.never else verdict != self.flip

    def judge(self, ctx: HoldContext) -> bool:
        return super().holds(ctx)


class Streak(Recording):
    """Candidate: while the counts of now hold under ``VETO_SEEN`` requests (a young learner in a fill), no hold of
    a profile once ``cap`` requests of it were held since the last arrival of a larger profile (one that its
    placement could block): holding it again keeps the same room for arrivals that have not come since.
    ``budget``: also the held compute within this share of the pool's (the kept 0.4 otherwise)."""

    def __init__(self, cap: int = 1000, budget: float | None = None) -> None:
        super().__init__()
        self.cap = cap
        self.budget = budget
        self.streaks: dict[int, int] = {}
        parts = [f"streak cap {cap}"] if cap < 1000 else []
        parts += [f"young budget {budget:g}"] if budget is not None else []
        self.name = "young: " + ", ".join(parts)

    def arrived(self, compute: int) -> None:
        for i, c in list(self.streaks.items()):
            if c < compute:
                del self.streaks[i]
        self._compute_of = compute

    def judge(self, ctx: HoldContext) -> bool:
        verdict = super().judge(ctx)
        young = ctx.churn <= 0 and ctx.mix.prior_weight > 0 and sum(ctx.counts.values()) < self.VETO_SEEN
        if not verdict or not young:
            return verdict
        geom = ctx.geom
        key = geom.compute[ctx.i]
        if self.streaks.get(key, 0) >= self.cap:
            return False
        budget = self.budget * geom.model.compute_slices * ctx.gpus if self.budget is not None else math.inf
        if ctx.held and ctx.held + geom.compute[ctx.i] > budget:  # the first hold is free, as the kept budget's
            return False
        self.streaks[key] = self.streaks.get(key, 0) + 1
        return True


class Oracle(Recording):
    """Not a candidate (it reads the fill's end, which no pool knows): a bound on the missed holds. A request that
    would open an empty GPU is refused while the largest profile's arrivals that the rest of the fill brings
    (its share of the counts of now x the requests still to come, from the compute still to be offered) reach the
    empty GPUs left: the optimum refuses e.g. a 4g whose GPU a 7g would fill whole."""

    name = "oracle: empty GPUs kept for the 7g the rest of the fill brings"
    margin = 0.0  # 7g arrivals beyond the empty GPUs needed to refuse
    trusted = False  # the counts of now blended with the learner's prior (FillLeft's refinement 2)

    def coming(self, model: GpuModel, raw: dict[str, float], prior_weight: float, left: float) -> tuple[float, float]:
        """The largest profile's arrivals in ``left`` compute slices still to come, and its share of that compute,
        from the counts of now (blended with the prior when ``trusted``): the engine's estimate
        (:func:`allocations.mig.fill_left.coming`)."""
        return fill_left.coming(model, raw, prior_weight, left, trusted=self.trusted)


class FillLeft(Oracle):
    """Candidate: :class:`Oracle` with what the fill still offers estimated from the pool alone, as the veto's
    rollouts do (:mod:`allocations.mig.rollout`): ``LOAD`` x the free compute, at most a fill of ``LOAD`` x the pool
    less what it placed and held, less this request.

    Session 14: the rule itself (``FillLeft()``, and ``FillLeft(trusted=True)``) is the engine's
    (:mod:`allocations.mig.fill_left`, ``HoldingFragmentationAware.FILL_LEFT``): this candidate only switches it on
    (:attr:`in_engine`). The session-13 variants that were not carried over (``margin``, ``keep``, ``own=False``,
    ``small``) are still applied here, by :func:`serve`, around the engine's estimate."""

    def __init__(
        self, margin: float = 0.0, keep: bool = False, own: bool = True, small: bool = False, trusted: bool = False
    ) -> None:
        super().__init__()
        self.margin = margin
        self.keep = keep
        self.own = own
        self.small = small
        self.trusted = trusted
        self.name = "fill left: empty GPUs kept for the 7g a fill of LOAD x the pool still brings" + (
            f", {margin:g} more than empty GPUs" if margin else ""
        )
        if keep:
            # A refusal alone keeps a GPU empty only until the next small request opens it (tuning 2/23: two 3g
            # refused, then a 2g took the GPU): the GPUs it kept stay kept until a 7g takes one.
            self.name += ", kept until a 7g takes them"
        if not own:
            # Less the request's own compute, a 4g sees less of the fill to come than a 1g, and is refused less often,
            # though it is what the optimum refuses most (tuning 2/23: two 3g refused, then a 4g opened the GPU).
            self.name += ", the request not taken from what is still to come"
        if small:
            # Session 13, refinement 1 (tuning 2/23: two 3g refused, then a 4g opened the kept GPU anyway): the
            # smaller requests still to come open empty GPUs too once the partly used ones are full, so refuse only
            # while the 7g to come exceed the empty GPUs left after those (free compute of partly used GPUs counted
            # whole: an upper bound on what they absorb).
            self.name += ", less the GPUs smaller requests open anyway"
        if trusted:
            # Refinement 2: the 7g share and the mean request from the counts blended with the learner's prior
            # (DemandMix's weights, as the rank reads them), not the raw counts: one early 7g is not a 7g-heavy mix.
            self.name += ", the 7g share blended with the prior"
        self.in_engine = not margin and not keep and own and not small
        if self.in_engine:
            rule: FillLeftRule = "trusted" if trusted else "raw"
            self.FILL_LEFT = rule


def candidates() -> dict[str, Recording]:
    out: dict[str, Recording] = {KEPT: Recording()}
    for p in (
        Streak(cap=1),
        Streak(cap=2),
        Streak(budget=0.2),
        Streak(budget=0.1),
        Oracle(),
        FillLeft(),
        FillLeft(1.0),
        FillLeft(2.0),
        FillLeft(keep=True),
        FillLeft(own=False),
        FillLeft(small=True),
        FillLeft(trusted=True),
        FillLeft(small=True, trusted=True),
    ):
        out[p.name] = p
    return out


def fresh(policy: Recording) -> Recording:
    """A new instance of the rule (a candidate keeps state across a run)."""
    if isinstance(policy, Streak):
        return Streak(policy.cap, policy.budget)
    if isinstance(policy, FillLeft):
        return FillLeft(policy.margin, policy.keep, policy.own, policy.small, policy.trusted)
    if isinstance(policy, Oracle):
        return Oracle()
    return Recording()


def serve(sample: Sample, policy: Recording, warm: bool) -> int:
    """Compute slices the rule serves on the sample, learner cold or after the sample's history (``warm``)."""
    per_node = min(8, sample.gpus)
    learner = DemandLearner()
    for name in sample.history if warm else ():
        learner.observe(name)
    engine = PlacementEngine(empty_fleet(sample.model, sample.gpus // per_node, per_node), fresh(policy), learner)
    sized = engine.policy
    served = 0
    offered = 0
    largest = max(sample.model.profiles, key=lambda p: p.compute_slices)
    total = LOAD * sample.model.compute_slices * sample.gpus
    kept = 0  # empty GPUs a FillLeft(keep=True) keeps for the largest profile
    used: Counter[tuple[str, int]] = Counter()  # compute placed per GPU
    per_gpu = sample.model.compute_slices
    for k, name in enumerate(sample.requests):
        compute = sample.model.profile(name).compute_slices
        offered += compute
        if isinstance(sized, Streak):
            sized.arrived(compute)
        decision = engine.choose(PlacementRequest(name))
        in_engine = isinstance(sized, FillLeft) and sized.in_engine  # the engine's rule refused already, or placed
        if decision is not None and isinstance(sized, Oracle) and not in_engine and name != largest.name:
            slots = [engine._slots[engine._slot_index[(c.node, c.gpu_index)]] for c in decision.slots]  # noqa: SLF001
            if any(not slot.key for slot in slots):
                empty = sum(1 for slot in engine._slots if not slot.key)  # noqa: SLF001
                counts = learner.counts()
                left = total - offered
                if isinstance(sized, FillLeft):
                    pool = sample.model.compute_slices * sample.gpus
                    left = min(LOAD * (pool - served), LOAD * pool - served - engine.held)
                    left -= compute if sized.own else 0
                # the learner's own prior weight: its mix() would publish a snapshot early and change the rule's run
                coming, share = sized.coming(sample.model, counts, learner._prior_weight, left)  # noqa: SLF001
                opened = 0.0
                if isinstance(sized, FillLeft) and sized.small:
                    partial = sum(per_gpu - u for u in used.values() if 0 < u < per_gpu)
                    opened = max(0.0, max(0.0, left) * (1 - share) - partial) / per_gpu
                if coming >= empty + opened + sized.margin:
                    decision = None
                    if isinstance(sized, FillLeft) and sized.keep:
                        kept = max(kept, min(empty, math.floor(coming)))
                elif empty <= kept:
                    decision = None
        if decision is not None and kept and name == largest.name:
            slots = [engine._slots[engine._slot_index[(c.node, c.gpu_index)]] for c in decision.slots]  # noqa: SLF001
            kept -= any(not slot.key for slot in slots)
        if decision is not None:
            engine.commit(decision, f"r{k}")
            served += compute
            used[(decision.slots[0].node, decision.slots[0].gpu_index)] += compute
    return served


def compare(samples: Sequence[Sample], chosen: dict[str, Recording], title: str, t0: float, warm_too: bool) -> None:
    """The kept rule and the candidates side by side (as ``bench/placement_trust.py``'s cells)."""
    side_by_side(
        samples, list(chosen), lambda sample, name, warm: serve(sample, chosen[name], warm), KEPT, title, t0, warm_too
    )


FILL_LEFT = FillLeft().name
TRUSTED = FillLeft(trusted=True).name
#: Session 14's study: the rules and the decision file's line for each candidate.
STUDY_RULES = (KEPT, FILL_LEFT, TRUSTED)
VERDICTS = {FILL_LEFT: "ADOPT raw", TRUSTED: "ADOPT trusted"}
HEADLINE = "H100, 8 GPUs, cold"


@functools.cache
def gpu_model(short: str) -> GpuModel:
    return load_catalog().model(MODELS[short])


Task = tuple[str, int, float, int]  # model (short), GPUs, concentration, seed


def measure(task: Task, rules: tuple[str, ...], warm: bool) -> str:
    """One sample's record (a JSON line): the reference, the peers and each rule, cold and (``warm``) warm."""
    short, gpus, alpha, seed = task
    sample = make_sample(gpu_model(short), gpus, alpha, seed)
    o = run_sample(sample, PEERS)
    every = candidates()
    cold = {r: serve(sample, every[r], False) for r in rules}
    hot = {r: serve(sample, every[r], True) for r in rules} if warm else {}
    return Record(short, gpus, alpha, seed, o.optimum, o.proven, dict(o.served), cold, hot).dumps()


def measure_all(tasks: Sequence[Task], rules: tuple[str, ...], warm: bool, out: Path, jobs: int) -> None:
    """Append to ``out`` the record of every task not already there (a killed run resumes where it stopped)."""
    done = {(r.model, r.gpus, r.alpha, r.seed) for r in load(out.read_text().splitlines())} if out.exists() else set()
    todo = [t for t in tasks if t not in done]
    print(f"{len(tasks) - len(todo)} of {len(tasks)} samples already in {out}", flush=True)
    job = functools.partial(measure, rules=rules, warm=warm)
    with out.open("a") as f:
        results: Iterator[str]
        if jobs > 1:
            pool = ProcessPoolExecutor(jobs)
            results = pool.map(job, todo)
        else:
            pool = None
            results = map(job, todo)
        for line in results:
            f.write(line + "\n")
            f.flush()
        if pool is not None:
            pool.shutdown()


def study(records: Sequence[Record], rules: Sequence[str], decision: bool) -> None:
    """Every cell's table (by fleet size, then model; cold, then warm where run), the sums over the cells and,
    with ``decision``, session 14's pre-registered verdict."""
    cells: dict[str, list[Row]] = {}
    sizes: dict[str, int] = {}
    for gpus in sorted({r.gpus for r in records}):
        for short in MODELS:
            group = sorted((r for r in records if r.gpus == gpus and r.model == short), key=lambda r: (r.alpha, r.seed))
            if not group:
                continue
            for warm in (False, True):
                if warm and not all(r.warm for r in group):
                    continue
                title = f"{short}, {gpus} GPUs, {'warm' if warm else 'cold'}"
                cells[title] = cell_table(title, outcomes(group, gpu_model(short), warm), rules, KEPT)
                sizes[title] = len(group)
    print(f"\nover {len(cells)} cells ({', '.join(cells)}): samples below any peer beyond noise")
    for rule in rules:
        total = sum(x.any_below for rows in cells.values() for x in rows if x.rule == rule)
        print(f"  {rule}: {total} of {sum(sizes.values())}")
    if decision and HEADLINE in cells:
        verdict = decide(cells, HEADLINE, KEPT, {r: VERDICTS[r] for r in rules if r in VERDICTS})
        print(f"\nDECISION (pre-registered): {verdict.line}")
        for rule in rules:
            print(
                f"  {rule}: below any peer {verdict.below[rule]}, "
                f"{HEADLINE} per sample {100 * verdict.headline[rule]:.1f} %"
            )


def run(sample: Sample, policy: Recording, flip: int = -1, never: bool = False) -> tuple[int, list[Step]]:
    """Compute served by the rule on the sample (cold learner) and every request's step, request ``flip`` inverted:
    a held (or flagged and placed) request has the confirmation's verdict inverted; an unflagged placed one is seen
    and not committed (refused)."""
    per_node = min(8, sample.gpus)
    engine = PlacementEngine(empty_fleet(sample.model, sample.gpus // per_node, per_node), policy, DemandLearner())
    sized = engine.policy  # the engine sizes a copy of the policy for its fleet (open cost)
    if not isinstance(sized, Recording):
        raise TypeError(sized)
    policy = sized
    policy.never = never
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
    no_holds: int = 0  # compute served with every hold placed instead (the flag and unflag unchanged)

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
    kept = HoldingFragmentationAware()
    kept.FILL_LEFT = Recording.FILL_LEFT  # session 13's rule, which Recording records
    outcome = run_sample(sample, ["first-fit", "best-fit", "hami", kept])
    best = offline_optimum(sample.model, sample.gpus, Counter(sample.requests), node_limit=2000)
    served, steps = run(sample, Recording())
    if served != outcome.served["ours-hold"]:
        raise AssertionError(f"recording changed the rule: {served} != {outcome.served['ours-hold']}")
    d = Diagnosis(sample, outcome.optimum, outcome.served["first-fit"], dict(outcome.served), served, steps)
    d.optimum_placed = dict(best.placed)
    d.no_holds = run(sample, Recording(), never=True)[0]
    if flips:
        for s in steps:
            if s.outcome != NOFIT:
                d.flips[s.k] = run(sample, Recording(), flip=s.k)[0] - served
    return d


def streak(steps: Sequence[Step], step: Step) -> int:
    """Holds of ``step``'s profile since the last arrival of a profile with more compute (``step`` not counted)."""
    n = 0
    for s in reversed(steps[: step.k]):
        if s.compute > step.compute:
            break
        if s.outcome == HELD and s.profile == step.profile:
            n += 1
    return n


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
    print(
        f"\n{len(diags)} samples, {len(scored)} with a gap; per sample {100 * statistics.fmean(values):.1f} %, "
        f"pooled {100 * pooled:.1f} %"
    )
    print(f"distribution: {bins(values)}")
    for lo, hi in ((2, 4), (4, 7), (7, 11), (11, 1000)):
        group = [c for c, d in scored if lo <= d.gap < hi]
        if group:
            print(f"gap {lo}-{hi - 1} slices: {len(group)} samples, mean closed {100 * statistics.fmean(group):.1f} %")
    print(
        "\n| sample | gap | ours-hold - first-fit | closed | must-accept - ff | holds (wrong) | best flip | "
        "flips that gain: k profile outcome stranded/limit seen alloc delta | ours - optimum per profile |"
    )
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
        print(
            f"| {d.sample.alpha:g}/{d.sample.seed} | {d.gap:.0f} | {d.served - d.first_fit:+d} | {100 * c:.0f} % "
            f"| {ma} | {len(held)} ({len(wrong)}) | {best:+d} | {flips} | "
            f"{', '.join(f'{p} {v:+d}' for p, v in sorted(diff.items()) if v)} |"
        )
    # Aggregate over every flip: which decisions, when a flip alone gains.
    print("\n| decision | count | flip gains (>0) | flip loses (<0) | mean change |")
    print("|---|---:|---:|---:|---:|")
    for kind in (HELD, FLAGGED, PLACED):
        ch = [d.flips[s.k] for d in diags for s in d.steps if s.outcome == kind and s.k in d.flips]
        if ch:
            print(
                f"| {kind} | {len(ch)} | {sum(1 for x in ch if x > 0)} | {sum(1 for x in ch if x < 0)} "
                f"| {statistics.fmean(ch):+.2f} |"
            )
    print("\nholds by feature, per bucket: holds / wrong (flip gains) / right (flip loses) / sum of flip changes")
    streaks = {id(s): streak(d.steps, s) for d in diags for s in d.steps}
    for label, key, edges in (
        ("n (counts of now)", lambda s: s.seen, (0, 3, 10, 20, 30, 1000)),
        ("allocated share", lambda s: s.allocated, (0, 0.25, 0.5, 0.75, 2)),
        ("margin over the limit", lambda s: s.stranded - s.limit, (0, 0.1, 0.2, 0.4, 1000)),
        ("compute held before", lambda s: s.held, (0, 1, 3, 6, 10, 1000)),
        ("streak (holds of the profile since a larger arrival)", lambda s: streaks[id(s)], (0, 1, 2, 3, 5, 1000)),
    ):
        row = []
        for low, high in zip(edges, edges[1:], strict=False):
            hs = [
                d.flips[s.k]
                for d in diags
                for s in d.steps
                if s.outcome == HELD and low <= key(s) < high and s.k in d.flips
            ]
            row.append(
                f"[{low:g},{high:g}): {len(hs)}/{sum(1 for x in hs if x > 0)}/"
                f"{sum(1 for x in hs if x < 0)}/{sum(hs):+d}"
            )
        print(f"  {label}: " + "  ".join(row))
    with_holds = [d for d in diags if any(s.outcome == HELD for s in d.steps)]
    together = [d.served - d.no_holds for d in with_holds]
    print(
        f"\nthe holds of a run together (kept - every hold placed), {len(with_holds)} samples with holds: "
        f"{sum(1 for x in together if x > 0)} gain, {sum(1 for x in together if x < 0)} lose, "
        f"sum {sum(together):+d} slices; single flips of the same holds sum "
        f"{-sum(d.flips.get(s.k, 0) for d in with_holds for s in d.steps if s.outcome == HELD):+d}"
    )
    nh = [c for d in diags if not math.isnan(c := d.closed(d.no_holds))]
    print(f"every hold placed: per sample {100 * statistics.fmean(nh):.1f} % ({bins(nh)})")
    print("\nplacements whose refusal alone serves more (missed holds), per profile: count, sum of gains, flagged")
    missed = Counter[str]()
    total = Counter[str]()
    flagged = Counter[str]()
    for d in diags:
        for s in d.steps:
            if s.outcome in (PLACED, FLAGGED) and d.flips.get(s.k, 0) > 0:
                missed[s.profile] += 1
                total[s.profile] += d.flips[s.k]
                flagged[s.profile] += s.outcome == FLAGGED
    for p, n in missed.most_common():
        print(f"  {p}: {n}, {total[p]:+d}, {flagged[p]} flagged")
    print("\nwhat ours-hold serves against the optimum, compute slices per profile (all samples | those under 50 %)")
    for part, members in (("all", diags), ("under 50 %", [m for cl, m in scored if cl < 0.5])):
        diff = Counter[str]()
        for d in members:
            ours = d.served_by_profile()
            for p in set(ours) | set(d.optimum_placed):
                diff[p] += (ours.get(p, 0) - d.optimum_placed.get(p, 0)) * d.sample.model.profile(p).compute_slices
        print(f"  {part} ({len(members)}): " + ", ".join(f"{p} {v:+d}" for p, v in sorted(diff.items()) if v))
    profiles = Counter(s.profile for d in diags for s in d.steps if s.outcome == HELD)
    for p, n in profiles.most_common():
        n_wrong = sum(
            1 for d in diags for s in d.steps if s.outcome == HELD and s.profile == p and d.flips.get(s.k, 0) > 0
        )
        n_right = sum(
            1 for d in diags for s in d.steps if s.outcome == HELD and s.profile == p and d.flips.get(s.k, 0) < 0
        )
        print(f"  {p}: {n} holds, {n_wrong} wrong, {n_right} right")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gpus", type=int, nargs="*", default=[8], choices=list(SEEDS))
    ap.add_argument("--alphas", type=float, nargs="*", default=[0.5, 2.0])
    ap.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 (default 40 at 8 GPUs, 20 at 64)")
    ap.add_argument("--worst", type=int, default=15, help="samples listed (worst gap closed first)")
    ap.add_argument("--no-flips", action="store_true")
    ap.add_argument("--rules", nargs="*", help="compare the kept rule with these candidates instead of diagnosing")
    ap.add_argument("--holdout", action="store_true", help="with --rules: the hold-out cells of placement.py --policy")
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS), help="with --holdout")
    ap.add_argument("--cold-only", action="store_true", help="with --rules: no warm column")
    ap.add_argument("--fresh", action="store_true", help="session 14's fresh family (kept, fill left, trusted share)")
    ap.add_argument("--holdout-interval", action="store_true", help="the old hold-out's H100 8-GPU cold interval")
    ap.add_argument("--out", type=Path, help="with --fresh / --holdout-interval: the records (JSON lines)")
    ap.add_argument("--jobs", type=int, default=1, help="with --fresh / --holdout-interval: processes")
    ap.add_argument("--report", type=Path, nargs="*", help="reprint --fresh's tables and decision from these files")
    args = ap.parse_args(argv)
    catalog = load_catalog()
    model = catalog.model(H100)
    t0 = time.perf_counter()
    if args.report:
        study(load(line for f in args.report for line in f.read_text().splitlines()), STUDY_RULES, True)
        return 0
    if args.fresh or args.holdout_interval:
        # default under var/ (git-ignored), so that a run leaves the checkout clean
        out = (
            args.out
            or Path(__file__).resolve().parent.parent
            / "var"
            / f"placement-{'fresh' if args.fresh else 'holdout'}.jsonl"
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        rules: tuple[str, ...]
        if args.fresh:
            tasks = [
                (short, gpus, a, FRESH_FIRST_SEED + s)
                for gpus in args.gpus
                for short in args.models
                for a in HOLDOUT_ALPHAS
                for s in range(FRESH_SEEDS[gpus])
            ]
            rules, warm = STUDY_RULES, not args.cold_only
        else:
            tasks = [("H100", 8, a, HOLDOUT_FIRST_SEED + s) for a in HOLDOUT_ALPHAS for s in range(HOLDOUT_SEEDS[8])]
            rules, warm = (KEPT, FILL_LEFT), False
        measure_all(tasks, rules, warm, out, args.jobs)
        wanted = set(tasks)
        records = [r for r in load(out.read_text().splitlines()) if (r.model, r.gpus, r.alpha, r.seed) in wanted]
        print(f"measured in {time.perf_counter() - t0:.0f} s")
        study(records, rules, args.fresh)
        return 0
    if args.rules is not None:
        every = candidates()
        unknown = [r for r in args.rules if r not in every]
        if unknown:
            ap.error(f"unknown rules {unknown}; known: {list(every)}")
        chosen = {n: p for n, p in every.items() if n == KEPT or not args.rules or n in args.rules}
        for gpus in args.gpus:
            if args.holdout:
                for short in args.models:
                    m = catalog.model(MODELS[short])
                    samples = [
                        make_sample(m, gpus, a, HOLDOUT_FIRST_SEED + s)
                        for a in HOLDOUT_ALPHAS
                        for s in range(HOLDOUT_SEEDS[gpus])
                    ]
                    compare(samples, chosen, f"HOLD-OUT {short}, {gpus} GPUs", t0, not args.cold_only)
            else:
                samples = [
                    make_sample(model, gpus, a, s) for a in args.alphas for s in range(args.seeds or SEEDS[gpus])
                ]
                compare(
                    samples, chosen, f"tuning H100, {gpus} GPUs, concentrations {args.alphas}", t0, not args.cold_only
                )
        return 0
    for gpus in args.gpus:
        diags = [
            diagnose(make_sample(model, gpus, alpha, seed), not args.no_flips)
            for alpha in args.alphas
            for seed in range(args.seeds or SEEDS[gpus])
        ]
        scored = sorted((d for d in diags if not math.isnan(d.closed())), key=lambda d: d.closed())
        for d in scored[: args.worst]:
            if gpus <= 8:
                d.must_accept = must_accept_optimum(
                    model, d.sample.gpus, d.sample.requests, true_weights(model, d.sample.requests), beam=1000
                ).value
        print(f"tuning H100, {gpus} GPUs, cold, concentrations {args.alphas} ({time.perf_counter() - t0:.0f} s)")
        report(diags, args.worst)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
