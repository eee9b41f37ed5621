"""``python bench/placement_hold_rules.py [--gpus 8 64 512] [--alphas 0.5 2] [--warm] [--skip-family] [--skip-online]
[--trace-dir DIR]``: how ``ours-hold``'s admission rule was chosen (issue 14, sessions 10 and 11). TUNING draws only
(the trace, with ``--trace-dir``, is the one workload the issue names; it is reported, not held out).

Family (fill-until-full, no departures; a held request is never served): H100, Dirichlet 0.5 and 2, seeds 0-39
at 8 GPUs and 0-19 at 64 (``--alphas 0.2``: 40 more tuning draws of concentrated mixes, never reported
elsewhere; the hold-out family uses 0.3, 1 and 3 from seed 1000). Departures (``replay_held``: held pods retried
after each departure, forced after 15 minutes): H100, 16 and 32 GPUs, Dirichlet 0.5 and 2, seeds 0-2, lognormal
and Pareto lifetimes, 2,000 arrivals. Prints per rule: gap closed (per-sample mean, pooled, worst sample),
samples below a peer beyond noise, and online slice-hours against first-fit and best-fit. docs/placement.md
("Admission") quotes it.

Session 11 (family only: the new terms apply until the pool sees a release, so they leave the departures alone):
a budget of held compute (a share of the pool's compute, or of its free compute), a veto by rollouts over the
fleet's layouts (``allocations/mig/rollout.py``, ``hold_gain``: futures drawn around the counts of now, served by
``ours``), applied once the counts hold some requests, and ``ours``' favourite where the counts of now do not
confirm the flag that put an unflagged GPU first ("unflag"). Run it with and without ``--warm``, and with
``--alphas 0.2``.

Session 12: ``--gpus 512`` (H100, seeds 0-5 per concentration): above 64 GPUs the veto's rollouts run on a sample
of 64 GPUs in the pool's proportions, their futures bounded by what the fill still offers after what it placed and
held (session 11 had no veto there); at 8 and 64 GPUs the rule is session 11's.

Session 10, lifetimes (``bench/placement_lifetimes.py``, online only: with no departures nothing ends, so the
rule is the kept one): the kept rule whose hold must also be confirmed in slice-hours (veto), with lifetimes
learnt from ended requests plus the ages of running ones or from ended requests alone, and the rule confirming in
slice-hours alone.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, not installed

from allocations.mig import rollout  # noqa: E402
from allocations.mig.catalog import GpuModel, load_catalog  # noqa: E402
from allocations.mig.demand import DemandMix  # noqa: E402
from allocations.mig.layout import Geometry, LayoutKey, Option  # noqa: E402
from allocations.mig.policies import (  # noqa: E402
    FragmentationAware,
    HoldContext,
    HoldingFragmentationAware,
    Rank,
    _fill,
)
from bench.placement import Pod, read_trace  # noqa: E402
from bench.placement_departures import poisson_pods, replay, replay_held  # noqa: E402
from bench.placement_lifetimes import LifetimeHold, LifetimeLearner  # noqa: E402
from bench.placement_sweep import print_table, serve, sweep  # noqa: E402

ALPHAS = (0.5, 2.0)
SEEDS = {8: 40, 64: 20, 512: 6}
ONLINE_GPUS = (16, 32)
ONLINE_SEEDS = 3
ONLINE_PODS = 2000
TRACE_GPUS = (16, 24, 32)


class Rule(HoldingFragmentationAware):
    """``ours-hold`` with the knobs tried: the rank's threshold (``hold``), one relative to the request's compute
    (``per_compute``), the confirmation (``confirm``: ``None`` = none, as in session 9; its prior, threshold, and
    terms per GPU and per request seen; counts of now or the published snapshot's), gates on the release rate and
    on the room left for the profile; and session 11's, in a fill only: budgets of held compute (of the pool's
    compute, of its free compute; the first hold is free), a rollout veto (margin, requests the counts must hold
    first) and "unflag" (``ours``' favourite where the counts of now do not confirm a hold, ``"confirm"``, or would
    not flag it, ``"flag"``)."""

    def __init__(
        self,
        hold: float = HoldingFragmentationAware.HOLD,
        per_compute: float = 0.0,
        confirm: float | None = HoldingFragmentationAware.CONFIRM,
        prior: float = HoldingFragmentationAware.CONFIRM_PRIOR,
        per_gpu: float = HoldingFragmentationAware.CONFIRM_GPUS,
        per_seen: float = 0.0,
        published: bool = False,
        max_churn: float = float("inf"),
        min_room: int = 0,
        budget: float | None = None,
        free_budget: float | None = None,
        veto: float | None = None,
        veto_seen: float = 0.0,
        unflag: str | None = None,
    ) -> None:
        super().__init__()
        self.HOLD = hold
        self.per_compute = per_compute
        self.confirm = confirm
        self.prior = prior
        self.per_gpu = per_gpu
        self.per_seen = per_seen
        self.published = published
        self.max_churn = max_churn
        self.min_room = min_room
        self.budget = budget
        self.free_budget = free_budget
        self.veto = veto
        self.veto_seen = veto_seen
        self.unflag = unflag

    def rank(self, geom: Geometry, key: LayoutKey, i: int, weights: tuple[float, ...]) -> tuple[Rank, Option] | None:
        found = super().rank(geom, key, i, weights)
        if found is None or not self.per_compute:
            return found
        (_, *rank), chosen = found
        change = self._expected_stranded(geom, chosen.after, weights) - self._expected_stranded(geom, key, weights)
        return (1.0 if round(change, 9) > self.HOLD + self.per_compute * geom.compute[i] else 0.0, *rank), chosen

    def holds(self, ctx: HoldContext) -> bool:
        if ctx.churn > self.max_churn or ctx.room < self.min_room or not self.confirmed(ctx):
            return False
        if ctx.churn > 0:
            return True
        g = ctx.geom
        after = ctx.held + g.compute[ctx.i]
        if ctx.held and self.budget is not None and after > self.budget * g.model.compute_slices * ctx.gpus:
            return False
        free = sum(n * (g.model.compute_slices - g.info(k).allocated_compute) for k, n in ctx.layouts.items())
        if ctx.held and self.free_budget is not None and after > self.free_budget * free:
            return False
        if self.veto is None or not ctx.layouts or sum(ctx.counts.values()) < self.veto_seen:
            return True
        mix = DemandMix(ctx.counts, ctx.mix.prior_weight)
        ours = FragmentationAware(self.persistence, self.open_cost)
        gain = rollout.hold_gain(ours, g, ctx.key, ctx.option, ctx.i, mix, ctx.layouts)
        return gain is None or gain > self.veto

    def unflags(self, ctx: HoldContext) -> bool:
        if self.unflag is None or ctx.churn > 0:
            return False
        return not self.confirmed(ctx) if self.unflag == "confirm" else self.stranded_now(ctx) <= self.HOLD

    def confirmed(self, ctx: HoldContext) -> bool:
        if self.confirm is None:
            return True
        counts = ctx.mix.counts if self.published else ctx.counts
        w = tuple(round(x, 2) for x in DemandMix(counts, self.prior).weights(ctx.geom.model))
        memo: dict[LayoutKey, float] = {}
        g = ctx.geom
        change = _fill(g, ctx.key, w, self.persistence, memo) - (
            g.compute[ctx.i] + _fill(g, ctx.option.after, w, self.persistence, memo)
        )
        seen = sum(counts.values())
        limit = self.confirm + self.per_gpu / ctx.gpus + (self.per_seen / seen if seen else float("inf"))
        return round(change, 9) > limit


SESSION10 = "session 10 (counts now, prior 10, 0.2 + 0.8 / GPUs)"
KEPT = "ours-hold (kept: s10 + unflag (flag) + budget 0.4 + veto once 100 requests, above 64 GPUs on a sample)"
SESSION11 = "session 11 (kept then: no veto above 64 GPUs)"


class Session11(HoldingFragmentationAware):
    """Session 11's kept rule: no veto above ``VETO_GPUS`` GPUs."""

    VETO_SAMPLE = 0


