"""Where a request's slices go: the pool's current layout read from the database, handed to the
placement engine (allocations/mig), and the engine's choice turned back into GPU rows.

Callers hold the pool's row lock (services/locks.py: lock_pool), so the layout read here cannot
change before the chosen placements are saved.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.db.models import Sum

from allocations.costs import gpu_model_for
from allocations.mig.demand import DemandMix
from allocations.mig.engine import choose_placement, fits_now
from allocations.mig.fleet import Fleet, Gpu, Instance, Node, PlacementRequest
from allocations.models import Allocation, NodePool, SlicePlacement
from allocations.models import Gpu as GpuRow
from allocations.models import Node as NodeRow

# How many recent requests in a pool shape the demand mix our placement policy protects.
DEMAND_WINDOW = 500
# Pseudo-requests of the default mix blended in, so a young pool still keeps whole GPUs free.
DEMAND_PRIOR_WEIGHT = 20.0
POLICY = "ours"


@dataclass(frozen=True, slots=True)
class PlannedSlice:
    gpu_id: int
    node_name: str
    gpu_index: int
    start: int
    size: int
    device_name: str


def dra_device_name(*, gpu_index: int, profile: str, profile_id: int, start: int) -> str:
    """The name NVIDIA's DRA driver gives a MIG profile x placement device: profile without dots and
    with '+' as '-' (an RFC 1123 label), e.g. gpu-0-mig-1g10gb-19-0 or gpu-0-mig-1g10gb-me-20-3."""
    label = re.sub(r"[^a-z0-9-]", "", profile.replace("+", "-").lower())
    return f"gpu-{gpu_index}-mig-{label}-{profile_id}-{start}"


def pool_fleet(pool: NodePool) -> tuple[Fleet, dict[tuple[str, int], GpuRow]]:
    """The pool's ready nodes in device order with the instances held by live allocations."""
    model = gpu_model_for(pool.gpu_model)
    gpus = list(
        GpuRow.objects.filter(node__pool=pool, node__state=NodeRow.State.READY)
        .select_related("node")
        .order_by("node__name", "index")
    )
    held: dict[int, list[Instance]] = {}
    for placement in SlicePlacement.objects.filter(
        gpu__node__pool=pool, allocation__status__in=Allocation.QUOTA_HOLDING
    ).only("gpu_id", "profile", "start", "allocation_id"):
        held.setdefault(placement.gpu_id, []).append(
            Instance(profile=placement.profile, start=placement.start, owner=str(placement.allocation_id))
        )
    nodes: dict[str, Node] = {}
    by_position: dict[tuple[str, int], GpuRow] = {}
    for row in gpus:
        node = nodes.setdefault(row.node.name, Node(name=row.node.name, gpus=[], pool=pool.slug))
        node.gpus.append(Gpu(row.node.name, row.index, model, held.get(row.pk, [])))
        by_position[(row.node.name, row.index)] = row
    return Fleet(list(nodes.values())), by_position


def recent_demand(pool: NodePool) -> DemandMix:
    """Profiles requested in this pool lately (approved or not: demand is what people ask for)."""
    recent = Allocation.objects.filter(pool=pool).order_by("-created_at").values_list("pk", flat=True)[:DEMAND_WINDOW]
    counts = Allocation.objects.filter(pk__in=list(recent)).values("profile").annotate(n=Sum("count")).order_by()
    return DemandMix(counts={row["profile"]: float(row["n"]) for row in counts}, prior_weight=DEMAND_PRIOR_WEIGHT)


def plan_slices(*, pool: NodePool, profile: str, count: int) -> list[PlannedSlice] | None:
    """Choose GPUs and slots for `count` slices of `profile` on one node of the pool, or None."""
    model = gpu_model_for(pool.gpu_model)
    spec = model.profile(profile)
    fleet, by_position = pool_fleet(pool)
    decision = choose_placement(
        fleet, PlacementRequest(profile=profile, count=count, pool=pool.slug), POLICY, recent_demand(pool)
    )
    if decision is None:
        return None
    planned = []
    for slot in decision.slots:
        row = by_position[(slot.node, slot.gpu_index)]
        planned.append(
            PlannedSlice(
                gpu_id=row.pk,
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
