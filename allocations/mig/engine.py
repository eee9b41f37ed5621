"""The placement engine: an index of the fleet's GPUs by layout, and decisions on top of it.

GPUs with the same model and the same layout are interchangeable except for their device order, so
the engine groups them into buckets keyed by ``(pool, model, layout)``. A decision ranks each bucket
once (ranks are cached per layout and demand snapshot, see :mod:`.policies`) and takes the
lowest-ordered GPU of the best bucket from a heap. A fleet of 1,000 nodes x 8 GPUs has a few hundred
distinct layouts, so a decision costs a few hundred dictionary lookups, whatever the fleet size.

Invariant: every GPU is in exactly one bucket, the one of its current layout; every layout the engine
holds is valid (checked on input, preserved by construction on commit and release).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .catalog import GpuModel
from .demand import DemandLearner, DemandMix
from .fill_left import FillContext, KeptEmpty
from .fleet import Fleet, Gpu, Instance, Node, PlacementDecision, PlacementRequest, SlotChoice
from .layout import Geometry, LayoutKey, Option, decode, geometry
from .policies import HoldContext, Policy, Rank, get_policy

#: Weight of the latest request in the smoothed releases-per-request rate (:attr:`PlacementEngine.churn`).
CHURN_SMOOTHING = 0.02
#: Requests after which an ended hold's outcome weighs half (:meth:`PlacementEngine.hold_ended`): the demand
#: learner's half-life, so a hold is priced by outcomes as recent as the mix it protects.
HOLD_OUTCOME_HALF_LIFE = 500.0


class InvalidLayout(ValueError):
    """A GPU reported a layout that breaks the MIG rules of its model (see :mod:`.layout`)."""


@dataclass(slots=True)
class _Slot:
    order: int  # device order
    node: int  # index into the engine's node list
    index: int  # GPU index on its node
    geom: Geometry
    key: LayoutKey
    owners: dict[int, tuple[str, bool]] = field(default_factory=dict)  # start -> (owner, idle)


@dataclass(slots=True)
class _Bucket:
    members: set[int] = field(default_factory=set)
    heap: list[int] = field(default_factory=list)

    def add(self, order: int) -> None:
        self.members.add(order)
        heapq.heappush(self.heap, order)
        if len(self.heap) > 2 * len(self.members) + 32:
            # Stale entries below the top are never popped; rebuild so churn cannot grow the heap.
            self.heap = sorted(self.members)

    def first(self) -> int:
        heap = self.heap
        while heap[0] not in self.members:  # lazy deletion: drop orders that left this bucket
            heapq.heappop(heap)
        return heap[0]


_Group = dict[LayoutKey, _Bucket]


class PlacementEngine:
    """Keeps the fleet's layouts indexed; answers placement and what-if questions against them.

    ``demand`` feeds the ``ours`` policy: a fixed :class:`DemandMix`, or a :class:`DemandLearner` that
    the engine updates with every request it sees (admitted or not). ``None`` means a learner with
    default settings.
    """

    def __init__(
        self,
        fleet: Fleet,
        policy: str | Policy = "ours",
        demand: DemandMix | DemandLearner | None = None,
    ) -> None:
        self.policy = get_policy(policy)
        self.demand: DemandMix | DemandLearner = DemandLearner() if demand is None else demand
        self._nodes: list[Node] = []
        self._node_pool: list[str] = []
        self._node_index: dict[str, int] = {}
        self._slots: list[_Slot] = []
        self._slot_index: dict[tuple[str, int], int] = {}
        self._groups: dict[tuple[str, int], _Group] = {}  # (pool, id(geometry)) -> layout buckets
        # (pool, id(geometry)) -> per profile, sum over GPUs of what fits: kept up to date by _move,
        # so the what-if costs O(profiles) instead of a scan of the buckets.
        self._fit_totals: dict[tuple[str, int], list[int]] = {}
        self._geoms: dict[int, Geometry] = {}
        # (id(geometry), profile index) -> layout -> cached rank, for the current demand snapshot
        self._ranks: dict[tuple[int, int], dict[LayoutKey, tuple[Rank, Option] | None]] = {}
        self._rank_version = -1
        # Releases per request, smoothed (a search policy simulates departures at this rate).
        self.churn = 0.0
        self._released = 0
        # Profile -> (ended, lost, forced) outcomes of held requests, decayed to request number ``_seen``.
        self._held_outcomes: dict[str, tuple[float, float, float, int]] = {}
        self._seen = 0
        # Compute slices of the requests this engine held since it last saw a release (``ours-hold`` budgets them; a
        # release makes room, and the portal retries held requests then).
        self.held = 0.0
        # Why the last ``choose`` refused a request that fits by the policy's fill-left rule (``None``: it did not):
        # the portal words such a hold apart from one that strands (allocations/admission/hold.py).
        self.kept_empty: KeptEmpty | None = None
        for node in fleet.nodes:
            self._add_node(node)
        # A policy whose rank depends on the fleet's size (``ours``: the cost of opening a GPU) is sized
        # once here; the portal builds one engine per pool, so that is the pool's size.
        sized_for = getattr(self.policy, "sized_for", None)
        if sized_for is not None:
            self.policy = sized_for(len(self._slots))

    # ----- building and updating the index -------------------------------------------------------

    def _add_node(self, node: Node) -> None:
        if node.name in self._node_index:
            raise ValueError(f"node {node.name!r} is listed twice")
        n = len(self._nodes)
        self._nodes.append(node)
        self._node_pool.append(node.pool)
        self._node_index[node.name] = n
        for gpu in node.gpus:
            geom = geometry(gpu.model)
            self._geoms[id(geom)] = geom
            slot = _Slot(len(self._slots), n, gpu.index, geom, self._key_of(geom, gpu))
            slot.owners = {i.start: (i.owner, i.idle) for i in gpu.instances if i.owner is not None}
            self._slots.append(slot)
            self._slot_index[(node.name, gpu.index)] = slot.order
            self._bucket(node.pool, geom, slot.key).add(slot.order)
            self._count_fit(node.pool, geom, slot.key, +1)

    @staticmethod
    def _key_of(geom: Geometry, gpu: Gpu) -> LayoutKey:
        try:
            # Not sorted: named_key caches per instance order, and sorting thousands of GPUs costs more.
            return geom.named_key(tuple([(i.profile, i.start, i.owner is None) for i in gpu.instances]))
        except ValueError as e:
            raise InvalidLayout(f"{gpu.node} GPU {gpu.index} ({gpu.model.name}): {e}") from None

    def _bucket(self, pool: str, geom: Geometry, key: LayoutKey) -> _Bucket:
        group = self._groups.setdefault((pool, id(geom)), {})
        bucket = group.get(key)
        if bucket is None:
            bucket = group[key] = _Bucket()
        return bucket

    def _count_fit(self, pool: str, geom: Geometry, key: LayoutKey, sign: int) -> None:
        totals = self._fit_totals.setdefault((pool, id(geom)), [0] * len(geom.profiles))
        for k, f in enumerate(geom.fit(key)):
            totals[k] += sign * f

    def _move(self, slot: _Slot, key: LayoutKey) -> None:
        pool = self._node_pool[slot.node]
        self._count_fit(pool, slot.geom, slot.key, -1)
        self._count_fit(pool, slot.geom, key, +1)
        group = self._groups[(pool, id(slot.geom))]
        old = group[slot.key]
        old.members.discard(slot.order)
        if not old.members:
            del group[slot.key]  # keeps the number of buckets to scan at the number of live layouts
        slot.key = key
        self._bucket(pool, slot.geom, key).add(slot.order)

    def set_layout(self, node: str, gpu_index: int, instances: Iterable[Instance]) -> None:
        """Replace a GPU's layout (e.g. with what the agent reports)."""
        slot = self._slots[self._slot_index[(node, gpu_index)]]
        insts = list(instances)
        key = self._key_of(slot.geom, Gpu(node, gpu_index, slot.geom.model, insts))
        slot.owners = {i.start: (i.owner, i.idle) for i in insts if i.owner is not None}
        self._move(slot, key)

    # ----- decisions -----------------------------------------------------------------------------

    def _snapshot(self) -> DemandMix:
        mix = self.demand.mix() if isinstance(self.demand, DemandLearner) else self.demand
        if self.policy.uses_demand and mix.version != self._rank_version:
            self._ranks.clear()  # ranks depend on the mix; a new snapshot invalidates them
            self._rank_version = mix.version
        return mix

    def _rank_table(self, geom: Geometry, i: int) -> dict[LayoutKey, tuple[Rank, Option] | None]:
        table = self._ranks.get((id(geom), i))
        if table is None:
            table = self._ranks[(id(geom), i)] = {}
        return table

    def _rank(self, geom: Geometry, key: LayoutKey, i: int, mix: DemandMix) -> tuple[Rank, Option] | None:
        table = self._rank_table(geom, i)
        if key in table:
            return table[key]
        r = table[key] = self.policy.rank(geom, key, i, mix.weights(geom.model))
        return r

    def _candidate_groups(self, request: PlacementRequest) -> list[tuple[str, Geometry, int, _Group]]:
        out = []
        for (pool, gid), group in self._groups.items():
            geom = self._geoms[gid]
            if request.pool is not None and pool != request.pool:
                continue
            if request.model is not None and request.model != geom.model.name:
                continue
            i = geom.index.get(request.profile)
            if i is not None:
                out.append((pool, geom, i, group))
        return out

    def choose(self, request: PlacementRequest) -> PlacementDecision | None:
        """Where the request would go under the engine's policy; ``None`` when it does not fit now.

        Does not change the engine's layouts (see :meth:`commit`). A learner, if any, records the request.
        A policy with admission (``ours-hold``) may also answer ``None`` for a request that fits, unless the
        request is ``force``d: when its rank flags every placement (:meth:`_holds`), or when the placement would open
        an empty GPU that its fill-left rule keeps (:meth:`_keeps_empty`, then :attr:`kept_empty` says why).
        """
        self.kept_empty = None
        if isinstance(self.demand, DemandLearner):
            self.demand.observe(request.profile, request.count)
        self.churn += CHURN_SMOOTHING * (self._released - self.churn)
        self._seen += 1
        self._released = 0
        mix = self._snapshot()
        decision = self._choose_one(request, mix) if request.count == 1 else self._choose_many(request, mix)
        if decision is not None and self.policy.admission and not request.force and self._holds(decision, mix):
            slot = self._slots[self._slot_index[(decision.slots[0].node, decision.slots[0].gpu_index)]]
            self.held += request.count * slot.geom.model.profile(request.profile).compute_slices
            return None  # held: every placement strands more than the policy accepts (see ours-hold)
        if decision is not None and self.policy.admission and not request.force:
            self.kept_empty = self._keeps_empty(request, decision, mix)
            if self.kept_empty is not None:
                return None  # held: it would open an empty GPU the fill's 7g still need (not counted in ``held``)
        return decision

    def _keeps_empty(self, request: PlacementRequest, decision: PlacementDecision, mix: DemandMix) -> KeptEmpty | None:
        """A policy's ``keeps_empty`` hook (``ours-hold``'s fill left, :mod:`.fill_left`) on a placement it would make,
        asked only when the placement opens an empty GPU (cheap otherwise: one look per instance), with the pool's
        GPUs of that model: how many, how many empty, their allocated compute."""
        keeps = getattr(self.policy, "keeps_empty", None)
        if keeps is None:
            return None
        slots = [self._slots[self._slot_index[(c.node, c.gpu_index)]] for c in decision.slots]
        opened = next((slot for slot in slots if not slot.key), None)
        if opened is None:
            return None
        geom = opened.geom
        group = self._groups[(self._node_pool[opened.node], id(geom))]
        empty = group.get(())
        counts = self.demand.counts() if isinstance(self.demand, DemandLearner) else mix.counts
        ctx = FillContext(
            geom,
            geom.profile_index(request.profile),
            request.count,
            counts,
            mix.prior_weight,
            self.churn,
            sum(len(b.members) for b in group.values()),
            len(empty.members) if empty is not None else 0,
            sum(len(b.members) * geom.info(key).allocated_compute for key, b in group.items()),
            self.held,
        )
        result: KeptEmpty | None = keeps(ctx)
        return result

    def _holds(self, decision: PlacementDecision, mix: DemandMix) -> bool:
        """Whether a policy with admission holds its best placement: its rank flags it (first element above
        0: every placement is a candidate to hold), and its ``holds`` hook, if it has one, confirms it for one
        of the decision's instances with what the pool knows now (:class:`.policies.HoldContext`)."""
        if decision.rank[0] <= 0:
            return False
        holds = getattr(self.policy, "holds", None)
        if holds is None:
            return True
        keys: dict[int, LayoutKey] = {}  # layouts as the decision's earlier instances leave them
        layouts: dict[tuple[str, int], dict[LayoutKey, int]] = {}  # GPUs per layout, likewise
        for c in decision.slots:
            slot = self._slots[self._slot_index[(c.node, c.gpu_index)]]
            geom = slot.geom
            key = keys.get(slot.order, slot.key)
            i = geom.profile_index(c.profile)
            option = next(o for o in geom.options(key, i) if (o.start, o.reuse) == (c.start, c.reuse))
            keys[slot.order] = option.after
            pool = self._node_pool[slot.node]
            group = self._groups[(pool, id(geom))]
            fleet = layouts.setdefault((pool, id(geom)), {k: len(b.members) for k, b in group.items()})
            if holds(self._hold_context(geom, key, option, i, mix, pool, dict(fleet))):
                return True
            fleet[key] -= 1
            if not fleet[key]:
                del fleet[key]
            fleet[option.after] = fleet.get(option.after, 0) + 1
        return False

    def hold_ended(self, profile: str, *, placed: bool, forced: bool = False) -> None:
        """A request of ``profile`` that this engine held has left the queue: ``placed`` later (``forced`` at its
        deadline, or on a retry) or lost (it no longer fit). A policy with admission prices later holds of the
        profile by these outcomes (:attr:`.policies.HoldContext.held_lost`); where nothing ends, no held request
        comes back and nothing is recorded."""
        ended, lost, was_forced = self.held_outcomes(profile)
        self._held_outcomes[profile] = (ended + 1, lost + (not placed), was_forced + (placed and forced), self._seen)

    def held_outcomes(self, profile: str) -> tuple[float, float, float]:
        """``(ended, lost, forced)``: held requests of ``profile`` that left the queue, decayed by requests seen
        since (half-life :data:`HOLD_OUTCOME_HALF_LIFE`)."""
        found = self._held_outcomes.get(profile)
        if found is None:
            return 0.0, 0.0, 0.0
        decay = 0.5 ** ((self._seen - found[3]) / HOLD_OUTCOME_HALF_LIFE)
        return found[0] * decay, found[1] * decay, found[2] * decay

    def seed_hold_outcomes(self, outcomes: Mapping[str, tuple[float, float, float]]) -> None:
        """Per profile, ``(ended, lost, forced)`` of holds that ended before this engine was built, already decayed
        to now: the portal builds an engine per decision and reads them from its database
        (allocations/admission/outcomes.py). Replaces what :meth:`hold_ended` recorded for those profiles."""
        for profile, (ended, lost, forced) in outcomes.items():
            self._held_outcomes[profile] = (ended, lost, forced, self._seen)

    def _hold_context(
        self,
        geom: Geometry,
        key: LayoutKey,
        option: Option,
        i: int,
        mix: DemandMix,
        pool: str,
        layouts: dict[LayoutKey, int],
    ) -> HoldContext:
        # A learner's published snapshot lags its counts by up to its republish interval; a fixed mix is exact.
        counts = self.demand.counts() if isinstance(self.demand, DemandLearner) else mix.counts
        room = self._fit_totals[(pool, id(geom))][i]
        gpus = sum(layouts.values())
        ended, lost, forced = self.held_outcomes(geom.profiles[i].name)
        return HoldContext(
            geom,
            key,
            option,
            i,
            mix,
            counts,
            self.churn,
            room,
            gpus,
            ended,
            lost,
            forced,
            layouts=layouts,
            held=self.held,
        )

    def _choose_one(self, request: PlacementRequest, mix: DemandMix) -> PlacementDecision | None:
        # The hot loop: one cached rank per live layout, the lowest rank wins, device order breaks ties.
        best_rank: Rank | None = None
        best_order = -1
        best_option: Option | None = None
        rank_of = self.policy.rank
        groups = self._candidate_groups(request)
        searched = self._search(request, groups, mix)
        if searched is not None:
            return searched
        for _pool, geom, i, group in groups:
            table = self._rank_table(geom, i)
            weights = mix.weights(geom.model)
            for key, bucket in group.items():
                try:
                    r = table[key]
                except KeyError:
                    r = table[key] = rank_of(geom, key, i, weights)
                if r is None:
                    continue
                rank = r[0]
                if best_rank is None or rank < best_rank:
                    best_rank, best_order, best_option = rank, bucket.first(), r[1]
                elif rank == best_rank:
                    order = bucket.first()
                    if order < best_order:
                        best_order, best_option = order, r[1]
        if best_option is None:
            return None
        if self.policy.admission and best_rank and best_rank[0] <= 0:
            unflagged = self._unflag(groups, mix, best_rank)
            if unflagged is not None:
                best_rank, best_order, best_option = unflagged
        slot = self._slots[best_order]
        node = self._nodes[slot.node].name
        choice = SlotChoice(node, slot.index, request.profile, best_option.start, best_option.reuse)
        return PlacementDecision(node, (choice,), self.policy.name, best_rank or ())

    def _unflag(
        self, groups: list[tuple[str, Geometry, int, _Group]], mix: DemandMix, best: Rank
    ) -> tuple[Rank, int, Option] | None:
        """A policy with admission ranks every flagged placement after every unflagged one. When the rest of the rank
        prefers a flagged one to the unflagged winner, its ``unflags`` hook may take it back (``ours-hold``: the flag
        came from a young pool's published mix and the counts of now do not confirm it). Returns the placement as
        ``(rank with flag 0, device order, option)``, or ``None`` to keep the winner."""
        unflags = getattr(self.policy, "unflags", None)
        if unflags is None:
            return None
        favourite: tuple[Rank, int, Geometry, int, LayoutKey, Option, _Group] | None = None
        for _pool, geom, i, group in groups:
            table = self._rank_table(geom, i)
            for key, bucket in group.items():
                r = table.get(key)
                if r is None or r[0][0] <= 0:
                    continue
                order = bucket.first()
                if favourite is None or (r[0][1:], order) < favourite[:2]:
                    favourite = (r[0][1:], order, geom, i, key, r[1], group)
        if favourite is None or favourite[0] >= best[1:]:
            return None
        rank, order, geom, i, key, option, group = favourite
        pool = self._node_pool[self._slots[order].node]
        layouts = {k: len(b.members) for k, b in group.items()}
        ctx = self._hold_context(geom, key, option, i, mix, pool, layouts)
        return ((0.0, *rank), order, option) if unflags(ctx) else None

    def _search(
        self, request: PlacementRequest, groups: list[tuple[str, Geometry, int, _Group]], mix: DemandMix
    ) -> PlacementDecision | None:
        """A policy with a fleet-level search (``ours-rollout``) decides here when one GPU model (in one
        pool) can host the request; ``None`` leaves the decision to the ranks."""
        search = getattr(self.policy, "search", None)
        if search is None or len(groups) != 1:
            return None
        _pool, geom, i, group = groups[0]
        found = search(
            geom,
            i,
            mix,
            {key: len(bucket.members) for key, bucket in group.items()},
            lambda q: self._rank_table(geom, q),
            lambda key: group[key].first(),
            self.churn,
        )
        if found is None:
            return None
        key, option = found
        slot = self._slots[group[key].first()]
        node = self._nodes[slot.node].name
        choice = SlotChoice(node, slot.index, request.profile, option.start, option.reuse)
        ranked = self._rank(geom, key, i, mix)
        return PlacementDecision(node, (choice,), self.policy.name, ranked[0] if ranked is not None else ())

    def _choose_many(self, request: PlacementRequest, mix: DemandMix) -> PlacementDecision | None:
        # Several instances on one node: simulate the policy's choices node by node and keep the node
        # with the lowest summed rank (first in device order on ties). Multi-instance requests are rare,
        # so this walks the pool's nodes instead of keeping per-node indexes.
        best: tuple[Rank, int, tuple[SlotChoice, ...]] | None = None
        for n, node in enumerate(self._nodes):
            if request.pool is not None and self._node_pool[n] != request.pool:
                continue
            keys: dict[int, LayoutKey] = {}
            slots = [self._slots[self._slot_index[(node.name, g.index)]] for g in node.gpus]
            slots = [s for s in slots if request.profile in s.geom.index]
            if request.model is not None:
                slots = [s for s in slots if s.geom.model.name == request.model]
            capacity = sum(s.geom.fit(s.key)[s.geom.index[request.profile]] for s in slots)
            if capacity < request.count:
                continue
            total: list[float] = []
            chosen: list[SlotChoice] = []
            for _ in range(request.count):
                step: tuple[Rank, int, Option, _Slot] | None = None
                for s in slots:
                    key = keys.get(s.order, s.key)
                    r = self._rank(s.geom, key, s.geom.index[request.profile], mix)
                    if r is not None and (step is None or (r[0], s.order) < (step[0], step[1])):
                        step = (r[0], s.order, r[1], s)
                if step is None:
                    break
                rank, _, option, s = step
                keys[s.order] = option.after
                chosen.append(SlotChoice(node.name, s.index, request.profile, option.start, option.reuse))
                total = [a + b for a, b in zip(total, rank, strict=True)] if total else list(rank)
            if len(chosen) < request.count:
                continue
            cand = (tuple(total), n, tuple(chosen))
            if best is None or cand[:2] < best[:2]:
                best = cand
                if self.policy.name == "first-fit":
                    break  # the first node that fits is the answer
        if best is None:
            return None
        return PlacementDecision(best[2][0].node, best[2], self.policy.name, best[0])

    def commit(self, decision: PlacementDecision, owner: str, idle: bool = False) -> None:
        """Apply a decision: the instances now exist (or are reused) and belong to ``owner``."""
        for c in decision.slots:
            slot = self._slots[self._slot_index[(c.node, c.gpu_index)]]
            i = slot.geom.profile_index(c.profile)
            option = next((o for o in slot.geom.options(slot.key, i) if (o.start, o.reuse) == (c.start, c.reuse)), None)
            if option is None:
                raise InvalidLayout(f"{c.profile} at {c.start} no longer fits on {c.node} GPU {c.gpu_index}")
            slot.owners[c.start] = (owner, idle)
            self._move(slot, option.after)

    def place(self, request: PlacementRequest, owner: str) -> PlacementDecision | None:
        """:meth:`choose` then :meth:`commit`."""
        decision = self.choose(request)
        if decision is not None:
            self.commit(decision, owner)
        return decision

    def release(self, node: str, gpu_index: int, start: int, destroy: bool = True) -> None:
        """The allocation at ``start`` ends: destroy its instance (dynamic MIG) or keep it as a free
        instance (static MIG, ``destroy=False``)."""
        slot = self._slots[self._slot_index[(node, gpu_index)]]
        code = next((c for c in slot.key if decode(c)[0] == start), None)
        if code is None:
            raise KeyError(f"no instance at slot {start} on {node} GPU {gpu_index}")
        rest = [c for c in slot.key if c != code]
        if not destroy:
            rest.append(code | 1)
        slot.owners.pop(start, None)
        self._move(slot, tuple(sorted(rest)))
        self._released += 1
        self.held = 0.0

    def set_idle(self, node: str, gpu_index: int, start: int, idle: bool = True) -> None:
        slot = self._slots[self._slot_index[(node, gpu_index)]]
        owner, _ = slot.owners[start]
        slot.owners[start] = (owner, idle)

    # ----- reading back --------------------------------------------------------------------------

    def instances(self, node: str, gpu_index: int) -> list[Instance]:
        slot = self._slots[self._slot_index[(node, gpu_index)]]
        out = []
        for name, start, free in slot.geom.describe(slot.key):
            owner, idle = (None, False) if free else slot.owners.get(start, ("?", False))
            out.append(Instance(name, start, owner, idle))
        return out

    def snapshot(self) -> Fleet:
        """The engine's current layouts as a :class:`Fleet` (fresh objects)."""
        nodes = []
        for node in self._nodes:
            gpus = [Gpu(node.name, g.index, g.model, self.instances(node.name, g.index)) for g in node.gpus]
            nodes.append(Node(node.name, gpus, node.pool))
        return Fleet(nodes)

    def fits_now(self, pool: str | None = None, model: str | None = None, reconfigure: bool = False) -> dict[str, int]:
        """How many more instances of each profile fit now (each profile considered alone), exactly.

        Counts free instances of the profile and instances that can be created in unoccupied memory
        slots; free instances of other profiles stay (``reconfigure=True`` counts them as destroyable).
        """
        out: dict[str, int] = {}
        for (p, gid), group in self._groups.items():
            geom = self._geoms[gid]
            if (pool is not None and p != pool) or (model is not None and geom.model.name != model):
                continue
            if not reconfigure:
                for prof, f in zip(geom.profiles, self._fit_totals[(p, gid)], strict=True):
                    out[prof.name] = out.get(prof.name, 0) + f
                continue
            for key, bucket in group.items():
                n = len(bucket.members)
                # With reconfiguration, free instances count as unoccupied memory.
                view = tuple(c for c in key if not c & 1)
                for prof, f in zip(geom.profiles, geom.fit(view), strict=True):
                    out[prof.name] = out.get(prof.name, 0) + n * f
        for p, gid in self._groups:
            geom = self._geoms[gid]
            if (pool is None or p == pool) and (model is None or geom.model.name == model):
                for prof in geom.profiles:
                    out.setdefault(prof.name, 0)
        return out

    def allocated_compute(self, pool: str | None = None) -> tuple[int, int]:
        """``(allocated, total)`` compute slices in the pool."""
        used = total = 0
        for (p, gid), group in self._groups.items():
            if pool is not None and p != pool:
                continue
            geom = self._geoms[gid]
            for key, bucket in group.items():
                n = len(bucket.members)
                used += n * geom.info(key).allocated_compute
                total += n * geom.model.compute_slices
        return used, total

    def layout_counts(self, pool: str | None = None) -> dict[tuple[str, LayoutKey], int]:
        """Number of GPUs per (model name, layout): the engine's index, for dashboards and tests."""
        out: dict[tuple[str, LayoutKey], int] = {}
        for (p, gid), group in self._groups.items():
            if pool is None or p == pool:
                name = self._geoms[gid].model.name
                for key, bucket in group.items():
                    out[(name, key)] = out.get((name, key), 0) + len(bucket.members)
        return out


