"""Compaction moves on the Kubernetes backend (issue 14): make the new claim, then break the old one.

services/moves.py runs a plan step by step; on this backend its NOTIFIED and PLACED steps come here:

  NOTIFIED -> PLACED  the destination slot is reserved in the database (a placement row, so that no other request
                      is planned there), then a claim of the next generation (Allocation.claim_generation: the name
                      gets "-m<n>") is applied, pinned to the destination GPU by its UUID, with its own holder pod on
                      the destination node; the slot is pinned by steering (DeviceTaintRules on the devices the
                      scheduler would take first, as FATIA_KUBE_STEER_SLOTS does, whatever that setting says: the
                      plan is about the slot). Once kube-scheduler has allocated it at the planned device: PLACED.
  PLACED   -> DONE    the old holder pod and claim are deleted, the old placement row too, the allocation takes
                      the new claim's generation (its claim name follows), the owner is told.

A new claim that the API server refuses, that the scheduler allocates elsewhere, or that is not allocated within
FATIA_KUBE_ALLOCATION_TIMEOUT_S (counted from the move's last step) is rolled back: its pod, claim and steering
deleted, the reservation removed, the old claim kept; the move is FAILED with the reason and so is the plan (the
moves done so far stay: each left every layout valid).

Idempotent and resumable, like the rest of the backend (cluster/sync.py): cluster calls run outside database
transactions and converge when run again (apply, 404 on delete counts as done); each step's database part is one
transaction that re-checks the move's step under the locks (the allocation, then the pool, then the plan and the
move), so a second copy of a step does nothing. The names of the old and the new claim come from the generation
the move fixed when it reserved the destination (SliceMove.claim_generation), never from the allocation as it is
now, so a late copy of the last step cannot delete the new claim.

What differs from the simulated backend: only requests of one slice move (a claim of several slices cannot be
made anew before the old one is deleted without asking for its other devices twice), and a move waits while
claims of other requests wait for the scheduler on the destination GPU (they could take the slot first). The
tenant's device quota in its namespace counts the new and the old claim together for a moment: a tenant at its
limit gets a refused claim, and the move fails with the API server's message.

Static-MIG pools (rescues only, services/compaction.py): the destination is a free pre-created instance of the
slice's profile; the new claim pins it by its `uuid` (the placement row keeps it, as static provisioning does), so
there is no steering and no waiting for other claims on the GPU. Everything else is the steps above.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from allocations.cluster import kube
from allocations.cluster import sync as kube_sync
from allocations.cluster.placements import placement_of
from allocations.cluster.static_compaction import free_static_instance
from allocations.costs import gpu_model_for
from allocations.mig import scheduler
from allocations.mig.layout import geometry
from allocations.models import Allocation, MovePlan, Node, SliceMove, SlicePlacement, claim_names_for, kube_name_for
from allocations.placement import dra_device_name, gpu_model_of, read_pool
from allocations.services.compaction import ADVANCE_TASK
from allocations.services.locks import lock_allocation, lock_pool
from allocations.services.moves import (
    Advance,
    destination_of,
    destination_problem,
    finish_plan,
    held_problem,
    may_move,
    skip_move,
    source_of,
    tell_owner,
)
from allocations.services.outbox import enqueue_task
from tenants.services import record_audit_event

Step = SliceMove.Step


def advance_move_on_cluster(*, move_id: int) -> Advance:
    """One step of a move at NOTIFIED or PLACED (see the module docstring). Raises KubeUnavailable (retry)."""
    move = SliceMove.objects.select_related("plan", "to_gpu__node", "from_gpu__node").get(pk=move_id)
    if move.plan.status != MovePlan.Status.APPLYING:
        return Advance(move.plan)
    if move.step == Step.NOTIFIED:
        return _place(move)
    if move.step == Step.PLACED:
        return _complete(move)
    return Advance(move.plan)


# --- names ----------------------------------------------------------------------------------------------------


def new_kube_name(allocation: Allocation, move: SliceMove) -> str:
    """The holder pod of the move's new claim, and the claim itself (a moved request has one slice)."""
    generation = move.claim_generation if move.claim_generation is not None else allocation.claim_generation + 1
    return kube_name_for(allocation.uuid, generation)


