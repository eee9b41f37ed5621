"""Defragmentation planner for a pool: free whole GPUs, or make room for a blocked request.

What may change: free instances may be destroyed; *idle* allocations may be moved to another GPU (a
new instance is created there, the tenant's work moves, the old instance is destroyed). Busy
allocations never move. The plan is advice: the portal shows it, an operator or a worker applies it.

Two modes (both greedy, with exact checks at each step):

* **whole GPUs** (no request): GPUs holding only free instances are cleared; then GPUs holding only
  idle allocations and free instances are emptied, fewest moves first, when every idle allocation
  finds room on another GPU that is already in use (so moving never opens a new GPU).
* **blocked request**: on each GPU, try the smallest sets of movable instances (fewest moves, then
  fewest destroys) whose removal lets the profile fit, with every moved allocation re-homed elsewhere;
  keep the cheapest GPU (device order on ties).

Destinations are chosen with the ``ours`` policy under the given demand mix. The gain is reported as
whole GPUs before/after and the what-if (``fits_now``) before/after.

Order of execution: moves (create at the destination, migrate, destroy the source), then destroys of
free instances, then the request's create. Each step keeps every GPU's layout valid, because each step
only removes instances from a valid layout or adds one that :meth:`.layout.Geometry.options` accepted.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .demand import DemandMix
from .engine import PlacementEngine
from .fleet import Fleet, Gpu, Instance, Node, PlacementRequest, SlotChoice
from .layout import LayoutKey, geometry
from .policies import FragmentationAware

_Ref = tuple[str, int]  # (node, gpu index)


@dataclass(frozen=True, slots=True)
class Destroy:
    node: str
    gpu_index: int
    profile: str
    start: int


@dataclass(frozen=True, slots=True)
class Move:
    """Move an idle allocation: create ``profile`` at the destination (or reuse a free instance there),
    migrate ``owner``'s work, destroy the source instance."""

    owner: str
    profile: str
    from_node: str
    from_gpu: int
    from_start: int
    to_node: str
    to_gpu: int
    to_start: int
    reuse: bool = False


@dataclass(frozen=True, slots=True)
class DefragPlan:
    moves: tuple[Move, ...]
    destroys: tuple[Destroy, ...]
    placement: SlotChoice | None  # where the blocked request goes once the plan is applied
    whole_gpus_before: int
    whole_gpus_after: int
    fits_before: Mapping[str, int]
    fits_after: Mapping[str, int]

    @property
    def gpus_freed(self) -> int:
        return self.whole_gpus_after - self.whole_gpus_before

    @property
    def gain(self) -> dict[str, int]:
        """Per profile: how many more instances fit after the plan than before."""
        return {p: self.fits_after.get(p, 0) - n for p, n in self.fits_before.items()}

    @property
    def empty(self) -> bool:
        return not self.moves and not self.destroys


class _State:
    """Mutable copy of a pool's layouts, in device order."""

    def __init__(self, fleet: Fleet, pool: str | None) -> None:
        self.pool = pool
        self.nodes = [n for n in fleet.nodes if pool is None or n.pool == pool]
        self.gpus: dict[_Ref, Gpu] = {}
        self.order: list[_Ref] = []
        for n in self.nodes:
            for g in n.gpus:
                ref = (n.name, g.index)
                self.gpus[ref] = Gpu(g.node, g.index, g.model, list(g.instances))
                self.order.append(ref)

    def fleet(self) -> Fleet:
        return Fleet([Node(n.name, [self.gpus[(n.name, g.index)] for g in n.gpus], n.pool) for n in self.nodes])

    def whole(self) -> int:
        return sum(1 for g in self.gpus.values() if not g.instances)

    def fits(self) -> dict[str, int]:
        return PlacementEngine(self.fleet(), "first-fit", DemandMix()).fits_now()


