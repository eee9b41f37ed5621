"""Where a request's slices go: the pool's current layout read from the database, handed to the
placement engine (allocations/mig), and the engine's choice turned back into GPU rows.

Callers hold the pool's row lock (services/locks.py: lock_pool), so the layout read here cannot
change before the chosen placements are saved.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass, replace

from django.db.models import Sum

from allocations.costs import gpu_model_for
from allocations.mig import scheduler
from allocations.mig.demand import DemandMix
from allocations.mig.engine import choose_placement, fits_now
from allocations.mig.fleet import Fleet, Gpu, Instance, Node, PlacementDecision, PlacementRequest
from allocations.mig.layout import LayoutKey, geometry
from allocations.models import Allocation, NodePool, SlicePlacement
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


def dra_device_name(*, gpu_index: int, profile: str, profile_id: int, start: int) -> str:
    """The name NVIDIA's DRA driver gives a MIG profile x placement device: profile without dots and
    with '+' as '-' (an RFC 1123 label), e.g. gpu-0-mig-1g10gb-19-0 or gpu-0-mig-1g10gb-me-20-3."""
    label = re.sub(r"[^a-z0-9-]", "", profile.replace("+", "-").lower())
    return f"gpu-{gpu_index}-mig-{label}-{profile_id}-{start}"


class PoolBusy(Exception):
    """Kubernetes: the request fits only on GPUs whose unallocated claims it could displace; try again once
    the scheduler has allocated them (a fraction of a second)."""


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


def read_pool(pool: NodePool) -> PoolLayout:
    """The pool's ready nodes in device order with the instances held by live allocations."""
    model = gpu_model_for(pool.gpu_model)
    geom = geometry(model)
    gpus = list(
        GpuRow.objects.filter(node__pool=pool, node__state=NodeRow.State.READY)
        .order_by("node__name", "index")
        .values_list("pk", "node__name", "index")
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
    layout = PoolLayout(Fleet([]), {}, {}, {}, [], set())
    nodes: dict[str, Node] = {}
    for gpu_pk, node_name, index in gpus:
        instances = held.get(gpu_pk, [])
        position = (node_name, index)
        try:
            geom.named_key(tuple([(i.profile, i.start, False) for i in instances]))
        except ValueError as exc:
            logger.error("Left out of placement: %s GPU %d holds an invalid layout (%s)", *position, exc)
            layout.unreadable.append(f"{node_name}/gpu-{index}")
            continue
        node = nodes.setdefault(node_name, Node(name=node_name, gpus=[], pool=pool.slug))
        node.gpus.append(Gpu(node_name, index, model, instances))
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


def pool_fleet(pool: NodePool) -> tuple[Fleet, dict[tuple[str, int], int]]:
    """The pool's ready nodes in device order with the instances held by live allocations."""
    layout = read_pool(pool)
    return layout.fleet, layout.by_position


def recent_demand(pool: NodePool) -> DemandMix:
    """Profiles requested in this pool lately (approved or not: demand is what people ask for)."""
    recent = Allocation.objects.filter(pool=pool).order_by("-created_at").values_list("pk", flat=True)[:DEMAND_WINDOW]
    counts = Allocation.objects.filter(pk__in=list(recent)).values("profile").annotate(n=Sum("count")).order_by()
    return DemandMix(counts={row["profile"]: float(row["n"]) for row in counts}, prior_weight=DEMAND_PRIOR_WEIGHT)


def plan_slices(*, pool: NodePool, profile: str, count: int) -> list[PlannedSlice] | None:
    """Choose GPUs and slots for `count` slices of `profile` on one node of the pool, or None."""
    fleet, by_position = pool_fleet(pool)
    decision = choose_placement(
        fleet, PlacementRequest(profile=profile, count=count, pool=pool.slug), POLICY, recent_demand(pool)
    )
    return None if decision is None else _planned(pool, profile, decision, by_position)


def plan_slices_for_scheduler(
    *, pool: NodePool, profile: str, count: int, steer: bool = False
) -> list[PlannedSlice] | None:
    """Kubernetes: choose GPUs for `count` slices of `profile` on one node, each slot where kube-scheduler
    will put it, or None when nothing fits (allocations/mig/scheduler.py).

    With `steer` (FATIA_KUBE_STEER_SLOTS), a single slice goes where our policy wants it, GPU and slot, on a GPU
    with no unallocated claim: the devices the scheduler would take first are to be tainted until its claim is
    allocated (PlannedSlice.blocked_starts), and no other claim is planned on that GPU meanwhile. Otherwise, or
    when no such GPU has room, the slot is the scheduler's first fit and our policy chooses the GPU only.

    A GPU whose unallocated claims could be displaced by this one, whatever order the scheduler takes them
    in, is not a candidate; when only such GPUs could take the request, PoolBusy (try again shortly)."""
    layout = read_pool(pool)
    geom = geometry(gpu_model_for(pool.gpu_model))
    i = geom.profile_index(profile)
    request = PlacementRequest(profile=profile, count=count, pool=pool.slug)
    demand = recent_demand(pool)

    def base_key(position: tuple[str, int]) -> LayoutKey:
        return geom.named_key(tuple([(x.profile, x.start, False) for x in layout.settled[position]]))

    def only(positions: set[tuple[str, int]]) -> Fleet:
        return Fleet(
            [Node(n.name, [g for g in n.gpus if (n.name, g.index) in positions], n.pool) for n in layout.fleet.nodes]
        )

    steered: PlannedSlice | None = None
    steered_rank: tuple[float, ...] = ()
    if steer and count == 1:
        quiet = set(layout.by_position) - set(layout.waiting)
        decision = choose_placement(only(quiet), request, POLICY, demand)
        if decision is not None:
            [slot] = decision.slots
            blocked = scheduler.steer(geom, base_key((slot.node, slot.gpu_index)), i, slot.start)
            if blocked is not None:
                [planned] = _planned(pool, profile, decision, layout.by_position)
                steered, steered_rank = replace(planned, blocked_starts=tuple(blocked)), decision.rank
                if not blocked:
                    return [steered]  # first fit gets there: nothing to steer, nothing to compare

    def admits(position: tuple[str, int], slices: int) -> bool:
        if position in layout.steered:
            return False
        waiting = layout.waiting.get(position)
        if not waiting:
            return True
        claims = [[geom.index[p] for p, _ in claim] for _, claim in waiting]
        return scheduler.admits(geom, base_key(position), claims, [i] * slices)

    busy = {position for position in layout.waiting if not admits(position, 1)}
    for _ in range(len(layout.by_position) + 1):
        decision = choose_placement(only(set(layout.by_position) - busy), request, SCHEDULER_POLICY, demand)
        if steered is not None and (decision is None or steered_rank < decision.rank):
            # Steering wins only where it is better than first fit next to the claims in flight: in a burst,
            # a GPU in use with a claim waiting usually beats breaking a fresh one (both rank alike).
            return [steered]
        if decision is None:
            if busy and choose_placement(layout.fleet, request, "first-fit") is not None:
                raise PoolBusy(f"{count} x {profile} fits only next to claims the scheduler has not allocated yet")
            return None
        per_gpu = Counter((s.node, s.gpu_index) for s in decision.slots)
        displacing = {position for position, n in per_gpu.items() if n > 1 and not admits(position, n)}
        if not displacing:
            return _planned(pool, profile, decision, layout.by_position)
        busy |= displacing
    raise AssertionError("unreachable: every pass leaves out at least one more GPU")


def _planned(
    pool: NodePool, profile: str, decision: PlacementDecision, by_position: dict[tuple[str, int], int]
) -> list[PlannedSlice]:
    spec = gpu_model_for(pool.gpu_model).profile(profile)
    planned = []
    for slot in decision.slots:
        planned.append(
            PlannedSlice(
                gpu_id=by_position[(slot.node, slot.gpu_index)],
                node_name=slot.node,
                gpu_index=slot.gpu_index,
                start=slot.start,
                size=spec.memory_slices,
                device_name=dra_device_name(
                    gpu_index=slot.gpu_index, profile=profile, profile_id=spec.profile_id, start=slot.start
                ),
            )
        )
    return planned


def pool_capacity(pool: NodePool) -> dict[str, int]:
    """How many more slices of each offered profile fit in the pool right now (each profile alone),
    computed exactly by the engine from the recorded placements."""
    fleet, _ = pool_fleet(pool)
    fits = fits_now(fleet, pool=pool.slug)
    return {profile: fits.get(profile, 0) for profile in pool.profiles}
