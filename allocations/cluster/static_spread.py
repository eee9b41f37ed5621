"""A static-MIG request spread over several GPUs of one node (issue 12).

A request of `count` slices whose instances no single GPU has free is planned over the GPUs of one node (the
holder pod binds every claim of a request, so they share a node): the planner (allocations/mig/reconfig.py)
prices k slices on each GPU alone, GPUs being independent, and a small table over the node's GPUs in index
order picks how many go where. Rank: fewest MIG operations, then fewest GPUs to reconfigure, then fewest GPUs;
ties go to the earlier node and GPUs. One plan per GPU: static_provisioning asks for one reconfiguration per GPU
that needs one, in this order.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import TYPE_CHECKING

from allocations.cluster.static_placement import StaticChoice, StaticGpu, choose_static, static_gpus
from allocations.mig.reconfig import ReconfigurationPlan
from allocations.models import NodePool

if TYPE_CHECKING:
    from allocations.cohorts.fence import HeldSlot

Rank = tuple[int, int, int]  # operations, GPUs to reconfigure, GPUs


@dataclass(frozen=True, slots=True)
class StaticSpread:
    """One choice per GPU used, in node and index order; each plan's targets are that GPU's share."""

    choices: tuple[StaticChoice, ...]

    @property
    def operations(self) -> int:
        return sum(c.plan.cost for c in self.choices)

    @property
    def to_reconfigure(self) -> tuple[StaticChoice, ...]:
        return tuple(c for c in self.choices if c.plan.operations)


def _plans(gpu: StaticGpu, profile: str, count: int, mig_mode: str) -> dict[int, ReconfigurationPlan]:
    """k -> the cheapest plan for k slices on this GPU alone, for k = 1 .. the most it can take (up to count)."""
    out: dict[int, ReconfigurationPlan] = {}
    for k in range(1, count + 1):
        plan = gpu.plan(profile, k, mig_mode)
        if plan is None:
            break  # no room for k: none for more either
        out[k] = plan
    return out


def _spread_on_node(gpus: list[StaticGpu], profile: str, count: int, mig_mode: str) -> tuple[Rank, StaticSpread] | None:
    # table[j]: the best way found so far to place j slices on the GPUs seen, as (rank, ((gpu, plan), ...)).
    table: dict[int, tuple[Rank, tuple[tuple[StaticGpu, ReconfigurationPlan], ...]]] = {0: ((0, 0, 0), ())}
    for gpu in gpus:
        grown = dict(table)
        plans = _plans(gpu, profile, count, mig_mode)
        for j, (rank, picks) in table.items():
            for k, plan in plans.items():
                if j + k > count:
                    break
                new_rank = (rank[0] + plan.cost, rank[1] + bool(plan.operations), rank[2] + 1)
                if j + k not in grown or new_rank < grown[j + k][0]:  # equal ranks: earlier GPUs keep it
                    grown[j + k] = (new_rank, (*picks, (gpu, plan)))
        table = grown
    if count not in table:
        return None
    rank, picks = table[count]
    return rank, StaticSpread(choices=tuple(gpu.choice(plan) for gpu, plan in picks))


def choose_static_spread(
    *, pool: NodePool, profile: str, count: int, freed: Collection[str] = (), fenced: Sequence[HeldSlot] = ()
) -> StaticSpread | None:
    """The cheapest way to place `count` x `profile` on GPUs of one ready node of the pool (one GPU included),
    or None when no node can take them even after changing its GPUs' free space; `freed`, `fenced`: as for
    static_placement.static_gpus. Caller holds the pool lock."""
    best: tuple[Rank, StaticSpread] | None = None
    candidates = static_gpus(pool=pool, profile=profile, freed=freed, fenced=fenced)
    for _, on_node in groupby(candidates, key=lambda g: g.gpu.node.name):
        found = _spread_on_node(list(on_node), profile, count, pool.mig_mode)
        if found is not None and (best is None or found[0] < best[0]):
            best = found
    return None if best is None else best[1]


def choose_static_slices(
    *, pool: NodePool, profile: str, count: int, freed: Collection[str] = (), fenced: Sequence[HeldSlot] = ()
) -> list[StaticChoice] | None:
    """Where a request of `count` x `profile` goes (static_provisioning places it here; a lender's room is
    planned here too, allocations/cohorts/fence.py): one GPU when free instances there fit, or when no spread
    over GPUs costs fewer operations; None when nothing fits. `freed`, `fenced`: as for static_gpus."""
    single = choose_static(pool=pool, profile=profile, count=count, freed=freed, fenced=fenced)
    if (single is not None and not single.plan.operations) or count == 1:
        return None if single is None else [single]
    spread = choose_static_spread(pool=pool, profile=profile, count=count, freed=freed, fenced=fenced)
    if spread is not None and pool.mig_mode == NodePool.MigMode.STATIC_MANAGER and len(spread.to_reconfigure) > 1:
        # The MIG manager applies a whole node's config per change: two changes of one node at once would each
        # write the other GPU's old layout back. One change per request there.
        spread = None
    if spread is not None and (single is None or spread.operations < single.plan.cost):
        return list(spread.choices)
    return None if single is None else [single]
