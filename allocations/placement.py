"""Where a request's slices go: the pool's current layout read from the database, handed to the
placement engine (allocations/mig), and the engine's choice turned back into GPU rows.

Callers hold the pool's row lock (services/locks.py: lock_pool), so the layout read here cannot
change before the chosen placements are saved.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace

from django.conf import settings
from django.db.models import Sum

from allocations.admission.outcomes import choose_priced, hold_history
from allocations.admission.policy import hold_policy
from allocations.costs import gpu_model_for
from allocations.mig import counters, scheduler
from allocations.mig.catalog import GpuModel
from allocations.mig.demand import DemandMix
from allocations.mig.engine import choose_placement
from allocations.mig.figures import model_from_figures
from allocations.mig.fleet import Fleet, Gpu, Instance, Node, PlacementDecision, PlacementRequest
from allocations.mig.layout import Geometry, LayoutKey, geometry
from allocations.mig.policies import Policy
from allocations.models import Allocation, ClaimedDevice, GpuFigures, NodePool, SlicePlacement
from allocations.models import Gpu as GpuRow
from allocations.models import Node as NodeRow

# How many recent requests in a pool shape the demand mix our placement policy protects.
DEMAND_WINDOW = 500
# Pseudo-requests of the default mix blended in, so a young pool still keeps whole GPUs free.
DEMAND_PRIOR_WEIGHT = 20.0
POLICY = "ours"
# On Kubernetes the scheduler picks the slot on the GPU we pin (allocations/mig/scheduler.py).
SCHEDULER_POLICY = "ours-first-slot"

logger = logging.getLogger(__name__)


def pool_policy(pool: NodePool, *, scheduler: bool = False) -> str | Policy:
    """The policy placement uses in `pool`: the hold variant where the pool holds requests that would strand room
    (issue 14, allocations/admission/; only a request planned with force=False may then be held)."""
    if pool.holds_requests:
        return hold_policy(scheduler=scheduler)
    return SCHEDULER_POLICY if scheduler else POLICY


@dataclass(frozen=True, slots=True)
class PlannedSlice:
    gpu_id: int
    node_name: str
    gpu_index: int
    start: int
    size: int
    device_name: str
    # Kubernetes: starts of the devices to taint so that the scheduler takes this slot (scheduler.steer).
    blocked_starts: tuple[int, ...] = ()
    # Shared and MPS pools (allocations/share_placement.py): the memory this share takes on its GPU.
    memory_mib: int | None = None


def dra_device_name(*, gpu_index: int, profile: str, profile_id: int, start: int) -> str:
    """The name NVIDIA's DRA driver gives a MIG profile x placement device: profile without dots and
    with '+' as '-' (an RFC 1123 label), e.g. gpu-0-mig-1g10gb-19-0 or gpu-0-mig-1g10gb-me-20-3."""
    label = re.sub(r"[^a-z0-9-]", "", profile.replace("+", "-").lower())
    return f"gpu-{gpu_index}-mig-{label}-{profile_id}-{start}"


# --- one placement try's reads (issue 14) ------------------------------------------------------------------------


@dataclass(slots=True)
class _TryReads:
    """A pool's layout and demand, read at most once within one placement try (`read_once_per_try`)."""

    pool_id: int
    layout: PoolLayout | None = None
    demand: DemandMix | None = None


# The placement try in progress in this thread, if any (read_once_per_try).
_TRY: ContextVar[_TryReads | None] = ContextVar("fatia_placement_try", default=None)


@contextmanager
def read_once_per_try(pool: NodePool) -> Iterator[None]:
    """Within this block, `read_pool` and `recent_demand` of `pool` read the database once, not once per step.

    One try plans unforced, then forced, measures what a hold would strand, may look for a rescue plan and checks
    the reservation: each step read the layout and the demand again (a queued request that fits nowhere: three of
    each). Within one try only: its caller holds the pool's lock (services/locks.py), so no other transaction
    places a slice in the pool meanwhile, and the try's own placement (services/lifecycle.record_placements) calls
    `layout_changed`. What others may commit meanwhile only frees room (a release or a failure deletes placements
    without the pool's lock) and queues another admission pass (services/queue_trigger), which reads afresh. Not
    across tries: a try that places changes the layout. The demand counts the pool's recent requests by profile,
    which a try does not create or change.

    Enter it after the pool's lock (services/provisioning.py and cluster/sync.py do, for fresh and queued requests
    alike), so that the first read already sees every placement committed before the lock. A block entered within a
    try of the same pool joins it: one memo, so a placement recorded inside reaches the outer block too."""
    if _this_try(pool) is not None:
        yield
        return
    token = _TRY.set(_TryReads(pool.pk))
    try:
        yield
    finally:
        _TRY.reset(token)


