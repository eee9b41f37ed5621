"""Recording what kube-scheduler allocated: placements follow the cluster, waiting plans are predicted again.

The plan predicts the slot the scheduler takes on each pinned GPU (allocations/mig/scheduler.py). When the
scheduler took the claims of a GPU in another order than predicted, the allocated claim's placements follow the
cluster and the claims still waiting on that GPU are predicted again, in one transaction under the pool lock.
Used by provisioning (cluster/sync.py) and by the reconcile pass (cluster/reconcile.py).
"""

from __future__ import annotations

import logging
import re
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from allocations.cluster import kube
from allocations.costs import gpu_model_for
from allocations.mig import scheduler
from allocations.mig.layout import geometry
from allocations.models import Allocation, Gpu, SlicePlacement
from allocations.placement import dra_device_name, gpu_model_of, outside_instance, outside_instances
from allocations.services.locks import lock_allocation, lock_pool
from tenants.services import record_audit_event

Status = Allocation.Status
logger = logging.getLogger(__name__)

# gpu-<index>-mig-<profile label>-<profile id>-<start>: the driver's name for a MIG profile x placement.
_MIG_DEVICE = re.compile(r"^gpu-(?P<gpu>\d+)-mig-.+-(?P<profile_id>\d+)-(?P<start>\d+)$")


def placement_of(device: str) -> tuple[int, int] | None:
    """(GPU index, start) of a MIG device name such as gpu-1-mig-1g10gb-19-3."""
    match = _MIG_DEVICE.match(device)
    return (int(match["gpu"]), int(match["start"])) if match else None


@transaction.atomic
def activate_from_cluster(*, allocation_id: int, result: kube.ClaimAllocation) -> Allocation:
    """PROVISIONING -> ACTIVE, each placement set to the device the scheduler allocated for its request.

    The plan predicts the scheduler's slot (allocations/mig/scheduler.py); where the scheduler took the
    claims of a GPU in another order than predicted, the recorded placement follows the cluster, the plans of
    the claims still waiting there are predicted again, and a "placement_differs" audit event says what
    changed. Locks the allocation, then the pool (placements of a pool change under its lock)."""
    allocation = lock_allocation(allocation_id=allocation_id)
    if allocation.status != Status.PROVISIONING:
        return allocation
    pool = lock_pool(pool_id=allocation.pool_id)
    placements = list(allocation.placements.select_related("gpu__node").order_by("pk"))
    if not placements:
        # Its plan was dropped as displaced, yet the scheduler found room: record what it allocated.
        pool_model = gpu_model_for(pool.gpu_model)
        for allocated_device in result.devices:
            where = placement_of(allocated_device.device)
            if where is not None:
                gpu = Gpu.objects.get(node__name=result.node_name, index=where[0])
                model = gpu_model_of(pool_model, gpu.figures_id) or pool_model
                placements.append(
                    SlicePlacement.objects.create(
                        allocation=allocation,
                        gpu=gpu,
                        profile=allocation.profile,
                        start=where[1],
                        size=model.profile(allocation.profile).memory_slices,
                        device_name=allocated_device.device,
                    )
                )
    differences = follow_cluster_devices(placements=placements, result=result)
    # Allocated: the steering taints have done their job (kube_sync deletes them after this commits).
    SlicePlacement.objects.filter(allocation=allocation).exclude(blocked_starts=[]).update(blocked_starts=[])
    now = timezone.now()
    allocation.status = Status.ACTIVE
    allocation.activated_at = now
    # A booking's request comes with its lease end set (the window's end); others start their lease now.
    allocation.lease_expires_at = allocation.lease_expires_at or now + timedelta(hours=allocation.lease_hours)
    allocation.status_message = "Active. Put the claim name in your pod spec's resourceClaims."
    allocation.save(update_fields=["status", "activated_at", "lease_expires_at", "status_message", "updated_at"])
    if differences:
        differences += repredict_waiting(pool_gpu_model=pool.gpu_model, gpu_ids={p.gpu_id for p in placements})
        record_audit_event(
            actor=None,
            verb="placement_differs",
            obj=allocation,
            tenant_id=allocation.tenant_id,
            after={"differences": differences},
        )
    record_audit_event(
        actor=None,
        verb="activate",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        before={"status": Status.PROVISIONING},
        after={
            "status": Status.ACTIVE,
            "claim": allocation.claim_name,
            "devices": [f"{result.node_name}/{d.device}" for d in result.devices],
        },
    )
    return allocation


