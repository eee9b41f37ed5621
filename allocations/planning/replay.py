"""The pool's capacity in a few numbers, and requests replayed onto a copy of its layouts.

Shared by the three what-if answers: "what fits" is the engine's exact per-profile fit (layout rules, each
profile alone), and "would be served" places requests one after the other with the portal's own policy
(``ours`` under the pool's demand mix), so a request served here is one the portal would place.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from allocations.mig.demand import DemandMix
from allocations.mig.engine import PlacementEngine, fits_now
from allocations.mig.fleet import Fleet, PlacementRequest

POLICY = "ours"


@dataclass(frozen=True, slots=True)
class Ask:
    """A request as the planner sees it: whose, which profile, how many slices (on one node)."""

    key: str
    tenant_id: int
    profile: str
    count: int


@dataclass(frozen=True, slots=True)
class Capacity:
    """A pool at one moment: GPUs, whole GPUs free, compute slices and memory slots (total and held), and how
    many more slices of each offered profile fit now (each profile alone)."""

    gpus: int
    whole_gpus_free: int
    compute_total: int
    compute_held: int
    memory_total: int
    memory_held: int
    fits: dict[str, int]

    @property
    def compute_free(self) -> int:
        return self.compute_total - self.compute_held

    @property
    def memory_free(self) -> int:
        return self.memory_total - self.memory_held


def capacity(fleet: Fleet, offered: Sequence[str]) -> Capacity:
    """The fleet's :class:`Capacity`; ``fits`` lists exactly the ``offered`` profiles."""
    gpus = fleet.gpus()
    compute_held = memory_held = compute_total = memory_total = 0
    for gpu in gpus:
        compute_total += gpu.model.compute_slices
        memory_total += gpu.model.memory_slices
        for instance in gpu.instances:
            profile = gpu.model.profile(instance.profile)
            compute_held += profile.compute_slices
            memory_held += profile.memory_slices
    fits = fits_now(fleet)
    return Capacity(
        gpus=len(gpus),
        whole_gpus_free=sum(1 for gpu in gpus if not gpu.instances),
        compute_total=compute_total,
        compute_held=compute_held,
        memory_total=memory_total,
        memory_held=memory_held,
        fits={p: fits.get(p, 0) for p in offered},
    )


class Replay:
    """Requests placed one after the other onto one engine built over the fleet (which it does not change)."""

    def __init__(self, fleet: Fleet, *, pool: str, demand: DemandMix) -> None:
        self.pool = pool
        self.engine = PlacementEngine(fleet, POLICY, demand)

    def place(self, asks: Iterable[Ask]) -> list[Ask]:
        """Place each ask that fits, in order; the ones placed."""
        served = []
        for ask in asks:
            decision = self.engine.place(PlacementRequest(ask.profile, ask.count, self.pool), owner=ask.key)
            if decision is not None:
                served.append(ask)
        return served


@dataclass(frozen=True, slots=True)
class Served:
    """Of ``requests`` asks (``slices`` slices), how many would be placed."""

    requests: int
    slices: int
    served_requests: int
    served_slices: int


def served(asked: Sequence[Ask], placed: Sequence[Ask]) -> Served:
    return Served(
        requests=len(asked),
        slices=sum(a.count for a in asked),
        served_requests=len(placed),
        served_slices=sum(a.count for a in placed),
    )
