"""Room for a lender by reclaim and moves together (issue 15): pure Python, no database.

`pick_fitting` (reclaim.py) only takes borrowed allocations back. Traced in bench/fairness.py, a lender's request
within its guarantee can still wait far past the grace when no set of borrowed allocations frees a place where its
profile goes: a 4g.40gb or 7g.80gb needs start 0 (or a whole GPU), and the GPU that would do is also held by a
small slice that is not borrowed (guaranteed use, or a tenant that is not above its guarantee), or by nothing that
may be taken at all. Moving one or two movable slices elsewhere (compaction, issue 14: what `rescue_with_moves`
does for a request refused for fragmentation) clears such a GPU.

`plan_room` tries, in this order of cost: reclaim alone (`pick_fitting`, unchanged); then every set "the first k
borrowed allocations of one GPU, in reclaim order, within the caps" (k = 0: moves alone), each followed by the
defrag planner's cheapest plan of at most `max_moves` moves of movable allocations (allocations/mig/defrag.py) that
makes the request fit. Of those found, the fewest allocations touched (taken back + moved) wins, then the fewest
taken back (a move restarts a pod; a take-back ends it and requeues it), then the fewest compute slices taken, then
the youngest. Moves never land on an empty GPU, and never move what is taken back.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from allocations.cohorts.accounting import Shortfall
from allocations.cohorts.reclaim import NOTHING, Candidate, pick_fitting, reclaim_order
from allocations.mig.defrag import DefragPlan, Move, plan_defrag
from allocations.mig.engine import choose_placement
from allocations.mig.fleet import Fleet, Gpu, Node, PlacementRequest, SlotChoice
from allocations.mig.layout import geometry

# At most this many moves for one lender, as compaction's rescue of a refused request (services/compaction.py
# RESCUE_MAX_MOVES; not imported: this module stays free of Django).
MAX_MOVES = 2


@dataclass(frozen=True)
class RoomPlan:
    """What makes room for the request: borrowed allocations to take back (with notice), and the defrag plan of
    the moves to make meanwhile (None: reclaim alone). The moves are valid on today's layout: none lands where a
    slice taken back still is, so they can start at once, during the grace."""

    reclaims: list[Candidate]
    defrag: DefragPlan | None = None

    @property
    def moves(self) -> tuple[Move, ...]:
        return () if self.defrag is None else self.defrag.moves

    @property
    def placement(self) -> SlotChoice | None:
        """Where the request goes once the moves are made and the reclaimed slices gone (None: reclaim alone,
        the placement engine decides then)."""
        return None if self.defrag is None else self.defrag.placement


def _without(fleet: Fleet, released: set[str], movable: Collection[str], only: tuple[str, int] | None = None) -> Fleet:
    """The fleet with `released` owners' instances gone and the other `movable` owners' marked idle (the defrag
    planner's word for "may move"), on GPU `only` when given (the room is made there: moving others is no use,
    and the planner then tries that GPU alone, which keeps a large pool's search short); every other instance
    stays put."""
    return Fleet(
        [
            Node(
                n.name,
                [
                    Gpu(
                        g.node,
                        g.index,
                        g.model,
                        [
                            replace(
                                i,
                                idle=i.owner is not None
                                and i.owner in movable
                                and (only is None or only == (g.node, g.index)),
                            )
                            for i in g.instances
                            if i.owner is None or i.owner not in released
                        ],
                    )
                    for g in n.gpus
                ],
                n.pool,
            )
            for n in fleet.nodes
        ]
    )


def _room_on(gpu: Gpu, profile: str, released: set[str], movable: Collection[str], max_moves: int) -> bool:
    """Whether the profile could go on this GPU once `released` is gone and at most `max_moves` of its movable
    instances moved (where to is the planner's question: this only rules out a GPU cheaply)."""
    geom = geometry(gpu.model)
    i = geom.index.get(profile)
    if i is None:
        return False
    rest = [x for x in gpu.instances if x.owner is not None and x.owner not in released]
    may_move = [x for x in rest if x.owner in movable]
    for k in range(min(max_moves, len(may_move)) + 1):
        for drop in itertools.combinations(may_move, k):
            kept = [x for x in rest if x not in drop]
            if geom.options(geom.key((geom.index[x.profile], x.start, False) for x in kept), i):
                return True
    return False


def _holds(fleet: Fleet, owners: set[str], node: str, gpu: int) -> bool:
    return bool(owners) and any(i.owner in owners for i in fleet.gpu(node, gpu).instances)


def _prefixes(group: Sequence[Candidate], caps: Mapping[int, tuple[int, int]] | None) -> list[list[Candidate]]:
    """The first 1, 2, ... candidates of `group` that may be taken (a tenant back within its cap is passed over)."""
    taken: dict[int, list[int]] = {}
    chosen: list[Candidate] = []
    out: list[list[Candidate]] = []
    for candidate in group:
        if caps is not None:
            cap = caps.get(candidate.tenant_id, (0, 0))
            so_far = taken.setdefault(candidate.tenant_id, [0, 0])
            if so_far[0] >= cap[0] and so_far[1] >= cap[1]:
                continue
            so_far[0] += candidate.compute
            so_far[1] += candidate.memory
        chosen.append(candidate)
        out.append(list(chosen))
    return out


def plan_room(
    fleet: Fleet,
    request: PlacementRequest,
    candidates: Sequence[Candidate],
    movable: Collection[str],
    need: Shortfall = NOTHING,
    *,
    caps: Mapping[int, tuple[int, int]] | None = None,
    max_moves: int = MAX_MOVES,
) -> RoomPlan | None:
    """The cheapest way (see the module docstring) to make room for `request` by taking back borrowed
    `candidates` and moving at most `max_moves` of the allocations in `movable` (owners, as in the fleet:
    str(allocation_id)); None when there is none, or the request already fits (room is not what it lacks).
    `need` and `caps` as for `pick_fitting`. Moves only for a request of one instance (the defrag planner's)."""
    reclaims = pick_fitting(fleet, request, candidates, need, caps=caps)
    if reclaims:
        return RoomPlan(reclaims)
    if request.count != 1 or choose_placement(fleet, request, "first-fit") is not None:
        return None
    ordered = reclaim_order(candidates)
    rank = {c.allocation_id: n for n, c in enumerate(ordered)}
    at: dict[str, set[tuple[str, int]]] = {}
    for gpu in fleet.gpus():
        for instance in gpu.instances:
            if instance.owner is not None:
                at.setdefault(instance.owner, set()).add((gpu.node, gpu.index))
    trials: list[tuple[tuple[str, int] | None, list[Candidate]]] = [(None, [])]
    seen: set[tuple[int, ...]] = {()}
    for gpu in fleet.gpus():
        group = [c for c in ordered if (gpu.node, gpu.index) in at.get(str(c.allocation_id), set())]
        for prefix in _prefixes(group, caps):
            ids = tuple(sorted(c.allocation_id for c in prefix))
            if not _room_on(gpu, request.profile, {str(c.allocation_id) for c in prefix}, movable, max_moves):
                continue  # no take-back of these and moves off this GPU can free a place for the profile here
            if ids not in seen:
                seen.add(ids)
                trials.append(((gpu.node, gpu.index), prefix))
    best: RoomPlan | None = None
    best_key: tuple[int, int, int, int] | None = None
    for only, taken in trials:
        if sum(c.compute for c in taken) < need.compute or sum(c.memory for c in taken) < need.memory:
            continue
        released = {str(c.allocation_id) for c in taken}
        trial = _without(fleet, released, movable, only)
        plan = plan_defrag(trial, pool=request.pool, request=request, max_moves=max_moves)
        if plan is None or plan.placement is None or not (plan.moves or taken):
            continue
        if any(_holds(fleet, released, m.to_node, m.to_gpu) for m in plan.moves):
            continue  # it would land where a slice on notice runs until the grace is over
        key = (
            len(taken) + len(plan.moves),
            len(taken),
            sum(c.compute for c in taken),
            sum(rank[c.allocation_id] for c in taken),
        )
        if best_key is None or key < best_key:
            best, best_key = RoomPlan(taken, plan), key
    return best