def layout_changed(pool_id: int) -> None:
    """The pool's placements changed within the try in progress: its layout is read afresh next time."""
    memo = _TRY.get()
    if memo is not None and memo.pool_id == pool_id:
        memo.layout = None


def _this_try(pool: NodePool) -> _TryReads | None:
    memo = _TRY.get()
    return memo if memo is not None and memo.pool_id == pool.pk else None


class PoolBusy(Exception):
    """Kubernetes: the request fits only on GPUs whose unallocated claims it could displace; try again once
    the scheduler has allocated them (a fraction of a second)."""


# --- per-GPU models: the catalog's, or the one a node's published figures describe -----------------------------

_PUBLISHED: dict[tuple[int, str], GpuModel | None] = {}


def published_model(figures_id: int, base: GpuModel) -> GpuModel | None:
    """The model GpuFigures row `figures_id` describes, its missing parts from `base` (rows never change, so
    one per row and base per process); None when it has no MIG device (the GPU publishes MIG off)."""
    key = (figures_id, base.name)
    if key not in _PUBLISHED:
        row = GpuFigures.objects.filter(pk=figures_id).values_list("product", "counters", "devices").first()
        _PUBLISHED[key] = model_from_figures(row[0], row[1], row[2], base) if row is not None else None
    return _PUBLISHED[key]


def gpu_model_of(pool_model: GpuModel, figures_id: int | None) -> GpuModel | None:
    """A GPU's model: what its node publishes (the cluster wins where it and the catalog disagree), else the
    pool's catalog model."""
    return pool_model if figures_id is None else published_model(figures_id, pool_model)


def outside_instances(
    pool: NodePool | None = None, gpu_ids: set[int] | None = None
) -> dict[int, list[tuple[str, int]]]:
    """Per GPU, the (profile, start) of the devices held by claims the portal did not make ("outside Fatia"):
    occupancy placement and the scheduler prediction count. A whole GPU (or a profile the GPU's model does not
    know) comes out as profile "" (the caller counts it as the whole GPU)."""
    rows = ClaimedDevice.objects.outside_fatia().filter(gpu__isnull=False)
    if pool is not None:
        rows = rows.filter(gpu__node__pool=pool)
    if gpu_ids is not None:
        rows = rows.filter(gpu_id__in=gpu_ids)
    out: dict[int, list[tuple[str, int]]] = {}
    for gpu_id, profile, start in rows.order_by("gpu_id", "start").values_list("gpu_id", "profile", "start"):
        out.setdefault(gpu_id, []).append((profile, start))
    return out


def outside_instance(model: GpuModel, profile: str, start: int, owner: str) -> Instance:
    """An outside device as an instance of `model`: a whole GPU, or a profile it does not have, as its full
    profile (nothing else fits next to it)."""
    if not profile or not model.has_profile(profile):
        return Instance(profile=counters.full_profile(model).name, start=0, owner=owner)
    return Instance(profile=profile, start=start, owner=owner)


@dataclass(slots=True)
class PoolLayout:
    """A pool's ready GPUs as the database records them.

    ``waiting`` holds, per GPU, the slices of requests still PROVISIONING (on Kubernetes: claims the
    scheduler has not allocated yet), as ``(allocation id, [(profile, start), ...])`` in allocation order;
    ``settled`` the other instances; ``steered`` the GPUs one of whose waiting claims is steered to a slot
    other than first fit (see plan_slices_for_scheduler). ``unreadable`` names GPUs whose recorded layout
    breaks the MIG rules: they are left out of ``fleet`` (no placement goes there) and logged, instead of
    stopping the pool.
    """

    fleet: Fleet
    by_position: dict[tuple[str, int], int]  # -> Gpu row id
    settled: dict[tuple[str, int], list[Instance]]
    waiting: dict[tuple[str, int], list[tuple[int, list[tuple[str, int]]]]]
    unreadable: list[str]
    steered: set[tuple[str, int]]  # GPUs with a waiting claim steered off first fit: theirs alone meanwhile
    # Each GPU's model: the pool's catalog model, or the one its node publishes (issue 10: the cluster wins).
    models: dict[tuple[str, int], GpuModel] = field(default_factory=dict)


