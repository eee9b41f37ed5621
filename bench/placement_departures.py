"""Online placement with departures (issue 14: "online with departures"), for ``bench/placement.py``.

Two workloads on fleets of H100s, every pod admitted if it fits when it arrives and released when it
ends (departures first at equal times, as in ``bench.placement.run_online``):

* the Alibaba GPU-sharing trace (``openb_pod_list_default.csv``, read from ``--trace-dir``, never copied)
  at 16, 24 and 32 GPUs: the trace's creation and deletion times, pods mapped to MIG profiles as in
  ``bench/placement.py``;
* synthetic Poisson arrivals with heavy-tailed durations (lognormal, sigma 1.5; Pareto, shape 1.5),
  median/scale chosen for a mean of one hour, the rate set for 130 % of the fleet's compute on average,
  over Dirichlet-sampled mixes (``bench.placement_family``), several seeds.

The figure is slice-hours served (compute slices x hours of the admitted pods) as a share of offered,
and admitted pods; beside it the compute admitted (:func:`compute_share`), the low-noise part of slice-hours.

``ours-hold`` (admission) is replayed with a queue, as the portal would run it (:func:`replay_held`): a pod it
holds waits, is retried after every departure, and is forced after ``HOLD_WAIT_S``; a held pod that no
longer fits when retried or forced is lost, as a pod that does not fit on arrival is for every policy. A pod
that starts late runs its whole duration from its start. A :class:`~bench.placement_lifetimes.LifetimeLearner` passed as
``demand`` is told when each pod starts and ends, never how long an arriving pod will run.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from allocations.mig.catalog import GpuModel
from allocations.mig.demand import DemandLearner, DemandMix
from allocations.mig.engine import PlacementEngine, empty_fleet
from allocations.mig.fleet import Fleet, PlacementRequest
from allocations.mig.policies import Policy
from bench.placement import SHAPES, Pod, profile_of, run_online
from bench.placement_family import dirichlet
from bench.placement_lifetimes import LifetimeLearner

LOAD = 1.3
MEAN_LIFETIME_S = 3600.0
LOGNORMAL_SIGMA = 1.5
PARETO_SHAPE = 1.5
#: The longest a held pod waits before it is forced (the queue's starvation bound in this replay).
HOLD_WAIT_S = 900


@dataclass(frozen=True)
class Served:
    policy: str
    admitted: int
    offered: int
    slice_hours: float
    offered_slice_hours: float

    @property
    def share(self) -> float:
        return self.slice_hours / self.offered_slice_hours if self.offered_slice_hours else math.nan


def replay(
    model: GpuModel, gpus: int, pods: Sequence[Pod], policy: str | Policy, started: dict[int, int] | None = None
) -> Served:
    """A policy with admission replays with a queue (:func:`replay_held`); the others place on arrival or drop.
    ``started``, when given, is filled with the admitted pods' indices and start times (:func:`compute_share`)."""
    if policy == "ours-hold" or getattr(policy, "admission", False):
        return replay_held(model, gpus, pods, policy, started=started)
    name = policy if isinstance(policy, str) else policy.name
    # run_online takes a name or a policy
    r = run_online(model, gpus, pods, policy, 0, started=started)  # type: ignore[arg-type]
    return Served(name, r.admitted, r.offered, r.slice_hours, r.offered_slice_hours)


def compute_share(pods: Sequence[Pod], started: Iterable[int]) -> float:
    """Compute slices of the admitted pods (``started``: their indices) as a share of those offered: the
    policy's skill, free of the luck of which long pods it happened to admit, since no policy sees a pod's
    lifetime (``bench/placement_poisson_runs.py``)."""
    offered = sum(SHAPES[p.shape][0] for p in pods)
    return sum(SHAPES[pods[k].shape][0] for k in started) / offered if offered else math.nan


