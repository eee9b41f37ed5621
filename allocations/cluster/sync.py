"""The Kubernetes backend: an approved request becomes ResourceClaims that kube-scheduler allocates.

The placement engine picks the node and GPUs (services/provisioning.py records that plan); the claim pins
the profile and each GPU (NVIDIA's dynamic-MIG devices carry no placement attribute, so the slot cannot be
pinned), and a holder pod on that node makes the scheduler allocate the claim now. A claim holds at most 32
slices, so a larger request has several claims, which the one holder pod references together. What the scheduler chose
is read back and recorded; where it differs from the plan the difference goes to the audit log.

Cluster calls run outside database transactions, and every one is idempotent (names from our ids, apply,
404 on delete counts as done), so a worker killed at any point converges when the task runs again.
KubeUnavailable propagates to the task, which retries; KubeRejected ends the request as FAILED, quota freed.
"""

from __future__ import annotations

import enum
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from allocations.admission.hold import plan_or_hold, plans_forced
from allocations.cluster import kube, shared_claims, shared_provisioning, static_provisioning
from allocations.cluster import placements as cluster_placements
from allocations.cluster.steering import decide_steering
from allocations.cohorts.fence import place_around
from allocations.cohorts.members import memory_ceiling
from allocations.costs import gpu_model_for
from allocations.models import MAX_REQUESTS_PER_CLAIM, Allocation, Gpu, Node, NodePool, Quota
from allocations.models import tenant_namespace as tenant_namespace  # re-exported: reconcile and bench use it
from allocations.placement import dra_device_name, gpu_model_of, plan_slices_for_scheduler, read_once_per_try
from allocations.queue_reservation import reservation_blocker
from allocations.services.admission import hold_allocation
from allocations.services.cohort_reclaim import WAITING as RECLAIM_WAITING
from allocations.services.cohort_reclaim import wait_for_reclaim
from allocations.services.compaction import rescue_with_moves
from allocations.services.lifecycle import finish_release, mark_allocation_failed, start_claiming
from allocations.services.locks import lock_allocation, lock_pool
from allocations.services.pools import register_node
from allocations.services.queue_entry import enqueue_allocation
from tenants.models import Tenant
from tenants.services import record_audit_event

Status = Allocation.Status


def tenant_spec(tenant: Tenant) -> kube.TenantSpec:
    """The tenant's namespace; its device quota is the sum of its memory-slot limits (a MIG device takes at
    least one memory slot), so the cluster fence never binds before the portal's own quota does. In a cohort
    (issue 15) each pool counts its guarantee plus the most the cohort could ever lend the tenant
    (cohorts/members.memory_ceiling), so borrowing is never refused by the cluster."""
    memory = sum(memory_ceiling(quota) for quota in Quota.objects.filter(tenant=tenant).order_by("pk"))
    return kube.TenantSpec(
        namespace=tenant_namespace(tenant),
        tenant_slug=tenant.slug,
        member_group=f"fatia:tenant:{tenant.slug}",
        max_devices=int(memory),
        pod_security=settings.FATIA_TENANT_POD_SECURITY,
        member_role=settings.FATIA_KUBE_MEMBER_ROLE,
    )


def onboard_tenant(*, tenant_id: int) -> None:
    """Namespace, member RBAC and device quota for the tenant. Idempotent; raises KubeUnavailable."""
    kube.ensure_tenant_namespace(tenant_spec(Tenant.objects.get(pk=tenant_id)))


@transaction.atomic
def register_cluster_node(*, pool_id: int, name: str, gpu_uuids: list[str]) -> Node:
    """A node the cluster publishes, with its GPUs' UUIDs (the parentUUID of their MIG devices)."""
    node = register_node(pool_id=pool_id, name=name, gpu_count=len(gpu_uuids), actor=None)
    for index, gpu_uuid in enumerate(gpu_uuids):
        Gpu.objects.filter(node=node, index=index).update(uuid=gpu_uuid)
    return node


# --- provisioning -----------------------------------------------------------------------------------------