def read_pool(pool: NodePool) -> PoolLayout:
    """The pool's ready nodes in device order with the instances held by live allocations and by claims
    made outside the portal (the cluster holds them: counted as settled occupancy). Within `read_once_per_try`
    for this pool, read once and handed out as copies (a caller may change its copy's instances)."""
    memo = _this_try(pool)
    if memo is None:
        return _read_layout(pool)
    if memo.layout is None:
        memo.layout = _read_layout(pool)
    return _copied(memo.layout)


def _copied(layout: PoolLayout) -> PoolLayout:
    nodes = [
        Node(n.name, [Gpu(g.node, g.index, g.model, list(g.instances)) for g in n.gpus], n.pool)
        for n in layout.fleet.nodes
    ]
    return PoolLayout(
        fleet=Fleet(nodes),
        by_position=dict(layout.by_position),
        settled={k: list(v) for k, v in layout.settled.items()},
        waiting={k: [(a, list(claim)) for a, claim in v] for k, v in layout.waiting.items()},
        unreadable=list(layout.unreadable),
        steered=set(layout.steered),
        models=dict(layout.models),
    )


def _read_layout(pool: NodePool) -> PoolLayout:
    pool_model = gpu_model_for(pool.gpu_model)
    gpus = list(
        GpuRow.objects.filter(node__pool=pool, node__state=NodeRow.State.READY)
        .order_by("node__name", "index")
        .values_list("pk", "node__name", "index", "figures_id")
    )
    held: dict[int, list[Instance]] = {}
    waiting_by_gpu: dict[int, dict[int, list[tuple[str, int]]]] = {}
    steered_gpus: set[int] = set()
    rows = (
        SlicePlacement.objects.filter(gpu__node__pool=pool, allocation__status__in=Allocation.QUOTA_HOLDING)
        .order_by("allocation_id", "pk")
        .values_list("gpu_id", "profile", "start", "allocation_id", "allocation__status", "blocked_starts")
    )
    for gpu_id, profile, start, allocation_id, status, blocked in rows:
        held.setdefault(gpu_id, []).append(Instance(profile=profile, start=start, owner=str(allocation_id)))
        if status == Allocation.Status.PROVISIONING:
            waiting_by_gpu.setdefault(gpu_id, {}).setdefault(allocation_id, []).append((profile, start))
            if blocked:
                steered_gpus.add(gpu_id)
    outside = outside_instances(pool)
    layout = PoolLayout(Fleet([]), {}, {}, {}, [], set())
    nodes: dict[str, Node] = {}
    for gpu_pk, node_name, index, figures_id in gpus:
        position = (node_name, index)
        model = gpu_model_of(pool_model, figures_id)
        if model is None:
            continue  # its node publishes no MIG device (MIG off): nothing to place there
        instances = held.get(gpu_pk, []) + [
            outside_instance(model, profile, start, f"outside:{n}")
            for n, (profile, start) in enumerate(outside.get(gpu_pk, []))
        ]
        try:
            geometry(model).named_key(tuple([(i.profile, i.start, False) for i in instances]))
        except ValueError as exc:
            logger.error("Left out of placement: %s GPU %d holds an invalid layout (%s)", *position, exc)
            layout.unreadable.append(f"{node_name}/gpu-{index}")
            continue
        node = nodes.setdefault(node_name, Node(name=node_name, gpus=[], pool=pool.slug))
        node.gpus.append(Gpu(node_name, index, model, instances))
        layout.models[position] = model
        layout.by_position[position] = gpu_pk
        waiting = waiting_by_gpu.get(gpu_pk, {})
        waiting_ids = {str(a) for a in waiting}
        layout.settled[position] = [i for i in instances if i.owner not in waiting_ids]
        if waiting:
            layout.waiting[position] = list(waiting.items())
        if gpu_pk in steered_gpus:
            layout.steered.add(position)
    layout.fleet = Fleet(list(nodes.values()))
    return layout