def _old_names(allocation: Allocation, move: SliceMove) -> tuple[str, list[str]]:
    generation = (move.claim_generation or allocation.claim_generation + 1) - 1
    name = kube_name_for(allocation.uuid, generation)
    return name, claim_names_for(name, allocation.count)


def moving_names() -> dict[int, str]:
    """Per ACTIVE allocation with a move under way (a destination reserved, not done yet): its new claim's name,
    which the reconcile pass must neither delete as an orphan nor compare with the recorded placements (there
    are two of them meanwhile)."""
    moves = SliceMove.objects.filter(
        plan__status=MovePlan.Status.APPLYING,
        step__in=(Step.NOTIFIED, Step.PLACED),
        claim_generation__isnull=False,
        allocation__status=Allocation.Status.ACTIVE,
    ).values_list("allocation_id", "allocation__uuid", "claim_generation")
    return {allocation_id: kube_name_for(u, g) for allocation_id, u, g in moves if g is not None}


# --- NOTIFIED -> PLACED ------------------------------------------------------------------------------------------


class Check(enum.Enum):
    STALE = "stale"  # another run took this step
    SKIP = "skip"  # the request ended or may no longer move
    WAIT = "wait"  # claims wait for the scheduler on the destination GPU
    FAIL = "fail"  # the destination cannot take the slice
    RESERVED = "reserved"


@dataclass(frozen=True, slots=True)
class Reservation:
    check: Check
    reason: str = ""
    blocked_starts: tuple[int, ...] = ()
    mig_uuid: str = ""  # static MIG: the pre-created instance the new claim pins


def _place(move: SliceMove) -> Advance:
    reservation = _reserve(move_id=move.pk)
    move.refresh_from_db()
    if reservation.check == Check.STALE:
        return Advance(move.plan)
    allocation = Allocation.objects.select_related("tenant", "pool").get(pk=move.allocation_id)
    if reservation.check == Check.SKIP:
        _delete_new_objects(allocation, move)
        return Advance(_skip(move_id=move.pk))
    if reservation.check == Check.FAIL:
        return _roll_back(allocation, move, reservation.reason)
    if reservation.check == Check.WAIT:
        if _timed_out(move):
            return _roll_back(allocation, move, "Claims of other requests kept waiting on the destination GPU.")
        return Advance(move.plan, wait=True)
    claim_spec, pod_spec = _new_specs(allocation, move, reservation.mig_uuid)
    try:
        if reservation.blocked_starts:  # before the pod, so that the scheduler sees the taints
            kube.apply_steering(_steering_spec(allocation, move, reservation.blocked_starts))
        kube.apply_resource_claim(claim_spec)
        kube.apply_holder_pod(pod_spec)
    except kube.KubeRejected as exc:
        return _roll_back(allocation, move, f"The cluster refused the new claim: {exc.message}")
    claim = kube.read_claim(claim_spec.namespace, claim_spec.name)
    result = claim.allocation if claim is not None and not claim.deleting else None
    if result is None or not result.devices:
        if _timed_out(move):
            return _roll_back(
                allocation,
                move,
                f"The cluster did not allocate the new claim within {settings.FATIA_KUBE_ALLOCATION_TIMEOUT_S} s.",
            )
        return Advance(move.plan, wait=True)
    device = result.devices[0].device
    if (result.node_name, placement_of(device)) != (move.to_gpu.node.name, (move.to_gpu.index, move.to_start)):
        return _roll_back(
            allocation,
            move,
            f"The scheduler allocated the new claim at {result.node_name}/{device}, not at {destination_of(move)}.",
        )
    plan = _placed(move_id=move.pk, device=f"{result.node_name}/{device}")
    if reservation.blocked_starts:
        kube.delete_steering(str(allocation.uuid))  # a crash before this: the next step deletes them
    return Advance(plan)