class SampleOnly(HoldingFragmentationAware):
    """Session 12's veto on a sample above ``VETO_GPUS`` GPUs, whose futures ignore what the fill has held."""

    def veto_held(self, ctx: HoldContext, fleet: Mapping[LayoutKey, int]) -> float:
        return 0.0


def variants() -> dict[str, Rule | HoldingFragmentationAware]:
    return {
        "session 9 (HOLD 0.3, no confirmation)": Rule(hold=0.3, confirm=None),
        "session 9, threshold 0.3 + 0.1 x compute": Rule(hold=0.3, confirm=None, per_compute=0.1),
        "session 9, only while 2+ more fit": Rule(hold=0.3, confirm=None, min_room=2),
        "confirmed, published counts, 0.2 + 0.8 / GPUs": Rule(published=True),
        "confirmed, counts now, prior 10, 0.2": Rule(per_gpu=0.0),
        "confirmed, counts now, prior 10, 0.3": Rule(confirm=0.3, per_gpu=0.0),
        "confirmed, counts now, prior 10, 0.2 + 1 / requests seen": Rule(per_gpu=0.0, per_seen=1.0),
        "confirmed, counts now, prior 3, 0.2 + 0.8 / GPUs": Rule(prior=3.0),
        "confirmed, counts now, prior 6, 0.2 + 0.8 / GPUs": Rule(prior=6.0),
        "confirmed, counts now, prior 10, 0.2 + 1.6 / GPUs": Rule(per_gpu=1.6),
        SESSION10: Rule(),
        "kept, only while 2+ more fit": Rule(min_room=2),
        "kept, off above 0.3 releases per request": Rule(max_churn=0.3),
        # Session 11: session 10's rule plus, in a fill, ...
        "s10 + unflag (confirm)": Rule(unflag="confirm"),
        "s10 + unflag (flag)": Rule(unflag="flag"),
        "s10 + held compute within 0.3 of the pool's": Rule(budget=0.3),
        "s10 + held compute within 0.4 of the pool's": Rule(budget=0.4),
        "s10 + held compute within 0.5 of the pool's": Rule(budget=0.5),
        "s10 + held compute within 0.5 of the free compute": Rule(free_budget=0.5),
        "s10 + held compute within 0.7 of the free compute": Rule(free_budget=0.7),
        "s10 + rollout veto (margin 0)": Rule(veto=0.0),
        "s10 + rollout veto (margin 0.25)": Rule(veto=0.25),
        "s10 + budget 0.4 + rollout veto once 100 requests": Rule(budget=0.4, veto=0.0, veto_seen=100.0),
        "s10 + unflag (confirm) + budget 0.4": Rule(budget=0.4, unflag="confirm"),
        "s10 + unflag (confirm) + budget 0.4 + veto once 100 requests": Rule(
            budget=0.4, veto=0.0, veto_seen=100.0, unflag="confirm"
        ),
        "s10 + unflag (flag) + budget 0.4": Rule(budget=0.4, unflag="flag"),
        SESSION11: Session11(),
        "kept, sampled veto's futures ignoring the fill's held compute": SampleOnly(),
        KEPT: HoldingFragmentationAware(),
    }