@transaction.atomic
def start_provisioning(*, allocation_id: int) -> Allocation:
    """APPROVED -> PROVISIONING with the planned placements recorded, or -> QUEUED (quota kept) when the
    pool has no room. Anything but APPROVED is returned as it is (a redelivered task goes on from there).
    Raises PoolBusy when the request only fits next to claims the scheduler has not allocated yet (retry).
    Locks the allocation, then the pool (placement decisions in a pool are serialised)."""
    allocation = lock_allocation(allocation_id=allocation_id)
    if allocation.status != Status.APPROVED:
        return allocation
    pool = lock_pool(pool_id=allocation.pool_id)
    if not pool.is_shared and wait_for_reclaim(allocation):  # a lender waits for what it lent (issue 15)
        what = f"{allocation.count} x {allocation.profile}"
        return enqueue_allocation(allocation, pool=pool, what=what, waiting_for=RECLAIM_WAITING)
    if pool.is_shared:  # shares of whole GPUs by memory size (time-sliced or MPS), not MIG slices
        return shared_provisioning.provision_shared(allocation=allocation, pool=pool)
    if pool.is_static:  # pre-created MIG devices: pin one by uuid, or change the layout first
        return static_provisioning.start_static_provisioning(allocation=allocation, pool=pool)
    # Every step below plans on one read of the pool's layout and demand, as a queued request's try (issue 14).
    with read_once_per_try(pool):
        return _start_dynamic(allocation, pool)


def _start_dynamic(allocation: Allocation, pool: NodePool) -> Allocation:
    """start_provisioning's steps in a dynamic MIG pool, under the allocation's and the pool's locks: plan (or hold),
    around lenders' rooms, a rescue by moves, then claim or queue."""
    steering = decide_steering(allocation=allocation)
    slices, hold = plan_or_hold(  # a pool with admission may hold it (issue 14, allocations/admission/)
        pool=pool,
        allocation=allocation,
        plan=lambda force: plan_slices_for_scheduler(
            pool=pool, profile=allocation.profile, count=allocation.count, steer=steering.steer, force=force
        ),
    )
    if hold is not None:
        what = f"{allocation.count} x {allocation.profile}"
        return hold_allocation(allocation, pool=pool, what=what, hold=hold)
    slices, held = place_around(  # not in the room a reclaim frees for a lender (issue 15)
        pool=pool,
        allocation=allocation,
        slices=slices,
        replan=lambda avoid: plan_slices_for_scheduler(
            pool=pool,
            profile=allocation.profile,
            count=allocation.count,
            steer=steering.steer,
            avoid=avoid,
            force=plans_forced(pool, allocation),  # issue 14: not placed where the first plan would hold it
        ),
    )
    if held:
        what = f"{allocation.count} x {allocation.profile}"
        return enqueue_allocation(allocation, pool=pool, what=what, waiting_for=held)
    if slices is None and rescue_with_moves(allocation):
        return allocation  # compaction moves other slices first (issue 14); the plan's end provisions this again
    blocker = None if slices is None else reservation_blocker(pool=pool, allocation=allocation, slices=slices)
    if slices is None or blocker is not None:
        what = f"{allocation.count} x {allocation.profile}"
        return enqueue_allocation(allocation, pool=pool, what=what, waiting_for=blocker or "")
    start_claiming(
        allocation=allocation,
        slices=slices,
        audit=(
            {"steer_past": [f"{s.node_name}/gpu-{s.gpu_index}:{b}" for s in slices for b in s.blocked_starts]}
            if any(s.blocked_starts for s in slices)
            else steering.audit()
        ),
    )
    return allocation


def pool_tolerations(pool: NodePool) -> tuple[kube.Toleration, ...]:
    """The pool's tolerations (validated by services.pools.checked_tolerations) for its holder pods."""
    return tuple(
        kube.Toleration(
            key=t.get("key", ""),
            operator=t.get("operator", "Equal"),
            value=t.get("value", ""),
            effect=t.get("effect", ""),
            toleration_seconds=t.get("tolerationSeconds"),
        )
        for t in pool.tolerations
    )