def replay_held(
    model: GpuModel,
    gpus: int,
    pods: Sequence[Pod],
    policy: str | Policy,
    wait_s: int = HOLD_WAIT_S,
    demand: DemandMix | DemandLearner | None = None,
    started: dict[int, int] | None = None,
    arriving: Callable[[int, PlacementEngine], None] | None = None,
    make_engine: Callable[[Fleet, Policy | str, DemandMix | DemandLearner], PlacementEngine] = PlacementEngine,
) -> Served:
    """Replay for a policy with admission: held pods queue (FIFO), are retried after each departure and
    forced after ``wait_s``. Fleet as in ``run_online`` (8 GPUs a node, the last node cut to size); the mix
    is learnt (by ``demand`` when it is a learner) unless ``demand`` fixes it. ``started``, when given, is
    filled with the admitted pods' indices and their start times, and ``arriving`` is called with each pod's
    index and the engine before the pod is placed (``bench/placement_poisson_runs.py``); ``make_engine`` builds the
    engine (``bench/placement_fill_pull.py``); a policy without admission replays here as in ``run_online``
    (nothing is held)."""
    nodes = math.ceil(gpus / 8)
    fleet = empty_fleet(model, nodes, 8)
    extra = nodes * 8 - gpus
    if extra:
        fleet.nodes[-1].gpus = fleet.nodes[-1].gpus[: 8 - extra]
    engine = make_engine(fleet, policy, demand if demand is not None else DemandLearner())
    # Lifetimes (bench/placement_lifetimes.py): told when each pod starts and ends, never how long it will run.
    learner = engine.demand if isinstance(engine.demand, LifetimeLearner) else None
    # (time, kind, pod): departures (0) before deadlines (1) before arrivals (2) at equal times.
    events = [(p.created, 2, k) for k, p in enumerate(pods)]
    heapq.heapify(events)
    where: dict[int, tuple[str, int, int]] = {}
    held: dict[int, None] = {}  # insertion-ordered: FIFO
    admitted = 0
    served = offered = 0.0

    def fits(name: str) -> bool:
        return engine.fits_now()[name] > 0

    def start(k: int, now: int, force: bool) -> bool:
        pod = pods[k]
        name = profile_of(model, pod.shape)
        d = engine.place(PlacementRequest(name, force=force), f"pod{k}")
        if d is None:
            return False
        nonlocal admitted, served
        admitted += 1
        served += SHAPES[pod.shape][0] * (pod.deleted - pod.created) / 3600
        where[k] = (d.node, d.gpu_index, d.start)
        if started is not None:
            started[k] = now
        if learner is not None:
            learner.observe_start(f"pod{k}", name, now)
        heapq.heappush(events, (now + pod.deleted - pod.created, 0, k))
        return True

    while events:
        now, kind, k = heapq.heappop(events)
        if learner is not None:
            learner.advance(now)
        if kind == 0:
            engine.release(*where.pop(k))
            if learner is not None:  # the lifetime of a pod that ended: known now, not before
                learner.observe_end(f"pod{k}", now)
            for h in list(held):
                name = profile_of(model, pods[h].shape)
                if not fits(name):
                    del held[h]  # lost, as a pod that does not fit on arrival
                    engine.hold_ended(name, placed=False)
                elif start(h, now, False):
                    del held[h]
                    engine.hold_ended(name, placed=True)
        elif kind == 1:
            if k in held:
                del held[k]
                engine.hold_ended(profile_of(model, pods[k].shape), placed=start(k, now, True), forced=True)
        else:
            pod = pods[k]
            offered += SHAPES[pod.shape][0] * (pod.deleted - pod.created) / 3600
            if arriving is not None:
                arriving(k, engine)
            if not start(k, now, False) and fits(profile_of(model, pod.shape)):
                held[k] = None
                heapq.heappush(events, (now + wait_s, 1, k))
    return Served(policy if isinstance(policy, str) else policy.name, admitted, len(pods), served, offered)


def lifetime(rng: random.Random, tail: str, mean_s: float = MEAN_LIFETIME_S) -> float:
    """A duration in seconds with mean ``mean_s`` and a heavy tail."""
    if tail == "lognormal":
        mu = math.log(mean_s) - LOGNORMAL_SIGMA**2 / 2
        return rng.lognormvariate(mu, LOGNORMAL_SIGMA)
    if tail == "pareto":
        scale = mean_s * (PARETO_SHAPE - 1) / PARETO_SHAPE
        return scale * rng.paretovariate(PARETO_SHAPE)
    raise ValueError(f"unknown tail {tail!r}")


def poisson_pods(
    model: GpuModel, gpus: int, alpha: float, seed: int, tail: str, n: int, mean_s: float = MEAN_LIFETIME_S
) -> list[Pod]:
    """``n`` Poisson arrivals from a Dirichlet(alpha) mix over the plain shapes, heavy-tailed lifetimes of mean
    ``mean_s`` (the arrival rate offers the same load whatever the mean)."""
    key = f"departures/{model.name}/{gpus}/{alpha}/{seed}/{tail}"
    # Until session 13 the seed left out the mean, so an 8 h draw was the 1 h draw stretched in time (the same mix,
    # arrivals and lifetimes, scaled): "1 h and 8 h" were not independent tests. The mean joins the seed only where it
    # differs from the default, so the 1 h draws (and every figure made on them) stay as they were.
    if mean_s != MEAN_LIFETIME_S:
        key += f"/{mean_s:g}"
    rng = random.Random(key)
    shapes = list(SHAPES)
    weights = dirichlet(rng, alpha, len(shapes))
    mean_c = sum(SHAPES[s][0] * w for s, w in zip(shapes, weights, strict=True))
    rate = LOAD * model.compute_slices * gpus / (mean_c * mean_s)
    now = 0.0
    pods = []
    for _ in range(n):
        now += rng.expovariate(rate)
        pods.append(Pod(rng.choices(shapes, weights)[0], int(now), int(now + lifetime(rng, tail, mean_s))))
    return pods