#: Online rows: session 9's and the kept rule, then the kept rule confirmed in slice-hours too (lifetimes).
LIFETIME_RULES: dict[str, tuple[str, bool]] = {  # name -> (LifetimeHold mode, lifetimes of ended requests only)
    "kept + slice-hours veto (ended + running ages)": ("veto", False),
    "kept + slice-hours veto (ended requests only)": ("veto", True),
    "kept, confirmed in slice-hours alone (ended + running ages)": ("replace", False),
}
ONLINE = (
    "session 9 (HOLD 0.3, no confirmation)",
    SESSION10,
    KEPT,
    "kept, only while 2+ more fit",
    "kept, off above 0.3 releases per request",
    *LIFETIME_RULES,
)


def replay_rule(model: GpuModel, gpus: int, pods: Sequence[Pod], name: str) -> float:
    if name in LIFETIME_RULES:
        mode, ended_only = LIFETIME_RULES[name]
        learner = LifetimeLearner(ended_only)
        return replay_held(model, gpus, pods, LifetimeHold(learner, mode), demand=learner).share
    return replay_held(model, gpus, pods, variants()[name]).share


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gpus", type=int, nargs="*", default=[8, 64], choices=list(SEEDS))
    ap.add_argument("--alphas", type=float, nargs="*", default=list(ALPHAS), choices=[0.2, *ALPHAS])
    ap.add_argument("--warm", action="store_true", help="learners first see the sample's 500-request history")
    ap.add_argument("--skip-family", action="store_true")
    ap.add_argument("--skip-online", action="store_true")
    ap.add_argument("--trace-dir", type=Path, help="also replay the Alibaba trace (openb_pod_list_default.csv)")
    args = ap.parse_args(argv)
    h100 = load_catalog().model("NVIDIA H100 80GB HBM3")
    rules = variants()
    t0 = time.perf_counter()
    for gpus in [] if args.skip_family else args.gpus:
        outcomes = sweep(
            h100, gpus, args.alphas, SEEDS[gpus], lambda s: {name: serve(s, p, args.warm) for name, p in rules.items()}
        )
        heading = f"{gpus} GPUs, concentrations {args.alphas}, {len(outcomes)} tuning samples"
        print_table(outcomes, list(rules), heading + (", warm learner" if args.warm else ""), t0, worst=True)
    if args.skip_online:
        return 0
    print(f"\nDepartures, tuning draws ({time.perf_counter() - t0:.0f} s)\n")
    print("| rule | lifetimes | GPUs | served of offered | vs first-fit | vs best-fit | worst run vs either |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for tail in ("lognormal", "pareto"):
        for gpus in ONLINE_GPUS:
            runs = [poisson_pods(h100, gpus, a, s, tail, ONLINE_PODS) for a in ALPHAS for s in range(ONLINE_SEEDS)]
            ff = [replay(h100, gpus, p, "first-fit").share for p in runs]
            bf = [replay(h100, gpus, p, "best-fit").share for p in runs]
            for name in ONLINE:
                shares = [replay_rule(h100, gpus, p, name) for p in runs]
                mean = statistics.fmean(shares)
                worst = min(min(a - b, a - c) for a, b, c in zip(shares, ff, bf, strict=True))
                print(
                    f"| {name} | {tail} | {gpus} | {100 * mean:.2f} % | {100 * (mean - statistics.fmean(ff)):+.2f} "
                    f"| {100 * (mean - statistics.fmean(bf)):+.2f} | {100 * worst:+.2f} |",
                    flush=True,
                )
    if args.trace_dir is not None:
        pods, _ = read_trace(args.trace_dir / "openb_pod_list_default.csv")
        pods.sort(key=lambda p: p.created)
        print(f"\nAlibaba trace ({time.perf_counter() - t0:.0f} s)\n")
        print("| rule | GPUs | served of offered | vs first-fit | vs best-fit |\n|---|---:|---:|---:|---:|")
        for gpus in TRACE_GPUS:
            first, best = (replay(h100, gpus, pods, p).share for p in ("first-fit", "best-fit"))
            for name in ONLINE:
                share = replay_rule(h100, gpus, pods, name)
                print(f"| {name} | {gpus} | {100 * share:.3f} % ", end="")
                print(f"| {100 * (share - first):+.3f} | {100 * (share - best):+.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