def _lock(move_id: int) -> tuple[Allocation, MovePlan, SliceMove]:
    """The allocation, then its pool, then the plan, then the move (services/locks.py; services/moves.py)."""
    allocation_id, plan_id = SliceMove.objects.values_list("allocation_id", "plan_id").get(pk=move_id)
    allocation = lock_allocation(allocation_id=allocation_id)
    lock_pool(pool_id=allocation.pool_id)
    plan = MovePlan.objects.select_for_update(no_key=True, of=("self",)).select_related("pool").get(pk=plan_id)
    move = (
        SliceMove.objects.select_for_update(no_key=True, of=("self",))
        .select_related("to_gpu__node", "from_gpu__node")
        .get(pk=move_id)
    )
    return allocation, plan, move


def _destination_row(allocation: Allocation, move: SliceMove) -> SlicePlacement | None:
    return SlicePlacement.objects.filter(allocation=allocation, gpu=move.to_gpu, start=move.to_start).first()


@transaction.atomic
def _reserve(*, move_id: int) -> Reservation:
    """Check the destination and reserve it (a placement row with the starts to steer past, or the static
    instance's uuid), once."""
    allocation, plan, move = _lock(move_id)
    if plan.status != MovePlan.Status.APPLYING or move.step != Step.NOTIFIED:
        return Reservation(Check.STALE)
    if not may_move(allocation) or allocation.count != 1:
        return Reservation(Check.SKIP)
    if not SlicePlacement.objects.filter(allocation=allocation, gpu=move.from_gpu, start=move.from_start).exists():
        return Reservation(Check.SKIP)
    reserved = _destination_row(allocation, move)
    if reserved is not None:
        return Reservation(Check.RESERVED, blocked_starts=tuple(reserved.blocked_starts), mig_uuid=reserved.mig_uuid)
    slot = _static_slot(plan, move) if plan.pool.is_static else _steered_slot(plan, move)
    if isinstance(slot, Reservation):
        return slot
    blocked = slot.blocked_starts
    pool_model = gpu_model_for(plan.pool.gpu_model)
    spec = (gpu_model_of(pool_model, move.to_gpu.figures_id) or pool_model).profile(move.profile)
    SlicePlacement.objects.create(
        allocation=allocation,
        gpu=move.to_gpu,
        profile=move.profile,
        start=move.to_start,
        size=spec.memory_slices,
        device_name=slot.device_name,
        blocked_starts=list(blocked),
        mig_uuid=slot.mig_uuid,
    )
    move.claim_generation = allocation.claim_generation + 1
    move.save(update_fields=["claim_generation", "updated_at"])
    record_audit_event(
        actor=None,
        verb="move_claimed",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        after={
            "plan": move.plan_id,
            "claim": new_kube_name(allocation, move),
            "at": destination_of(move),
            **({"steer_past": [f"{_destination_gpu(move)}:{b}" for b in blocked]} if blocked else {}),
            **({"mig_uuid": slot.mig_uuid} if slot.mig_uuid else {}),
        },
    )
    return Reservation(Check.RESERVED, blocked_starts=tuple(blocked), mig_uuid=slot.mig_uuid)


@dataclass(frozen=True, slots=True)
class _Slot:
    """The destination as the new claim will ask for it: its device, the starts to steer past (DynamicMIG), the
    pre-created instance's uuid (static MIG)."""

    device_name: str
    blocked_starts: tuple[int, ...] = ()
    mig_uuid: str = ""


def _destination_gpu(move: SliceMove) -> str:
    return f"{move.to_gpu.node.name}/gpu-{move.to_gpu.index}"


def _steered_slot(plan: MovePlan, move: SliceMove) -> _Slot | Reservation:
    """DynamicMIG: the slot must be free in the pool's layout; the scheduler is steered to it (taints on the
    devices it would take first). WAIT while other claims wait for the scheduler on that GPU."""
    layout = read_pool(plan.pool)
    position = (move.to_gpu.node.name, move.to_gpu.index)
    if position in layout.waiting:
        return Reservation(Check.WAIT)
    problem = destination_problem(layout, move)
    model = layout.models.get(position)
    problem = problem or held_problem(plan, move, model.profile(move.profile).memory_slices if model else 0)
    if problem or model is None:
        return Reservation(Check.FAIL, problem)
    geom = geometry(model)
    key = geom.named_key(tuple([(i.profile, i.start, False) for i in layout.settled[position]]))
    blocked = scheduler.steer(geom, key, geom.profile_index(move.profile), move.to_start)
    if blocked is None:
        return Reservation(Check.FAIL, f"The scheduler cannot be steered to {destination_of(move)}.")
    profile_id = model.profile(move.profile).profile_id
    device = dra_device_name(
        gpu_index=move.to_gpu.index, profile=move.profile, profile_id=profile_id, start=move.to_start
    )
    return _Slot(device, tuple(blocked))