def _key(g: Gpu, instances: Sequence[Instance] | None = None) -> LayoutKey:
    geom = geometry(g.model)
    return geom.key((geom.index[x.profile], x.start, x.free) for x in (g.instances if instances is None else instances))


def _rehome(
    state: _State, profile: str, avoid: set[_Ref], policy: FragmentationAware, mix: DemandMix
) -> tuple[_Ref, int, bool] | None:
    """Best destination for one instance of ``profile`` on a GPU already in use, outside ``avoid``."""
    best: tuple[tuple[float, ...], int, _Ref, int, bool] | None = None
    for n, ref in enumerate(state.order):
        g = state.gpus[ref]
        if ref in avoid or not any(not x.free for x in g.instances):
            continue
        geom = geometry(g.model)
        i = geom.index.get(profile)
        if i is None:
            continue
        r = policy.rank(geom, _key(g), i, mix.weights(g.model))
        if r is not None and (best is None or (r[0], n) < best[:2]):
            best = (r[0], n, ref, r[1].start, r[1].reuse)
    return None if best is None else (best[2], best[3], best[4])


def _apply_move(state: _State, ref: _Ref, inst: Instance, dest: tuple[_Ref, int, bool]) -> Move:
    src = state.gpus[ref]
    src.instances = [x for x in src.instances if x.start != inst.start]
    to, start, reuse = dest
    dst = state.gpus[to]
    dst.instances = [x for x in dst.instances if not (reuse and x.start == start)]
    dst.instances.append(Instance(inst.profile, start, inst.owner, inst.idle))
    return Move(inst.owner or "", inst.profile, ref[0], ref[1], inst.start, to[0], to[1], start, reuse)


def plan_defrag(
    fleet: Fleet,
    pool: str | None = None,
    request: PlacementRequest | None = None,
    max_moves: int = 8,
    demand: DemandMix | None = None,
) -> DefragPlan | None:
    """A defragmentation plan for ``pool`` (see the module docstring). With ``request`` (one instance),
    the cheapest plan that makes it fit, or ``None`` if none within ``max_moves`` moves; without, the
    plan that frees the most whole GPUs within ``max_moves`` moves (possibly empty)."""
    mix = demand if demand is not None else DemandMix()
    policy = FragmentationAware()
    state = _State(fleet, pool)
    whole_before, fits_before = state.whole(), state.fits()
    if request is None:
        moves, destroys = _free_whole_gpus(state, max_moves, policy, mix)
        placement = None
    else:
        if request.count != 1:
            raise ValueError("the defrag planner makes room for one instance at a time")
        found = _make_room(state, request, max_moves, policy, mix)
        if found is None:
            return None
        moves, destroys, placement = found
    return DefragPlan(
        moves=tuple(moves),
        destroys=tuple(destroys),
        placement=placement,
        whole_gpus_before=whole_before,
        whole_gpus_after=state.whole(),
        fits_before=fits_before,
        fits_after=state.fits(),
    )


def _free_whole_gpus(
    state: _State, max_moves: int, policy: FragmentationAware, mix: DemandMix
) -> tuple[list[Move], list[Destroy]]:
    moves: list[Move] = []
    destroys: list[Destroy] = []
    emptied: set[_Ref] = set()

    def clear_free(ref: _Ref) -> None:
        g = state.gpus[ref]
        destroys.extend(Destroy(ref[0], ref[1], x.profile, x.start) for x in g.instances if x.free)
        g.instances = [x for x in g.instances if not x.free]

    for ref in state.order:
        g = state.gpus[ref]
        if g.instances and all(x.free for x in g.instances):
            clear_free(ref)
            emptied.add(ref)
    candidates = [
        ref for ref in state.order if state.gpus[ref].instances and all(x.movable for x in state.gpus[ref].instances)
    ]
    candidates.sort(key=lambda r: sum(1 for x in state.gpus[r].instances if not x.free))
    for ref in candidates:
        held = sorted(
            (x for x in state.gpus[ref].instances if not x.free),
            key=lambda x: -state.gpus[ref].model.profile(x.profile).memory_slices,
        )
        if len(moves) + len(held) > max_moves:
            continue
        snapshot = {r: list(g.instances) for r, g in state.gpus.items()}
        tentative: list[Move] = []
        for inst in held:
            # Never onto GPUs we are emptying or have emptied; _rehome only picks GPUs in use.
            dest = _rehome(state, inst.profile, emptied | {ref}, policy, mix)
            if dest is None:
                break
            tentative.append(_apply_move(state, ref, inst, dest))
        if len(tentative) < len(held):
            for r, insts in snapshot.items():
                state.gpus[r].instances = insts
            continue
        moves.extend(tentative)
        clear_free(ref)
        emptied.add(ref)
    return moves, destroys