def empty_pool_fleet(pool: NodePool) -> Fleet:
    """The pool's ready MIG GPUs in device order with nothing on them, in one query: what could ever be placed
    there (queue_eta.never_fits), without reading the placements read_pool reads."""
    pool_model = gpu_model_for(pool.gpu_model)
    nodes: dict[str, Node] = {}
    rows = (
        GpuRow.objects.filter(node__pool=pool, node__state=NodeRow.State.READY)
        .order_by("node__name", "index")
        .values_list("node__name", "index", "figures_id")
    )
    for node_name, index, figures_id in rows:
        model = gpu_model_of(pool_model, figures_id)
        if model is not None:  # a node that publishes no MIG device (MIG off) holds no slice
            nodes.setdefault(node_name, Node(name=node_name, gpus=[], pool=pool.slug)).gpus.append(
                Gpu(node_name, index, model, [])
            )
    return Fleet(list(nodes.values()))


def recent_demand(pool: NodePool) -> DemandMix:
    """Profiles requested in this pool lately (approved or not: demand is what people ask for). Within
    `read_once_per_try` for this pool, read once (a DemandMix does not change)."""
    memo = _this_try(pool)
    if memo is None:
        return _read_demand(pool)
    if memo.demand is None:
        memo.demand = _read_demand(pool)
    return memo.demand


def _read_demand(pool: NodePool) -> DemandMix:
    recent = Allocation.objects.filter(pool=pool).order_by("-created_at").values_list("pk", flat=True)[:DEMAND_WINDOW]
    counts = Allocation.objects.filter(pk__in=list(recent)).values("profile").annotate(n=Sum("count")).order_by()
    return DemandMix(counts={row["profile"]: float(row["n"]) for row in counts}, prior_weight=DEMAND_PRIOR_WEIGHT)


def plan_slices(
    *,
    pool: NodePool,
    profile: str,
    count: int,
    avoid: frozenset[tuple[str, int]] = frozenset(),
    force: bool = True,
) -> list[PlannedSlice] | None:
    """Choose GPUs and slots for `count` slices of `profile` on one node of the pool, or None. `avoid`: GPUs
    (node, index) not to use (room held for a lender, allocations/cohorts/fence.py). `force=False` lets a pool
    with admission hold the request (None although it fits: allocations/admission/hold.py tells which)."""
    layout = read_pool(pool)
    fleet = layout.fleet
    if avoid:
        fleet = Fleet(
            [Node(n.name, [g for g in n.gpus if (n.name, g.index) not in avoid], n.pool) for n in fleet.nodes]
        )
    request = PlacementRequest(profile=profile, count=count, pool=pool.slug, force=force)
    # A plan that may hold knows how the pool's recent holds ended and how often its allocations end (issue 14,
    # admission/outcomes.py).
    decision = choose_priced(fleet, request, pool_policy(pool), recent_demand(pool), hold_history(pool, force=force))
    return None if decision is None else _planned(layout, profile, decision)


