"""Placement in a static-MIG pool: the pre-created MIG devices are the GPUs' layout (issue 12).

In static mode the driver publishes the MIG devices that exist, each with its `uuid` (discovery keeps them as
Gpu.static_instances). A free one of the requested profile is a free slot: the claim pins it by uuid and the
scheduler can only take that device. When none fits, the reconfiguration planner (allocations/mig/reconfig.py)
finds, per GPU, the fewest destroy/create steps that make room without touching held instances; the GPU with
the cheapest plan wins (ties: the planner's own rank, then node and GPU order). A request's slices sit on one
GPU when they can; allocations/cluster/static_spread.py spreads a larger request over GPUs of one node, one
plan per GPU. In MIG-manager mode a GPU that holds anything is never changed:
mig-parted rebuilds a whole GPU, so only its free instances (or an empty GPU's) serve a request there.

Held: instances with a live request's placement on them, and devices claimed outside the portal; for any request
but its lender, the instances a cohort reclaim holds for a lender (issue 15, allocations/cohorts/fence.py), and
every instance of a GPU whose reconfiguration is held for one (no other plan may touch that GPU meanwhile).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from allocations.costs import gpu_model_for
from allocations.mig.catalog import GpuModel
from allocations.mig.fleet import Instance
from allocations.mig.reconfig import ReconfigurationPlan, plan_reconfiguration
from allocations.models import Allocation, ClaimedDevice, Gpu, Node, NodePool, SlicePlacement
from allocations.placement import PlannedSlice, dra_device_name, gpu_model_of

if TYPE_CHECKING:
    from allocations.cohorts.fence import HeldSlot

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StaticChoice:
    """The GPU chosen for a request, the plan that gives it room (no operation: free instances fit), and, per
    target start, the uuid and device name of the instance when it exists already."""

    gpu: Gpu
    model: GpuModel
    plan: ReconfigurationPlan
    existing: dict[int, tuple[str, str]]  # start -> (uuid, device name)

    def slices(self, profile: str) -> list[PlannedSlice]:
        """The plan's targets as slices; call only when every target exists (plan without operations)."""
        spec = self.model.profile(profile)
        return [
            PlannedSlice(
                gpu_id=self.gpu.pk,
                node_name=self.gpu.node.name,
                gpu_index=self.gpu.index,
                start=start,
                size=spec.memory_slices,
                device_name=self.existing.get(start, ("", ""))[1]
                or dra_device_name(gpu_index=self.gpu.index, profile=profile, profile_id=spec.profile_id, start=start),
            )
            for _, start in self.plan.targets
        ]


def held_owners(pool: NodePool) -> dict[int, dict[int, str]]:
    """Per GPU pk, per start: who holds the instance there (a live request's id, or "outside" for a device
    claimed outside the portal)."""
    held: dict[int, dict[int, str]] = {}
    rows = SlicePlacement.objects.filter(
        gpu__node__pool=pool, allocation__status__in=Allocation.QUOTA_HOLDING
    ).values_list("gpu_id", "start", "allocation_id")
    for gpu_id, start, allocation_id in rows:
        held.setdefault(gpu_id, {})[start] = str(allocation_id)
    outside = ClaimedDevice.objects.outside_fatia().filter(gpu__node__pool=pool).values_list("gpu_id", "start")
    for gpu_id, start in outside:
        if gpu_id is not None:
            held.setdefault(gpu_id, {})[start] = "outside"
    return held


def _held_starts(pool: NodePool, freed: Collection[str]) -> dict[int, set[int]]:
    """Per GPU pk, the starts of held instances, but those of the requests `freed` (ids as strings)."""
    return {
        gpu_id: {start for start, owner in starts.items() if owner not in freed}
        for gpu_id, starts in held_owners(pool).items()
    }


def whole_gpu_held(fenced: Sequence[HeldSlot], gpu_id: int, model: GpuModel) -> bool:
    """A lender's room is this GPU's reconfiguration: nothing else is planned on it (fence.plan_room)."""
    return any(f.gpu == gpu_id and f.start == 0 and f.size >= model.memory_slices for f in fenced)