def cluster_specs(allocation: Allocation) -> tuple[list[kube.ClaimSpec], kube.HolderPodSpec]:
    """The claims and the holder pod of a planned allocation.

    One request `mig-<i>` per planned slice, pinned to its profile and GPU, in slice order; a claim holds at most
    MAX_REQUESTS_PER_CLAIM of them (the API server refuses more), so a larger request has several claims,
    named by Allocation.kube_claim_names. The one holder pod references them all: the scheduler allocates a
    pod's claims together, so they are allocated all or none, on the pod's node. A shared or MPS pool's request
    has one claim per share instead (shared_claims.py)."""
    if allocation.pool.is_shared:
        return shared_claims.shared_cluster_specs(allocation, pool_tolerations(allocation.pool))
    placements = list(allocation.placements.select_related("gpu__node").order_by("pk"))
    namespace = allocation.namespace
    requests = [
        kube.DeviceRequestSpec(name=f"mig-{i}", profile=p.profile, gpu_uuid=p.gpu.uuid, mig_uuid=p.mig_uuid)
        for i, p in enumerate(placements)
    ]
    names = allocation.kube_claim_names
    claims = [
        kube.ClaimSpec(
            namespace=namespace,
            name=name,
            allocation_uuid=str(allocation.uuid),
            tenant_slug=allocation.tenant.slug,
            requests=tuple(requests[k * MAX_REQUESTS_PER_CLAIM : (k + 1) * MAX_REQUESTS_PER_CLAIM]),
        )
        for k, name in enumerate(names)
    ]
    pod = kube.HolderPodSpec(
        namespace=namespace,
        name=allocation.kube_name,
        claim_names=tuple(names),
        node_name=placements[0].gpu.node.name,
        allocation_uuid=str(allocation.uuid),
        tenant_slug=allocation.tenant.slug,
        tolerations=pool_tolerations(allocation.pool),
    )
    return claims, pod


def merged_allocation(claims: list[kube.ClaimState | None]) -> kube.ClaimAllocation | None:
    """What the scheduler allocated for an allocation's claims together (request names are unique across them),
    or None while any of them is missing or unallocated."""
    results = [c.allocation if c is not None else None for c in claims]
    if not results or any(r is None for r in results):
        return None
    allocated = [r for r in results if r is not None]
    return kube.ClaimAllocation(
        node_name=allocated[0].node_name, devices=tuple(d for r in allocated for d in r.devices)
    )


def apply_claim(*, allocation_id: int, status: str = Status.PROVISIONING) -> None:
    """Apply the claims of an allocation in `status` (PROVISIONING: the first half of realising it; ACTIVE:
    the reconcile task re-creating claims deleted behind our back)."""
    allocation = Allocation.objects.select_related("tenant", "pool").get(pk=allocation_id)
    if allocation.status != status or not allocation.placements.exists():
        return  # no plan: displaced (see cluster_placements.repredict_waiting); sync_claim_allocation plans it anew
    claims, _ = cluster_specs(allocation)
    try:
        for claim in claims:
            kube.apply_resource_claim(claim)
    except kube.KubeRejected as exc:
        # Onboarding (set_tenant_quota's task) makes the namespace and sizes its device quota; when it has not
        # run yet, or the namespace was deleted, do it here and try once more.
        if exc.status not in (403, 404):
            raise
        kube.ensure_tenant_namespace(tenant_spec(allocation.tenant))
        for claim in claims:
            kube.apply_resource_claim(claim)


def steering_spec(allocation: Allocation) -> kube.SteeringSpec | None:
    """The DeviceTaintRules that steer the scheduler to the planned slot, or None when first fit gets there."""
    steered = [p for p in allocation.placements.select_related("gpu__node").order_by("pk") if p.blocked_starts]
    if not steered:
        return None
    pool_model = gpu_model_for(allocation.pool.gpu_model)
    devices = tuple(
        dra_device_name(
            gpu_index=p.gpu.index,
            profile=p.profile,
            profile_id=(gpu_model_of(pool_model, p.gpu.figures_id) or pool_model).profile(p.profile).profile_id,
            start=start,
        )
        for p in steered
        for start in p.blocked_starts
    )
    return kube.SteeringSpec(
        rule_prefix=allocation.kube_name,
        allocation_uuid=str(allocation.uuid),
        tenant_slug=allocation.tenant.slug,
        pool=steered[0].gpu.node.name,
        devices=devices,
    )


def apply_steering(*, allocation_id: int) -> None:
    """Taint the devices the scheduler would take before the planned slot (a PROVISIONING allocation's)."""
    allocation = Allocation.objects.select_related("tenant", "pool").get(pk=allocation_id)
    if allocation.status != Status.PROVISIONING:
        return
    spec = steering_spec(allocation)
    if spec is not None:
        kube.apply_steering(spec)


def apply_holder_pod(*, allocation_id: int, status: str = Status.PROVISIONING) -> None:
    """Apply the holder pod of an allocation in `status` (the second half)."""
    allocation = Allocation.objects.select_related("tenant", "pool").get(pk=allocation_id)
    if allocation.status != status or not allocation.placements.exists():
        return
    _, pod = cluster_specs(allocation)
    kube.apply_holder_pod(pod)