def follow_cluster_devices(*, placements: list[SlicePlacement], result: kube.ClaimAllocation) -> list[dict[str, str]]:
    """Set each placement (request mig-<i> is the i-th placement) to the device the cluster allocated for it;
    returns what changed. Caller holds the pool lock."""
    by_request = {d.request: d for d in result.devices}
    differences: list[dict[str, str]] = []
    for i, placement in enumerate(placements):
        device = by_request.get(f"mig-{i}")
        where = placement_of(device.device) if device else None
        if device is None or where is None:
            continue
        gpu_index, start = where
        planned = f"{placement.gpu.node.name}/{placement.device_name}"
        actual = f"{result.node_name}/{device.device}"
        if planned == actual:
            continue
        differences.append({"planned": planned, "allocated": actual})
        placement.gpu = Gpu.objects.select_related("node").get(node__name=result.node_name, index=gpu_index)
        placement.start = start
        placement.device_name = device.device
        placement.save(update_fields=["gpu", "start", "device_name"])
    return differences


def repredict_waiting(*, pool_gpu_model: str, gpu_ids: set[int]) -> list[dict[str, str]]:
    """The scheduler allocated a claim on these GPUs in another order than predicted: predict again where it
    will put the claims still waiting there, from what the GPUs now hold (first waiting first), devices held
    outside the portal included, with each GPU's own figures. A claim left without room loses its plan
    ("displaced"); sync_claim_allocation then plans it anew. Caller holds the pool lock."""
    pool_model = gpu_model_for(pool_gpu_model)
    figures = dict(Gpu.objects.filter(pk__in=gpu_ids).values_list("pk", "figures_id"))
    outside = outside_instances(gpu_ids=gpu_ids)
    changes: list[dict[str, str]] = []
    for gpu_id in sorted(gpu_ids):
        model = gpu_model_of(pool_model, figures.get(gpu_id))
        if model is None:
            continue
        geom = geometry(model)
        rows = list(
            SlicePlacement.objects.filter(gpu_id=gpu_id, allocation__status__in=Allocation.QUOTA_HOLDING)
            .select_related("allocation", "gpu__node")
            .order_by("allocation_id", "pk")
        )
        held_outside = [outside_instance(model, p, start, "outside") for p, start in outside.get(gpu_id, [])]
        settled = [r for r in rows if r.allocation.status != Status.PROVISIONING]
        waiting: dict[int, list[SlicePlacement]] = {}
        for r in rows:
            if r.allocation.status == Status.PROVISIONING:
                waiting.setdefault(r.allocation_id, []).append(r)
        if not waiting:
            continue
        try:
            base = geom.named_key(
                tuple(
                    [(r.profile, r.start, False) for r in settled] + [(i.profile, i.start, False) for i in held_outside]
                )
            )
        except ValueError as exc:  # the database and the cluster disagree; the reconcile task reports it
            logger.error("Cannot predict the waiting claims on GPU %d: %s", gpu_id, exc)
            continue
        claims = [[geom.index[r.profile] for r in claim] for claim in waiting.values()]
        predicted = scheduler.predict(geom, base, claims)
        for (allocation_id, claim), starts in zip(waiting.items(), predicted, strict=True):
            if starts is None:
                SlicePlacement.objects.filter(allocation_id=allocation_id).delete()
                changes += [{"displaced": f"{r.gpu.node.name}/{r.device_name}"} for r in claim]
                continue
            for r, start in zip(claim, starts, strict=True):
                if r.start == start:
                    continue
                before = f"{r.gpu.node.name}/{r.device_name}"
                r.start = start
                profile_id = geom.model.profile(r.profile).profile_id
                r.device_name = dra_device_name(
                    gpu_index=r.gpu.index, profile=r.profile, profile_id=profile_id, start=start
                )
                r.save(update_fields=["start", "device_name"])
                changes.append({"replanned": before, "to": f"{r.gpu.node.name}/{r.device_name}"})
    return changes