def _make_room(
    state: _State, request: PlacementRequest, max_moves: int, policy: FragmentationAware, mix: DemandMix
) -> tuple[list[Move], list[Destroy], SlotChoice] | None:
    engine = PlacementEngine(state.fleet(), "ours", mix)
    decision = engine.choose(request)
    if decision is not None:
        return [], [], decision.slots[0]
    best: tuple[tuple[int, int, int], list[Move], list[Destroy], SlotChoice, dict[_Ref, Gpu]] | None = None
    for n, ref in enumerate(state.order):
        g = state.gpus[ref]
        geom = geometry(g.model)
        i = geom.index.get(request.profile)
        if i is None or (request.model is not None and g.model.name != request.model):
            continue
        movable = [x for x in g.instances if x.movable]
        for drop in sorted(
            (c for k in range(1, len(movable) + 1) for c in itertools.combinations(movable, k)),
            key=lambda c: (sum(1 for x in c if not x.free), len(c)),
        ):
            n_moves = sum(1 for x in drop if not x.free)
            if n_moves > max_moves or (best is not None and (n_moves, len(drop) - n_moves, n) >= best[0]):
                continue
            rest = [x for x in g.instances if x not in drop]
            options = geom.options(_key(g, rest), i)
            if not options:
                continue
            found = _try_drop(state, ref, drop, request, policy, mix)
            if found is not None:
                best = ((n_moves, len(drop) - n_moves, n), *found)
                break  # later subsets of this GPU cost at least as much
    if best is None:
        return None
    state.gpus = best[4]
    return best[1], best[2], best[3]


def _try_drop(
    state: _State,
    ref: _Ref,
    drop: Sequence[Instance],
    request: PlacementRequest,
    policy: FragmentationAware,
    mix: DemandMix,
) -> tuple[list[Move], list[Destroy], SlotChoice, dict[_Ref, Gpu]] | None:
    """Apply ``drop`` on a scratch copy of the layouts: re-home its idle allocations elsewhere, destroy
    its free instances, then place the request on this GPU. ``state`` itself is not changed."""
    scratch = _State.__new__(_State)
    scratch.pool, scratch.nodes, scratch.order = state.pool, state.nodes, state.order
    scratch.gpus = {r: Gpu(g.node, g.index, g.model, list(g.instances)) for r, g in state.gpus.items()}
    moves: list[Move] = []
    for inst in sorted((x for x in drop if not x.free), key=lambda x: x.start):
        dest = _rehome(scratch, inst.profile, {ref}, policy, mix)
        if dest is None:
            return None
        moves.append(_apply_move(scratch, ref, inst, dest))
    g = scratch.gpus[ref]
    destroys = [Destroy(ref[0], ref[1], x.profile, x.start) for x in drop if x.free]
    g.instances = [x for x in g.instances if x not in drop or not x.free]
    geom = geometry(g.model)
    r = policy.rank(geom, _key(g), geom.index[request.profile], mix.weights(g.model))
    if r is None:
        return None
    option = r[1]
    placement = SlotChoice(ref[0], ref[1], request.profile, option.start, option.reuse)
    return moves, destroys, placement, scratch.gpus