def plan_slices_for_scheduler(
    *,
    pool: NodePool,
    profile: str,
    count: int,
    steer: bool = False,
    avoid: frozenset[tuple[str, int]] = frozenset(),
    force: bool = True,
) -> list[PlannedSlice] | None:
    """Kubernetes: choose GPUs for `count` slices of `profile` on one node, each slot where kube-scheduler
    will put it, or None when nothing fits (allocations/mig/scheduler.py).

    With `steer` (allocations/cluster/steering.py decides, from FATIA_KUBE_STEER_SLOTS), a single slice goes where
    our policy wants it, GPU and slot, on a GPU with no unallocated claim: the devices the scheduler would take
    first are to be tainted until its claim is allocated (PlannedSlice.blocked_starts), and no other claim is
    planned on that GPU meanwhile. Otherwise, or when no such GPU has room, the slot is the scheduler's first fit
    and our policy chooses the GPU only.

    A GPU whose unallocated claims could be displaced by this one, whatever order the scheduler takes them
    in, is not a candidate; when only such GPUs could take the request, PoolBusy (try again shortly).

    Each GPU is predicted with its own figures: those its node publishes where fleet discovery has seen them,
    NVIDIA's from the catalog otherwise; a GPU whose counters refuse the slices (or that has no figures for
    the profile) is not a candidate. Devices held by claims made outside the portal are occupancy. `avoid`: GPUs
    not to use (room held for a lender, allocations/cohorts/fence.py). `force=False` lets a pool with admission
    hold the request (issue 14): None although it fits, also when steering would have placed it."""
    layout = read_pool(pool)
    request = PlacementRequest(profile=profile, count=count, pool=pool.slug, force=force)
    policy, scheduler_policy = pool_policy(pool), pool_policy(pool, scheduler=True)
    demand = recent_demand(pool)
    history = hold_history(pool, force=force)  # how its recent holds ended, its churn (issue 14): read once per plan

    def geom_at(position: tuple[str, int]) -> Geometry:
        return geometry(layout.models[position])

    def base_key(position: tuple[str, int]) -> LayoutKey:
        return geom_at(position).named_key(tuple([(x.profile, x.start, False) for x in layout.settled[position]]))

    def full_key(position: tuple[str, int]) -> LayoutKey:
        gpu = layout.fleet.gpu(*position)
        return geom_at(position).named_key(tuple([(x.profile, x.start, False) for x in gpu.instances]))

    def only(positions: set[tuple[str, int]]) -> Fleet:
        return Fleet(
            [Node(n.name, [g for g in n.gpus if (n.name, g.index) in positions], n.pool) for n in layout.fleet.nodes]
        )

    steered: PlannedSlice | None = None
    steered_rank: tuple[float, ...] = ()
    if steer and count == 1:
        quiet = set(layout.by_position) - set(layout.waiting) - avoid
        decision = choose_priced(only(quiet), request, policy, demand, history)
        if decision is not None:
            [slot] = decision.slots
            position = (slot.node, slot.gpu_index)
            geom = geom_at(position)
            blocked = scheduler.steer(geom, base_key(position), geom.profile_index(profile), slot.start)
            if blocked is not None:
                [planned] = _planned(layout, profile, decision)
                steered, steered_rank = replace(planned, blocked_starts=tuple(blocked)), decision.rank
                if not blocked:
                    return [steered]  # first fit gets there: nothing to steer, nothing to compare

    def admits(position: tuple[str, int], slices: int) -> bool:
        if position in layout.steered:
            return False
        waiting = layout.waiting.get(position)
        if not waiting:
            return True
        geom = geom_at(position)
        claims = [[geom.index[p] for p, _ in claim] for _, claim in waiting]
        return scheduler.admits(geom, base_key(position), claims, [geom.profile_index(profile)] * slices)

    def first_fit(position: tuple[str, int], slices: int) -> list[int] | None:
        """The starts the scheduler's counters give `slices` more slices on this GPU, after all it holds."""
        geom = geom_at(position)
        placed = scheduler.first_fit(geom, full_key(position), [geom.profile_index(profile)] * slices)
        return None if placed is None else placed[1]

    busy = {position for position in layout.waiting if not admits(position, 1)}
    refused: set[tuple[str, int]] = set(avoid)  # the counters say no (or held): not a candidate, not worth waiting for
    for _ in range(len(layout.by_position) + 1):
        candidates = only(set(layout.by_position) - busy - refused)
        decision = choose_priced(candidates, request, scheduler_policy, demand, history)
        if steered is not None and (decision is None or steered_rank < decision.rank):
            # Steering wins only where it is better than first fit next to the claims in flight: in a burst,
            # a GPU in use with a claim waiting usually beats breaking a fresh one (both rank alike).
            return [steered]
        if decision is None:
            forced = (
                None if force else choose_placement(candidates, replace(request, force=True), scheduler_policy, demand)
            )
            if forced is not None:
                return None  # held (issue 14): it fits, on GPUs whose slot would strand room; not a busy pool
            if busy and choose_placement(only(set(layout.by_position) - refused), request, "first-fit") is not None:
                raise PoolBusy(f"{count} x {profile} fits only next to claims the scheduler has not allocated yet")
            return None
        per_gpu = Counter((s.node, s.gpu_index) for s in decision.slots)
        displacing = {position for position, n in per_gpu.items() if n > 1 and not admits(position, n)}
        if displacing:
            busy |= displacing
            continue
        starts = {position: first_fit(position, n) for position, n in per_gpu.items()}
        no_room = {position for position, found in starts.items() if found is None}
        if no_room:
            refused |= no_room
            continue
        return _planned(layout, profile, decision, {p: list(found or []) for p, found in starts.items()})
    raise AssertionError("unreachable: every pass leaves out at least one more GPU")


