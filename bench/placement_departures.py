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
and admitted pods.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from allocations.mig.catalog import GpuModel
from bench.placement import SHAPES, Pod, run_online
from bench.placement_family import dirichlet

LOAD = 1.3
MEAN_LIFETIME_S = 3600.0
LOGNORMAL_SIGMA = 1.5
PARETO_SHAPE = 1.5


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


def replay(model: GpuModel, gpus: int, pods: Sequence[Pod], policy: str) -> Served:
    r = run_online(model, gpus, pods, policy, 0)
    return Served(policy, r.admitted, r.offered, r.slice_hours, r.offered_slice_hours)


def lifetime(rng: random.Random, tail: str) -> float:
    """A duration in seconds with mean MEAN_LIFETIME_S and a heavy tail."""
    if tail == "lognormal":
        mu = math.log(MEAN_LIFETIME_S) - LOGNORMAL_SIGMA**2 / 2
        return rng.lognormvariate(mu, LOGNORMAL_SIGMA)
    if tail == "pareto":
        scale = MEAN_LIFETIME_S * (PARETO_SHAPE - 1) / PARETO_SHAPE
        return scale * rng.paretovariate(PARETO_SHAPE)
    raise ValueError(f"unknown tail {tail!r}")


def poisson_pods(model: GpuModel, gpus: int, alpha: float, seed: int, tail: str, n: int) -> list[Pod]:
    """``n`` Poisson arrivals from a Dirichlet(alpha) mix over the plain shapes, heavy-tailed lifetimes."""
    rng = random.Random(f"departures/{model.name}/{gpus}/{alpha}/{seed}/{tail}")
    shapes = list(SHAPES)
    weights = dirichlet(rng, alpha, len(shapes))
    mean_c = sum(SHAPES[s][0] * w for s, w in zip(shapes, weights, strict=True))
    rate = LOAD * model.compute_slices * gpus / (mean_c * MEAN_LIFETIME_S)
    now = 0.0
    pods = []
    for _ in range(n):
        now += rng.expovariate(rate)
        pods.append(Pod(rng.choices(shapes, weights)[0], int(now), int(now + lifetime(rng, tail))))
    return pods
