"""When each queued request can start (issue 15): the pool's future free layout, lease end by lease end.

Slot-aware: a lease that ends frees particular slots on a particular GPU, and a request starts only when the
placement engine finds a layout that fits it, not when enough slices are free in total. The simulation replays
the leases that end (earliest first), and after each end admits, in queue order, the queued requests the freed
layout fits; an admitted request holds its slots for its own lease, so those ahead in the queue delay those
behind exactly as they will. Requests whose lease has no end (still provisioning) are treated as staying.
Pure: a Fleet in, estimates out (no database), so the pages, the reservation rule and tests share it.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from allocations.mig.demand import DemandMix
from allocations.mig.engine import choose_placement
from allocations.mig.fleet import Fleet, Gpu, Instance, Node, PlacementRequest


@dataclass(frozen=True, slots=True)
class Lease:
    owner: str  # the allocation id, as the fleet's instances name it
    ends_at: datetime


@dataclass(frozen=True, slots=True)
class QueuedAsk:
    allocation_id: int
    profile: str
    count: int
    lease_hours: int


@dataclass(frozen=True, slots=True)
class Estimate:
    starts_at: datetime
    node: str  # where the freed layout fits it: the node the starvation bound reserves


def copy_fleet(fleet: Fleet) -> Fleet:
    return Fleet(
        [Node(n.name, [Gpu(g.node, g.index, g.model, list(g.instances)) for g in n.gpus], n.pool) for n in fleet.nodes]
    )


def _place(fleet: Fleet, ask: QueuedAsk, pool: str, policy: str, demand: DemandMix | None) -> str | None:
    """Place `ask` into `fleet` (owner q<id>) when it fits; the node's name, or None."""
    decision = choose_placement(
        fleet, PlacementRequest(profile=ask.profile, count=ask.count, pool=pool), policy, demand
    )
    if decision is None:
        return None
    for slot in decision.slots:
        fleet.gpu(slot.node, slot.gpu_index).instances.append(
            Instance(profile=ask.profile, start=slot.start, owner=f"q{ask.allocation_id}")
        )
    return decision.slots[0].node


def _free(fleet: Fleet, owner: str) -> None:
    for gpu in fleet.gpus():
        gpu.instances = [i for i in gpu.instances if i.owner != owner]


def fits_when_empty(fleet: Fleet, *, profile: str, count: int, pool: str) -> bool:
    """Whether `count` x `profile` fits the fleet's GPUs with nothing on them: a request that does not can never
    be admitted, whatever ends (it needs more GPUs on one node than any node has). A fleet with no ready GPU at
    all (its nodes left or are not ready) says yes: a node that comes back may hold it. A request's slices go on one
    node, so each kind of node (its GPUs' models in order) is tried once, alone: a request is refused or queued in a
    512-GPU pool of identical nodes without planning over all of them."""
    if not fleet.gpus():
        return True
    # By the models' identity (the catalog's and each published one are shared objects): hashing a model hashes its
    # whole profile table. Equal models that are distinct objects only cost an extra try.
    kinds = {tuple(id(g.model) for g in n.gpus): n for n in fleet.nodes if n.gpus}
    ask = PlacementRequest(profile=profile, count=count, pool=pool)
    for n in kinds.values():
        empty = Fleet([Node(n.name, [Gpu(g.node, g.index, g.model, []) for g in n.gpus], n.pool)])
        if choose_placement(empty, ask, "first-fit") is not None:
            return True
    return False


def never_fits(fleet: Fleet, *, pool_name: str, pool: str, profile: str, count: int, what: str = "") -> str | None:
    """Why `count` x `profile` (`what`, in words, if given) can never be placed in the pool (no node holds that many
    even empty), or None when it may be (fits_when_empty). One wording for the request refused when it is made
    (services/requests.py) and for one failed when the pool shrank under it after approval (services/queue_entry)."""
    if fits_when_empty(fleet, profile=profile, count=count, pool=pool):
        return None
    most = _most_on_one_node(fleet, profile=profile, below=count, pool=pool)
    return (
        f"{pool_name} cannot hold {what or f'{count} x {profile}'} even with every GPU free: a request's slices go "
        f"on one node, where at most {most} x {profile} fit"
    )


def _most_on_one_node(fleet: Fleet, *, profile: str, below: int, pool: str) -> int:
    """The largest count under `below` that fits the empty fleet (what fits is monotone in the count): the number
    a refused request's owner can ask for instead. A binary search, run only when a request is refused."""
    low, high = 0, below - 1
    while low < high:
        middle = (low + high + 1) // 2
        if fits_when_empty(fleet, profile=profile, count=middle, pool=pool):
            low = middle
        else:
            high = middle - 1
    return low


def estimate_starts(
    fleet: Fleet,
    *,
    leases: Sequence[Lease],
    queue: Sequence[QueuedAsk],
    now: datetime,
    pool: str,
    policy: str = "ours",
    demand: DemandMix | None = None,
) -> dict[int, Estimate]:
    """Per queued request (in admission order), when and where it is expected to start; absent: not before every
    known lease has ended (it needs room that no lease end frees, e.g. a node to be added)."""
    future = copy_fleet(fleet)
    events = [(lease.ends_at, lease.owner) for lease in leases]
    heapq.heapify(events)
    waiting = list(queue)
    found: dict[int, Estimate] = {}
    at = now
    while True:
        still: list[QueuedAsk] = []
        for ask in waiting:
            node = _place(future, ask, pool, policy, demand)
            if node is None:
                still.append(ask)
                continue
            found[ask.allocation_id] = Estimate(starts_at=at, node=node)
            heapq.heappush(events, (at + timedelta(hours=ask.lease_hours), f"q{ask.allocation_id}"))
        waiting = still
        if not waiting or not events:
            return found
        at = events[0][0]
        while events and events[0][0] == at:
            _free(future, heapq.heappop(events)[1])
