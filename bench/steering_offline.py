"""The offline reference for steering on Kubernetes (bench/provision.py, trickle): the same requests, one at a time,
placed by the engine alone (no scheduler, no cluster), with the demand mix the portal would see.

`fill(sequence, nodes, policy)` places each request where `policy` says, or refuses it when nothing fits (none
departs), and returns what was served. `first-fit` is the scheduler's own rule on GPUs in device order; `ours` is
the policy steering pins (GPU and slot). The share of `ours`' gain that reaches the cluster is
(cluster - first-fit) / (ours - first-fit) in compute slices served.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from allocations.mig.catalog import GpuModel
from allocations.mig.demand import DemandMix
from allocations.mig.engine import choose_placement, fits_now
from allocations.mig.fleet import Fleet, Gpu, Instance, Node, PlacementRequest

# The portal's demand window and prior (allocations/placement.py: recent_demand); kept equal by hand, a bench only.
DEMAND_WINDOW = 500
DEMAND_PRIOR_WEIGHT = 20.0


@dataclass(frozen=True, slots=True)
class Served:
    admitted: int
    first_refusal: int | None  # index of the first request refused, None when all fit
    compute: int  # compute slices served
    whole_gpus: int
    fits: dict[str, int]


def layout_fleet(node_names: list[str], model: GpuModel, layout: dict[tuple[str, int], list[Instance]]) -> Fleet:
    return Fleet([Node(n, [Gpu(n, i, model, list(layout.get((n, i), []))) for i in range(8)], "p") for n in node_names])


def served(fleet: Fleet, admitted: int, first_refusal: int | None) -> Served:
    compute = sum(g.model.profile(i.profile).compute_slices for n in fleet.nodes for g in n.gpus for i in g.instances)
    whole = sum(1 for n in fleet.nodes for g in n.gpus if not g.instances)
    return Served(admitted, first_refusal, compute, whole, fits_now(fleet))


def fill(sequence: list[str], node_names: list[str], model: GpuModel, policy: str) -> Served:
    fleet = layout_fleet(node_names, model, {})
    seen: list[str] = []
    admitted, first_refusal = 0, None
    for n, profile in enumerate(sequence):
        seen.append(profile)
        demand = DemandMix(counts=dict(Counter(seen[-DEMAND_WINDOW:])), prior_weight=DEMAND_PRIOR_WEIGHT)
        decision = choose_placement(fleet, PlacementRequest(profile=profile, count=1, pool="p"), policy, demand)
        if decision is None:
            first_refusal = n if first_refusal is None else first_refusal
            continue
        [slot] = decision.slots
        fleet.gpu(slot.node, slot.gpu_index).instances.append(Instance(profile, slot.start, owner=str(n)))
        admitted += 1
    return served(fleet, admitted, first_refusal)