def _static_slot(plan: MovePlan, move: SliceMove) -> _Slot | Reservation:
    """Static MIG: the destination is a free pre-created instance of the profile; the claim pins its uuid, so
    no steering and no waiting for other claims (none can take a device pinned by uuid)."""
    if move.to_gpu.node.state != Node.State.READY:
        return Reservation(Check.FAIL, f"{_destination_gpu(move)} is not ready (its layout may be changing).")
    found = free_static_instance(plan.pool, move.to_gpu, move.profile, move.to_start)
    if found is None:
        return Reservation(Check.FAIL, f"{destination_of(move)} is no longer a free pre-created {move.profile}.")
    size = gpu_model_for(plan.pool.gpu_model).profile(move.profile).memory_slices
    problem = held_problem(plan, move, size)
    if problem:
        return Reservation(Check.FAIL, problem)
    mig_uuid, device = found
    return _Slot(device, mig_uuid=mig_uuid)


def _new_specs(allocation: Allocation, move: SliceMove, mig_uuid: str) -> tuple[kube.ClaimSpec, kube.HolderPodSpec]:
    """The new claim and its holder pod, exactly as cluster_specs will describe them once the move is done (so
    that reconcile finds the spec it expects)."""
    name = new_kube_name(allocation, move)
    claim = kube.ClaimSpec(
        namespace=allocation.namespace,
        name=name,
        allocation_uuid=str(allocation.uuid),
        tenant_slug=allocation.tenant.slug,
        requests=(
            kube.DeviceRequestSpec(name="mig-0", profile=move.profile, gpu_uuid=move.to_gpu.uuid, mig_uuid=mig_uuid),
        ),
    )
    pod = kube.HolderPodSpec(
        namespace=allocation.namespace,
        name=name,
        claim_names=(name,),
        node_name=move.to_gpu.node.name,
        allocation_uuid=str(allocation.uuid),
        tenant_slug=allocation.tenant.slug,
        tolerations=kube_sync.pool_tolerations(allocation.pool),
    )
    return claim, pod


def _steering_spec(allocation: Allocation, move: SliceMove, blocked: tuple[int, ...]) -> kube.SteeringSpec:
    pool_model = gpu_model_for(allocation.pool.gpu_model)
    profile_id = (gpu_model_of(pool_model, move.to_gpu.figures_id) or pool_model).profile(move.profile).profile_id
    return kube.SteeringSpec(
        rule_prefix=new_kube_name(allocation, move),
        allocation_uuid=str(allocation.uuid),
        tenant_slug=allocation.tenant.slug,
        pool=move.to_gpu.node.name,
        devices=tuple(
            dra_device_name(gpu_index=move.to_gpu.index, profile=move.profile, profile_id=profile_id, start=start)
            for start in blocked
        ),
    )


def _timed_out(move: SliceMove) -> bool:
    return timezone.now() - move.updated_at > timedelta(seconds=settings.FATIA_KUBE_ALLOCATION_TIMEOUT_S)


@transaction.atomic
def _placed(*, move_id: int, device: str) -> MovePlan:
    allocation, plan, move = _lock(move_id)
    if plan.status != MovePlan.Status.APPLYING or move.step != Step.NOTIFIED:
        return plan
    SlicePlacement.objects.filter(allocation=allocation, gpu=move.to_gpu, start=move.to_start).update(blocked_starts=[])
    move.step = Step.PLACED
    move.save(update_fields=["step", "updated_at"])
    record_audit_event(
        actor=None,
        verb="move_placed",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        after={
            "plan": move.plan_id,
            "at": destination_of(move),
            "claim": new_kube_name(allocation, move),
            "device": device,
        },
    )
    enqueue_task(ADVANCE_TASK, plan.pk)
    return plan