def renew_holder_pod(
    *, allocation_id: int, found: kube.HolderPodState | None, status: str = Status.PROVISIONING
) -> str:
    """Keep an allocation's holder pod alive, given the pod as found (None: there is none): apply it when it is
    missing; delete and apply it again when it has ended (Failed or Succeeded: evicted, node pressure), since
    its claims are deallocated once their only consumer has ended and only a new pod gets them allocated again.
    Returns "applied", "replaced" or "" (nothing to do). Raises KubeUnavailable."""
    if found is not None and not found.ended:
        return ""
    if found is not None:
        # A pod that has ended is deleted at once (no grace period), so the name is free for the new one.
        kube.delete_holder_pod(found.namespace, found.name)
    apply_holder_pod(allocation_id=allocation_id, status=status)
    return "applied" if found is None else "replaced"


def provision_on_cluster(*, allocation_id: int) -> Allocation:
    """Plan (APPROVED -> PROVISIONING), then apply claim and holder pod. The caller (provision task) then
    polls the claim with sync_claim_allocation until the scheduler has allocated it.

    Every step is idempotent, so a worker killed between any two of them converges on the rerun.
    Raises KubeUnavailable (the task retries; the request says it is waiting for the cluster). A KubeRejected
    ends the request as FAILED with the API server's message, its objects deleted and its quota freed.
    """
    allocation = start_provisioning(allocation_id=allocation_id)
    if allocation.status != Status.PROVISIONING:
        return allocation
    try:
        apply_steering(allocation_id=allocation_id)  # before the pod, so that the scheduler sees the taints
        apply_claim(allocation_id=allocation_id)
        apply_holder_pod(allocation_id=allocation_id)
    except kube.KubeUnavailable as exc:
        note_cluster_wait(allocation_id=allocation_id, message=exc.message)
        raise
    except kube.KubeRejected as exc:
        return fail_on_cluster(allocation_id=allocation_id, reason=f"The cluster refused the request: {exc.message}")
    return allocation


def poll_delay(attempt: int) -> float:
    """Seconds before the next look at an unallocated claim: 0.2, 0.4, ... up to 5."""
    return float(min(0.2 * 2**attempt, 5.0))


@transaction.atomic
def note_cluster_wait(*, allocation_id: int, message: str) -> None:
    """Say on a PROVISIONING or RELEASING request that it waits for the cluster (shown to the requester)."""
    allocation = lock_allocation(allocation_id=allocation_id)
    if allocation.status not in (Status.PROVISIONING, Status.RELEASING):
        return
    allocation.status_message = f"Waiting for the Kubernetes API ({message}); retrying."
    allocation.save(update_fields=["status_message", "updated_at"])


def _delete_objects(allocation: Allocation) -> None:
    """Delete the holder pod, then every claim of the allocation (404 counts as done)."""
    namespace = allocation.namespace
    kube.delete_holder_pod(namespace, allocation.kube_name)
    for name in allocation.kube_claim_names:
        kube.delete_resource_claim(namespace, name)


def fail_on_cluster(*, allocation_id: int, reason: str) -> Allocation:
    """Delete the holder pod, claims and steering taints, then FAILED with quota freed. Raises KubeUnavailable."""
    allocation = Allocation.objects.select_related("tenant").get(pk=allocation_id)
    _delete_objects(allocation)
    _stop_steering(allocation)
    return mark_allocation_failed(allocation_id=allocation_id, reason=reason)


def _is_steered(allocation: Allocation) -> bool:
    return allocation.placements.exclude(blocked_starts=[]).exists()


def _stop_steering(allocation: Allocation) -> None:
    if _is_steered(allocation):
        kube.delete_steering(str(allocation.uuid))


class ClaimProgress(enum.Enum):
    """What a look at a PROVISIONING allocation's claim found."""

    WAITING = "waiting"  # not allocated yet: look again later
    SETTLED = "settled"  # nothing more to wait for: ACTIVE, FAILED, or no longer PROVISIONING
    REPLAN = "replan"  # APPROVED again: its slots went to another claim, provisioning plans it anew