def _planned(
    layout: PoolLayout,
    profile: str,
    decision: PlacementDecision,
    starts: dict[tuple[str, int], list[int]] | None = None,
) -> list[PlannedSlice]:
    """The decision as slices; `starts` (Kubernetes) gives, per GPU, the starts the scheduler's counters take
    in request order, which the plan records as its prediction."""
    planned = []
    taken: Counter[tuple[str, int]] = Counter()
    for slot in decision.slots:
        position = (slot.node, slot.gpu_index)
        spec = layout.models[position].profile(profile)
        start = slot.start if starts is None else starts[position][taken[position]]
        taken[position] += 1
        planned.append(
            PlannedSlice(
                gpu_id=layout.by_position[position],
                node_name=slot.node,
                gpu_index=slot.gpu_index,
                start=start,
                size=spec.memory_slices,
                device_name=dra_device_name(
                    gpu_index=slot.gpu_index, profile=profile, profile_id=spec.profile_id, start=start
                ),
            )
        )
    return planned


def offered_profiles(pool: NodePool) -> list[str]:
    """The pool's profiles that can be placed now. Simulated backend: all of them (the layout rules decide).
    Kubernetes: those some ready GPU has figures for (its node's published ones, else NVIDIA's in the
    catalog); with no slices and no NVIDIA data a profile is not offered (request_allocation refuses it)."""
    if settings.FATIA_CLUSTER_BACKEND != "kubernetes":
        return list(pool.profiles)
    pool_model = gpu_model_for(pool.gpu_model)
    figures: set[int | None] = set(
        GpuRow.objects.filter(node__pool=pool, node__state=NodeRow.State.READY).values_list("figures_id", flat=True)
    )
    models = [m for f in (figures or {None}) if (m := gpu_model_of(pool_model, f)) is not None]
    return [
        name
        for name in pool.profiles
        if any(m.has_profile(name) and counters.counter_table(m).known(m.profile_names().index(name)) for m in models)
    ]


def layout_fits(model: GpuModel, instances: tuple[tuple[str, int, bool], ...]) -> dict[str, int]:
    """How many more of each profile fit (each alone) on a GPU of `model` holding `instances`: by the layout
    rules on the simulated backend; on Kubernetes by the scheduler's counters (the node's published figures
    where it has them), so a profile without figures fits nowhere."""
    geom = geometry(model)
    key = geom.named_key(instances)
    if settings.FATIA_CLUSTER_BACKEND == "kubernetes":
        return {p.name: scheduler.fits(geom, key, i) for i, p in enumerate(geom.profiles)}
    return {p.name: f for p, f in zip(geom.profiles, geom.fit(key), strict=True)}


def pool_capacity(pool: NodePool) -> dict[str, int]:
    """How many more slices of each offered profile fit in the pool right now (each profile alone),
    computed exactly from the recorded placements and the devices held outside the portal, with each GPU's
    own figures (layout_fits)."""
    layout = read_pool(pool)
    distinct: Counter[tuple[int, tuple[tuple[str, int, bool], ...]]] = Counter()
    models: dict[int, GpuModel] = {}
    for node in layout.fleet.nodes:
        for gpu in node.gpus:
            models[id(gpu.model)] = gpu.model
            distinct[(id(gpu.model), tuple(sorted((i.profile, i.start, False) for i in gpu.instances)))] += 1
    total: Counter[str] = Counter()
    for (model_id, instances), n in distinct.items():
        for name, fits in layout_fits(models[model_id], instances).items():
            total[name] += n * fits
    return {profile: total.get(profile, 0) for profile in pool.profiles}