def _delete_new_objects(allocation: Allocation, move: SliceMove) -> None:
    """The new holder pod, claim and steering taints (none is fine)."""
    name = new_kube_name(allocation, move)
    kube.delete_holder_pod(allocation.namespace, name)
    kube.delete_resource_claim(allocation.namespace, name)
    kube.delete_steering(str(allocation.uuid))


def _roll_back(allocation: Allocation, move: SliceMove, reason: str) -> Advance:
    """Delete what the move made in the cluster (the old claim was never touched), then fail the move and the
    plan. A crash between the two: the step runs again and comes back here (or succeeds after all)."""
    _delete_new_objects(allocation, move)
    return Advance(_fail(move_id=move.pk, reason=reason))


@transaction.atomic
def _fail(*, move_id: int, reason: str) -> MovePlan:
    allocation, plan, move = _lock(move_id)
    if plan.status != MovePlan.Status.APPLYING or move.step != Step.NOTIFIED:
        return plan
    SlicePlacement.objects.filter(allocation=allocation, gpu=move.to_gpu, start=move.to_start).delete()
    move.step = Step.FAILED
    move.reason = reason[:500]
    move.save(update_fields=["step", "reason", "updated_at"])
    record_audit_event(
        actor=None,
        verb="move_failed",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        after={"plan": move.plan_id, "from": source_of(move), "to": destination_of(move), "reason": move.reason},
    )
    return finish_plan(plan, MovePlan.Status.FAILED, f"Moving request #{allocation.pk} failed: {reason}")


@transaction.atomic
def _skip(*, move_id: int) -> MovePlan:
    allocation, plan, move = _lock(move_id)
    if plan.status != MovePlan.Status.APPLYING or move.step != Step.NOTIFIED:
        return plan
    SlicePlacement.objects.filter(allocation=allocation, gpu=move.to_gpu, start=move.to_start).delete()
    skip_move(move, allocation)
    enqueue_task(ADVANCE_TASK, plan.pk)
    return plan


# --- PLACED -> DONE ----------------------------------------------------------------------------------------------


def _complete(move: SliceMove) -> Advance:
    """Delete the old holder pod and claim (named from the move's generation: never the new one), then record."""
    allocation = Allocation.objects.select_related("tenant").get(pk=move.allocation_id)
    old_pod, old_claims = _old_names(allocation, move)
    kube.delete_holder_pod(allocation.namespace, old_pod)
    for name in old_claims:
        kube.delete_resource_claim(allocation.namespace, name)
    kube.delete_steering(str(allocation.uuid))  # left by a worker that died right after PLACED; none is fine
    return Advance(_completed(move_id=move.pk))


@transaction.atomic
def _completed(*, move_id: int) -> MovePlan:
    allocation, plan, move = _lock(move_id)
    if plan.status != MovePlan.Status.APPLYING or move.step != Step.PLACED:
        return plan
    before = allocation.claim_name
    SlicePlacement.objects.filter(allocation=allocation, gpu=move.from_gpu, start=move.from_start).delete()
    if move.claim_generation is not None:
        allocation.claim_generation = move.claim_generation
    if allocation.claim_name:  # a request released meanwhile keeps the name it had
        allocation.claim_name = allocation.kube_claim_names[0]
    allocation.save(update_fields=["claim_generation", "claim_name", "updated_at"])
    move.step = Step.DONE
    move.save(update_fields=["step", "updated_at"])
    if allocation.status == Allocation.Status.ACTIVE:
        tell_owner(
            move,
            allocation,
            f"Request #{allocation.pk}: its {move.profile} slice now runs at {destination_of(move)}, claim "
            f"{allocation.claim_name} (it was {before}); put the new name in your pods' resourceClaims.",
            "after",
        )
    record_audit_event(
        actor=None,
        verb="move",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        before={"at": source_of(move), "claim": before},
        after={"plan": move.plan_id, "at": destination_of(move), "claim": allocation.claim_name},
    )
    enqueue_task(ADVANCE_TASK, plan.pk)
    return plan