def sync_claim_allocation(*, allocation_id: int) -> ClaimProgress:
    """Look at a PROVISIONING allocation's claims once. SETTLED when they are all allocated (-> ACTIVE, the
    placements as the scheduler made them), when the allocation is no longer PROVISIONING, or when it waited
    FATIA_KUBE_ALLOCATION_TIMEOUT_S (-> FAILED, objects deleted, quota freed). A claim deleted behind our
    back is applied again with its pod once it is gone; a holder pod that ended is replaced. Raises
    KubeUnavailable (retry)."""
    allocation = Allocation.objects.select_related("tenant").get(pk=allocation_id)
    if allocation.status != Status.PROVISIONING:
        return ClaimProgress.SETTLED
    if not allocation.placements.exists():
        return _replan_displaced(allocation)
    namespace = allocation.namespace
    claims = [kube.read_claim(namespace, name) for name in allocation.kube_claim_names]
    if any(claim is None for claim in claims):
        apply_claim(allocation_id=allocation_id)
        apply_holder_pod(allocation_id=allocation_id)
        return ClaimProgress.WAITING
    if any(claim is not None and claim.deleting for claim in claims):
        return ClaimProgress.WAITING  # deleted behind our back: applied again once it is gone
    result = merged_allocation(claims)
    if result is None:
        renew_holder_pod(allocation_id=allocation_id, found=kube.read_holder_pod(namespace, allocation.kube_name))
        started = allocation.decided_at or allocation.created_at
        if timezone.now() - started > timedelta(seconds=settings.FATIA_KUBE_ALLOCATION_TIMEOUT_S):
            fail_on_cluster(
                allocation_id=allocation_id,
                reason=(
                    f"The cluster did not allocate the claim within {settings.FATIA_KUBE_ALLOCATION_TIMEOUT_S} s; "
                    "the quota was given back."
                ),
            )
            return ClaimProgress.SETTLED
        return ClaimProgress.WAITING
    steered = _is_steered(allocation)
    cluster_placements.activate_from_cluster(allocation_id=allocation_id, result=result)
    if steered:
        kube.delete_steering(str(allocation.uuid))  # a crash before this: reconcile deletes them
    return ClaimProgress.SETTLED


def _replan_displaced(allocation: Allocation) -> ClaimProgress:
    """A PROVISIONING allocation without a plan: the scheduler gave the slots planned for it to another claim
    and its GPU had no other room (see cluster_placements.repredict_waiting). If the scheduler allocated it
    after all, record that; otherwise delete its pod and claim and, once the claim is gone, make it APPROVED
    again so that provisioning plans it anew under the same claim name. The quota stays held throughout."""
    namespace = allocation.namespace
    claims = [kube.read_claim(namespace, name) for name in allocation.kube_claim_names]
    if all(claim is None for claim in claims):
        return _back_to_approved(allocation_id=allocation.pk)
    result = merged_allocation(claims)
    if result is not None and not any(claim is not None and claim.deleting for claim in claims):
        cluster_placements.activate_from_cluster(allocation_id=allocation.pk, result=result)
        return ClaimProgress.SETTLED
    kube.delete_steering(str(allocation.uuid))
    _delete_objects(allocation)
    return ClaimProgress.WAITING  # the next look finds the claims gone


@transaction.atomic
def _back_to_approved(*, allocation_id: int) -> ClaimProgress:
    allocation = lock_allocation(allocation_id=allocation_id)
    if allocation.status != Status.PROVISIONING or allocation.placements.exists():
        return ClaimProgress.SETTLED if allocation.status != Status.PROVISIONING else ClaimProgress.WAITING
    allocation.status = Status.APPROVED
    allocation.status_message = "Planning again: the cluster gave the slots planned for this request to another one."
    allocation.save(update_fields=["status", "status_message", "updated_at"])
    record_audit_event(
        actor=None,
        verb="replan",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        before={"status": Status.PROVISIONING},
        after={"status": Status.APPROVED},
    )
    return ClaimProgress.REPLAN


def delete_cluster_objects(*, allocation_id: int) -> None:
    """Delete the holder pod and claims of a FAILED allocation (404 counts as done). Raises KubeUnavailable."""
    allocation = Allocation.objects.select_related("tenant").get(pk=allocation_id)
    if allocation.status != Status.FAILED:
        return
    _delete_objects(allocation)


def release_on_cluster(*, allocation_id: int) -> Allocation:
    """Delete the holder pod and claims of a RELEASING allocation, then finish_release (quota freed).
    Idempotent; raises KubeUnavailable (retry; the request says it waits for the cluster)."""
    allocation = Allocation.objects.select_related("tenant").get(pk=allocation_id)
    if allocation.status != Status.RELEASING:
        return allocation
    try:
        _delete_objects(allocation)
    except kube.KubeUnavailable as exc:
        note_cluster_wait(allocation_id=allocation_id, message=exc.message)
        raise
    return finish_release(allocation_id=allocation_id)
