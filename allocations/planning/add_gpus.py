"""What-if: "if we add N GPUs of model X to pool P".

The new GPUs come as new, empty nodes of ``gpus_per_node`` GPUs each (the last one holds the rest), after the
pool's nodes in device order. Before and after: capacity (what fits now per offered profile, whole GPUs free,
compute slices and memory slots), and how much of the waiting demand would be served: the queued requests in
admission order first (they are ahead of anything new), then the requests refused lately, each placed by the
portal's policy on what the ones before it left.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from allocations.mig.catalog import GpuModel
from allocations.mig.demand import DemandMix
from allocations.mig.fleet import Fleet, Gpu, Node

from .replay import Ask, Capacity, Replay, Served, capacity, served

NEW_NODE_PREFIX = "what-if-node-"


@dataclass(frozen=True, slots=True)
class AddGpusAnswer:
    model: str
    gpus_added: int
    nodes_added: int
    before: Capacity
    after: Capacity
    queued_before: Served
    queued_after: Served
    refused_before: Served
    refused_after: Served


def added_nodes(model: GpuModel, count: int, gpus_per_node: int, pool: str) -> list[Node]:
    """``count`` empty GPUs of ``model`` on new nodes of ``gpus_per_node`` GPUs (the last may hold fewer)."""
    nodes = []
    for n, first in enumerate(range(0, count, gpus_per_node)):
        name = f"{NEW_NODE_PREFIX}{n + 1}"
        size = min(gpus_per_node, count - first)
        nodes.append(Node(name, [Gpu(name, g, model) for g in range(size)], pool))
    return nodes


def what_if_add_gpus(
    fleet: Fleet,
    *,
    pool: str,
    offered: Sequence[str],
    model: GpuModel,
    count: int,
    gpus_per_node: int,
    queued: Sequence[Ask],
    refused: Sequence[Ask],
    demand: DemandMix,
) -> AddGpusAnswer:
    """The pool before and after ``count`` new GPUs of ``model``; ``queued`` in admission order."""
    new_nodes = added_nodes(model, count, gpus_per_node, pool)
    grown = Fleet([*fleet.nodes, *new_nodes])
    outcome = {}
    for name, each in (("before", fleet), ("after", grown)):
        replay = Replay(each, pool=pool, demand=demand)
        placed_queued = replay.place(queued)
        placed_refused = replay.place(refused)
        outcome[name] = (served(queued, placed_queued), served(refused, placed_refused))
    return AddGpusAnswer(
        model=model.name,
        gpus_added=count,
        nodes_added=len(new_nodes),
        before=capacity(fleet, offered),
        after=capacity(grown, offered),
        queued_before=outcome["before"][0],
        queued_after=outcome["after"][0],
        refused_before=outcome["before"][1],
        refused_after=outcome["after"][1],
    )