def choose_placement(
    fleet: Fleet,
    request: PlacementRequest,
    policy: str | Policy = "ours",
    demand: DemandMix | None = None,
) -> PlacementDecision | None:
    """One-shot decision on a fleet (builds the index: O(GPUs)). Keep a :class:`PlacementEngine`
    around to decide many times in a few milliseconds each."""
    return PlacementEngine(fleet, policy, demand if demand is not None else DemandMix()).choose(request)


def fits_now(
    fleet: Fleet, pool: str | None = None, model: str | None = None, reconfigure: bool = False
) -> dict[str, int]:
    """What-if for the form and the dashboard, straight from a :class:`Fleet` (no index kept): how many
    more instances of each profile fit now, each profile considered alone. Same answer as
    :meth:`PlacementEngine.fits_now`; GPUs with equal layouts are counted once, so it stays fast."""
    # Count GPUs per (model, reported instances) first: the loop over GPUs stays trivial, and each
    # distinct layout is validated and analysed once.
    # Models are keyed by identity: hashing a frozen GpuModel hashes all its profiles.
    raw: Counter[tuple[int, tuple[tuple[str, int, bool], ...]]] = Counter()
    models: dict[int, GpuModel] = {}
    for node in fleet.nodes:
        if pool is not None and node.pool != pool:
            continue
        for gpu in node.gpus:
            if model is None or gpu.model.name == model:
                models[id(gpu.model)] = gpu.model
                raw[(id(gpu.model), tuple([(i.profile, i.start, i.owner is None) for i in gpu.instances]))] += 1
    out: dict[str, int] = {}
    for (model_id, instances), n in raw.items():
        gpu_model = models[model_id]
        geom = geometry(gpu_model)
        try:
            key = geom.named_key(instances)
        except ValueError as e:
            raise InvalidLayout(f"{gpu_model.name}: {e}") from None
        if reconfigure:
            key = tuple(c for c in key if not c & 1)  # free instances count as unoccupied memory
        for prof, f in zip(geom.profiles, geom.fit(key), strict=True):
            out[prof.name] = out.get(prof.name, 0) + n * f
    return out


def empty_fleet(model: GpuModel, nodes: int, gpus_per_node: int = 8, pool: str = "default") -> Fleet:
    """A fleet of identical, empty nodes (benchmarks and tests)."""
    return Fleet(
        [
            Node(f"node-{n:04d}", [Gpu(f"node-{n:04d}", g, model) for g in range(gpus_per_node)], pool)
            for n in range(nodes)
        ]
    )