@dataclass(frozen=True, slots=True)
class StaticGpu:
    """A ready GPU of a static pool that has the profile: its instances (held ones owned) and, per start, the
    uuid and device name of each instance it publishes."""

    gpu: Gpu
    model: GpuModel
    instances: list[Instance]
    held: bool
    existing: dict[int, tuple[str, str]]

    def plan(self, profile: str, count: int, mig_mode: str) -> ReconfigurationPlan | None:
        """The planner's plan for `count` x `profile` here; None when it does not fit, or when MIG-manager mode
        would have to change a GPU that holds something."""
        try:
            plan = plan_reconfiguration(self.model, self.instances, profile, count)
        except ValueError as exc:  # what the node publishes breaks the MIG rules: leave the GPU alone
            logger.error("Left out of static placement: %s holds an invalid layout (%s)", self.gpu, exc)
            return None
        if plan is not None and plan.operations and self.held and mig_mode == NodePool.MigMode.STATIC_MANAGER:
            return None  # mig-parted rebuilds the whole GPU: a change would take the held instances with it
        return plan

    def choice(self, plan: ReconfigurationPlan) -> StaticChoice:
        return StaticChoice(gpu=self.gpu, model=self.model, plan=plan, existing=self.existing)


def static_gpus(
    *, pool: NodePool, profile: str, freed: Collection[str] = (), fenced: Sequence[HeldSlot] = ()
) -> list[StaticGpu]:
    """The pool's ready GPUs that have `profile`, in node and index order. `freed`: requests (ids as strings)
    whose instances count as free (a reclaim's room is planned so); `fenced`: slots held for lenders, whose
    instances count as held and whose whole-GPU holds leave the GPU out. Caller holds the pool lock."""
    pool_model = gpu_model_for(pool.gpu_model)
    held = _held_starts(pool, freed)
    out = []
    gpus = Gpu.objects.filter(node__pool=pool, node__state=Node.State.READY).select_related("node")
    for gpu in gpus.order_by("node__name", "index"):
        model = gpu_model_of(pool_model, gpu.figures_id) or pool_model
        if not model.has_profile(profile) or whole_gpu_held(fenced, gpu.pk, model):
            continue
        taken = held.get(gpu.pk, set()) | {
            int(i["start"])
            for i in gpu.static_instances
            if model.has_profile(str(i["profile"]))
            and any(f.overlaps(gpu.pk, int(i["start"]), model.profile(str(i["profile"])).memory_slices) for f in fenced)
        }
        instances = [
            Instance(
                profile=str(i["profile"]), start=int(i["start"]), owner="held" if int(i["start"]) in taken else None
            )
            for i in gpu.static_instances
        ]
        existing = {int(i["start"]): (str(i["uuid"]), str(i["device"])) for i in gpu.static_instances}
        out.append(StaticGpu(gpu=gpu, model=model, instances=instances, held=bool(taken), existing=existing))
    return out


def choose_static(
    *, pool: NodePool, profile: str, count: int, freed: Collection[str] = (), fenced: Sequence[HeldSlot] = ()
) -> StaticChoice | None:
    """The GPU of the pool's ready nodes where `count` x `profile` costs the fewest MIG operations, or None when
    no GPU can take them even by destroying every free instance (`freed`, `fenced`: see static_gpus). Caller
    holds the pool lock."""
    best: tuple[tuple[int, str, int], StaticChoice] | None = None
    for candidate in static_gpus(pool=pool, profile=profile, freed=freed, fenced=fenced):
        plan = candidate.plan(profile, count, pool.mig_mode)
        if plan is None:
            continue
        rank = (plan.cost, candidate.gpu.node.name, candidate.gpu.index)
        if best is None or rank < best[0]:
            best = (rank, candidate.choice(plan))
    return None if best is None else best[1]
