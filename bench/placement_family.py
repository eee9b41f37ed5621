"""Random-mix family for the MIG placement benchmark (issue 14: "a policy that generalises").

Each sample is one demand mix drawn from a Dirichlet distribution over the plain profile shapes of the
7-slice/8-slot grid (1g, 1g.2x, 2g, 3g, 4g, 7g) with concentration ``alpha`` (small alpha: a few
profiles dominate; large alpha: close to uniform), then a fill-until-full request sequence from it
(as in ``bench/placement.py``: arrivals until 130 % of the fleet's compute is offered, none departs).
Every policy serves the same sequence; the reference is the offline optimum of those requests
(``allocations/mig/offline.py``; at 512 GPUs its branch and bound may stop early, then the LP bound
is used and the row says so).

Run through ``python bench/placement.py --family``.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from allocations.mig.catalog import GpuModel
from allocations.mig.demand import DemandLearner
from allocations.mig.engine import PlacementEngine, empty_fleet
from allocations.mig.fleet import PlacementRequest
from allocations.mig.offline import offline_optimum
from allocations.mig.policies import Policy, get_policy

SHAPES = {"1g": (1, 1), "1g.2x": (1, 2), "2g": (2, 2), "3g": (3, 4), "4g": (4, 4), "7g": (7, 8)}
LOAD = 1.3
PEERS = ("first-fit", "best-fit", "hami")
# Requests a "-warm" policy's learner saw before the run: the portal's mix is the pool's last 500 requests.
HISTORY = 500


def profile_of(model: GpuModel, shape: str) -> str:
    c, m = SHAPES[shape]
    for p in model.profiles:
        if "+" not in p.name and p.compute_slices == c and p.memory_slices == m:
            return p.name
    raise KeyError(f"{model.name} has no {shape} profile")


def dirichlet(rng: random.Random, alpha: float, n: int) -> list[float]:
    while True:
        g = [rng.gammavariate(alpha, 1.0) for _ in range(n)]
        total = sum(g)
        if total > 0:
            return [x / total for x in g]


@dataclass(frozen=True)
class Sample:
    model: GpuModel
    gpus: int
    alpha: float
    seed: int
    mix: dict[str, float]
    requests: tuple[str, ...]
    history: tuple[str, ...]  # another draw from the same mix: the pool's past, for "-warm" policies


def make_sample(model: GpuModel, gpus: int, alpha: float, seed: int) -> Sample:
    rng = random.Random(f"{model.name}/{gpus}/{alpha}/{seed}")
    shapes = list(SHAPES)
    weights = dirichlet(rng, alpha, len(shapes))
    out: list[str] = []
    offered = 0
    while offered < LOAD * model.compute_slices * gpus:
        name = profile_of(model, rng.choices(shapes, weights)[0])
        out.append(name)
        offered += model.profile(name).compute_slices
    history = tuple(profile_of(model, s) for s in rng.choices(shapes, weights, k=HISTORY))
    return Sample(model, gpus, alpha, seed, dict(zip(shapes, weights, strict=True)), tuple(out), history)


def serve(sample: Sample, policy: str | Policy) -> int:
    """Compute slices a policy serves on the sample. The learner starts from its prior (a new pool), or,
    for a name ending in ``-warm``, after the sample's history (a pool with a past)."""
    per_node = min(8, sample.gpus)
    learner = DemandLearner()
    if isinstance(policy, str) and policy.endswith("-warm"):
        policy = policy.removesuffix("-warm")
        for name in sample.history:
            learner.observe(name)
    fleet = empty_fleet(sample.model, sample.gpus // per_node, per_node)
    engine = PlacementEngine(fleet, get_policy(policy), learner)
    served = 0
    for k, name in enumerate(sample.requests):
        if engine.place(PlacementRequest(name), f"r{k}") is not None:
            served += sample.model.profile(name).compute_slices
    return served


@dataclass
class Outcome:
    sample: Sample
    optimum: float
    proven: bool
    served: dict[str, int] = field(default_factory=dict)

    @property
    def gap(self) -> float:
        return self.optimum - self.served["first-fit"]

    def closed(self, policy: str) -> float:
        """Share of the first-fit -> reference gap the policy closes; NaN when the gap is under two compute
        slices or 1 % of the reference (a ratio of one or two slices says little: losing 3 of a 2-slice gap
        reads -150 %). The pooled figure of :func:`summarise` keeps every sample."""
        gap = self.gap
        if gap < max(2.0, 0.01 * self.optimum):
            return math.nan
        return (self.served[policy] - self.served["first-fit"]) / gap


def run_sample(sample: Sample, policies: Sequence[str | Policy], node_limit: int = 2000) -> Outcome:
    best = offline_optimum(sample.model, sample.gpus, Counter(sample.requests), node_limit=node_limit)
    # Not proven: the LP bound (an upper bound on what any policy could serve) is the reference.
    reference = float(best.value) if best.optimal else math.floor(best.bound)
    out = Outcome(sample, reference, best.optimal)
    for p in policies:
        name = p if isinstance(p, str) else p.name
        out.served[name] = serve(sample, p)
    return out


def noise(outcome: Outcome) -> float:
    """What counts as noise when comparing two policies on one sample: one compute slice, or 0.5 % of the
    optimum on large fleets (a handful of requests landing differently)."""
    return max(1.0, 0.005 * outcome.optimum)


@dataclass
class Summary:
    policy: str
    n: int
    mean: float
    p10: float
    worst: float
    pooled: float  # sum over all samples of (served - first-fit) / sum of the gaps
    below: dict[str, int]  # peer -> samples where the policy serves less than the peer beyond noise


def summarise(outcomes: Sequence[Outcome], policy: str) -> Summary:
    closed = sorted(c for o in outcomes if not math.isnan(c := o.closed(policy)))
    below = {
        peer: sum(1 for o in outcomes if o.served[policy] < o.served[peer] - noise(o))
        for peer in PEERS
        if peer != policy
    }
    gaps = sum(max(0.0, o.gap) for o in outcomes)
    pooled = sum(o.served[policy] - o.served["first-fit"] for o in outcomes) / gaps if gaps else math.nan
    if not closed:
        return Summary(policy, 0, math.nan, math.nan, math.nan, pooled, below)
    p10 = closed[max(0, math.ceil(0.1 * len(closed)) - 1)]
    return Summary(policy, len(closed), statistics.fmean(closed), p10, closed[0], pooled, below)
