"""The cluster against the database, both ways: the Kubernetes backend's beat task (portal/celery.py).

One pass lists our claims, holder pods and the cluster's nodes (three API calls, in a worker, never in a web
request), then fixes what drifted. Each fix is recorded in the audit log (verb "reconcile") in the same
transaction as the change it describes:

* an ACTIVE allocation whose claim is gone (deleted behind our back): claim and holder pod applied again; the
  scheduler allocates it again, and a later pass records where;
* an ACTIVE allocation whose claim has another spec than ours (re-created by hand): deleted, and re-created by
  the next pass once it is gone;
* an ACTIVE allocation whose holder pod ended (Failed or Succeeded: evicted, node pressure) or is gone: the pod
  is replaced, since a claim whose only consumer ended is deallocated and only a new pod gets it allocated
  again; a later pass records where;
* an ACTIVE allocation whose claim is allocated elsewhere than recorded: the placements follow the cluster;
* an ACTIVE allocation on a node that left the cluster: FAILED, its quota freed, claim and pod deleted; the
  node is marked gone (and ready again when it comes back);
* claims and holder pods labelled as ours whose allocation is over or unknown: deleted, once (what is being deleted
  already is left to finish); so are steering DeviceTaintRules of allocations no longer waiting for the scheduler;
* an ACTIVE allocation with a compaction move under way (issue 14, cluster/moves.py) is the move's business: its
  new claim, pod and steering are kept, and nothing else is checked until the move is done or rolled back;

Requests stuck APPROVED, PROVISIONING or RELEASING (a lost message) are not this pass's business: the outbox sweep
(services/requeue.py, tasks.sweep_outbox_task) requeues them without asking the cluster, so also while it is down.

An allocation of more than 32 slices has several claims (Allocation.kube_claim_names); each of them is checked,
and the pass knows them all as the allocation's. Every step is idempotent and a pass converges from any state;
KubeUnavailable propagates (the beat runs the next pass anyway).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction

from allocations.cluster import discovery, kube
from allocations.cluster import moves as cluster_moves
from allocations.cluster import placements as cluster_placements
from allocations.cluster import sync as kube_sync
from allocations.models import Allocation, Node
from allocations.services.locks import lock_allocation, lock_pool
from tenants.models import TenantNamespace
from tenants.services import record_audit_event

Status = Allocation.Status
logger = logging.getLogger(__name__)

# Statuses whose claim the portal still wants (APPROVED: a re-plan may be deleting the old claim).
CLAIM_WANTED = (Status.APPROVED, Status.PROVISIONING, Status.ACTIVE, Status.RELEASING)


@dataclass
class ReconcileReport:
    """What one pass did, by allocation id (or claim name for claims of no allocation we know)."""

    recreated: list[int] = field(default_factory=list)
    deleted_changed: list[int] = field(default_factory=list)
    pods_replaced: list[int] = field(default_factory=list)
    moved: list[int] = field(default_factory=list)
    node_gone: list[int] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    steering_deleted: list[str] = field(default_factory=list)
    nodes_gone: list[str] = field(default_factory=list)
    nodes_back: list[str] = field(default_factory=list)


def reconcile_cluster() -> ReconcileReport:
    """One pass (see the module docstring). Raises KubeUnavailable when the API cannot be read."""
    report = ReconcileReport()
    # Never touch objects outside the namespaces the portal manages: those it made, and those tenants own.
    prefix = settings.FATIA_KUBE_NAMESPACE_PREFIX
    owned = set(TenantNamespace.objects.values_list("name", flat=True))

    def ours(namespace: str) -> bool:
        return namespace.startswith(prefix) or namespace in owned

    claims = {(c.namespace, c.name): c for c in kube.list_claims(kube.LABEL_ALLOCATION) if ours(c.namespace)}
    pods = {(p.namespace, p.name): p for p in kube.list_holder_pods(kube.LABEL_ALLOCATION) if ours(p.namespace)}
    cluster_nodes = kube.list_node_names()
    _sync_node_states(cluster_nodes, report)

    live = Allocation.objects.filter(status__in=CLAIM_WANTED).select_related("tenant", "pool")
    wanted_claims: set[tuple[str, str]] = set()
    wanted_pods: set[tuple[str, str]] = set()
    # Compaction moves under way keep their new claim (and its steering), and are left to the move meanwhile.
    moving = cluster_moves.moving_names()
    for allocation in live:
        namespace = allocation.namespace
        wanted_claims |= {(namespace, name) for name in allocation.kube_claim_names}
        wanted_pods.add((namespace, allocation.kube_name))
        if allocation.pk in moving:
            wanted_claims.add((namespace, moving[allocation.pk]))
            wanted_pods.add((namespace, moving[allocation.pk]))
        elif allocation.status == Status.ACTIVE:
            _reconcile_active(allocation, claims, pods.get((namespace, allocation.kube_name)), cluster_nodes, report)

    orphans = {key for key in claims if key not in wanted_claims}
    orphans |= {key for key in pods if key not in wanted_pods}
    # A claim deleted already stays listed, deleting, until it is deallocated and its finalizer removed (seconds;
    # 6-16 s after an API server outage). Deleting it again would change nothing, and auditing it again would record
    # one deletion twice (the likely cause of a flake of tests/kube/test_api_outage_resend.py: docs/outbox.md).
    orphans = {key for key in orphans if not _on_its_way_out(claims.get(key), pods.get(key))}
    for namespace, name in sorted(orphans):
        kube.delete_holder_pod(namespace, name)
        kube.delete_resource_claim(namespace, name)
        _record_orphan(namespace, name, report)

    waiting = {str(u) for u in Allocation.objects.filter(status=Status.PROVISIONING).values_list("uuid", flat=True)}
    waiting |= {str(u) for u in Allocation.objects.filter(pk__in=list(moving)).values_list("uuid", flat=True)}
    for allocation_uuid in sorted(kube.list_steering() - waiting):
        kube.delete_steering(allocation_uuid)  # left by a worker that died between activation and cleanup
        report.steering_deleted.append(allocation_uuid)
    return report


def _on_its_way_out(claim: kube.ClaimState | None, pod: kube.HolderPodState | None) -> bool:
    """Whatever of an orphan's claim and holder pod is still listed is being deleted already."""
    return all(found is None or found.deleting for found in (claim, pod))


def _sync_node_states(cluster_nodes: set[str], report: ReconcileReport) -> None:
    """The same gone / back marks fleet discovery makes (it usually makes them first, within a second)."""
    for node in Node.objects.exclude(state=Node.State.GONE).exclude(name__in=cluster_nodes).order_by("pk"):
        discovery.set_node_state(node_id=node.pk, state=Node.State.GONE)
        report.nodes_gone.append(node.name)
    for node in Node.objects.filter(state=Node.State.GONE, name__in=cluster_nodes).order_by("pk"):
        discovery.set_node_state(node_id=node.pk, state=Node.State.READY)
        report.nodes_back.append(node.name)


def _reconcile_active(
    allocation: Allocation,
    claims: dict[tuple[str, str], kube.ClaimState],
    pod: kube.HolderPodState | None,
    cluster_nodes: set[str],
    report: ReconcileReport,
) -> None:
    placements = list(allocation.placements.select_related("gpu__node").order_by("pk"))
    gone = sorted({p.gpu.node.name for p in placements} - cluster_nodes)
    if gone:
        kube_sync.fail_on_cluster(
            allocation_id=allocation.pk,
            reason=f"Node {', '.join(gone)} left the cluster, and the slices with it; the quota was given back.",
        )
        _audit(allocation.pk, {"node_gone": gone})
        report.node_gone.append(allocation.pk)
        return
    specs, pod_spec = kube_sync.cluster_specs(allocation)
    found = [claims.get((spec.namespace, spec.name)) for spec in specs]
    several = len(specs) > 1  # audit entries name the claims only where there is more than one
    missing = [spec.name for spec, claim in zip(specs, found, strict=True) if claim is None]
    if missing:
        kube_sync.apply_claim(allocation_id=allocation.pk, status=Status.ACTIVE)
        kube_sync.renew_holder_pod(allocation_id=allocation.pk, found=pod, status=Status.ACTIVE)
        _audit(
            allocation.pk,
            {"claim": "re-created: it was deleted outside the portal", **({"claims": missing} if several else {})},
        )
        report.recreated.append(allocation.pk)
        return
    present = [claim for claim in found if claim is not None]
    if any(claim.deleting for claim in present):
        return  # deleted outside the portal and on its way out: re-created by a later pass
    changed = [
        claim for spec, claim in zip(specs, present, strict=True) if claim.selectors != kube.claim_selectors(spec)
    ]
    if changed:
        kube.delete_holder_pod(pod_spec.namespace, pod_spec.name)
        for claim in changed:
            kube.delete_resource_claim(claim.namespace, claim.name)
        after: dict[str, object] = {
            "claim": "deleted: its spec was changed outside the portal",
            "found": [s for claim in changed for s in claim.selectors],
        }
        if several:
            after["claims"] = [claim.name for claim in changed]
        _audit(allocation.pk, after)
        report.deleted_changed.append(allocation.pk)
        return
    renewed = kube_sync.renew_holder_pod(allocation_id=allocation.pk, found=pod, status=Status.ACTIVE)
    if renewed:
        if pod is None:
            what = "re-created: it was deleted outside the portal"
        else:
            what = f"replaced: it had ended {pod.phase}" + (f" ({pod.reason})" if pod.reason else "")
        _audit(allocation.pk, {"holder_pod": what})
        report.pods_replaced.append(allocation.pk)
        return  # the scheduler allocates the claims for the new pod; a later pass records where
    result = kube_sync.merged_allocation(list(present))
    if result is not None and _follow(allocation.pk, result):
        report.moved.append(allocation.pk)


@transaction.atomic
def _follow(allocation_id: int, result: kube.ClaimAllocation) -> bool:
    """The recorded placements of an ACTIVE allocation follow its claim's allocation. True if they moved."""
    allocation = lock_allocation(allocation_id=allocation_id)
    if allocation.status != Status.ACTIVE:
        return False
    pool = lock_pool(pool_id=allocation.pool_id)
    placements = list(allocation.placements.select_related("gpu__node").order_by("pk"))
    differences = cluster_placements.follow_cluster_devices(placements=placements, result=result)
    if not differences:
        return False
    differences += cluster_placements.repredict_waiting(
        pool_gpu_model=pool.gpu_model, gpu_ids={p.gpu_id for p in placements}
    )
    record_audit_event(
        actor=None,
        verb="reconcile",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        after={"placements": differences},
    )
    return True


@transaction.atomic
def _audit(allocation_id: int, after: dict[str, object]) -> None:
    allocation = Allocation.objects.get(pk=allocation_id)
    record_audit_event(actor=None, verb="reconcile", obj=allocation, tenant_id=allocation.tenant_id, after=after)


def _record_orphan(namespace: str, name: str, report: ReconcileReport) -> None:
    allocation = Allocation.objects.filter(pk__in=_allocation_ids_named(name)).first()
    if allocation is None:
        logger.warning("Deleted claim and pod %s/%s labelled as the portal's: no such allocation", namespace, name)
        report.orphans.append(f"{namespace}/{name}")
        return
    _audit(
        allocation.pk, {"deleted": f"claim and holder pod {namespace}/{name}: the allocation is {allocation.status}"}
    )
    report.orphans.append(f"{namespace}/{name}")


def _allocation_ids_named(name: str) -> list[int]:
    """The allocation a claim or pod name is derived from: mig-alloc-<uuid>, or mig-alloc-<uuid>-<k> for one of
    several claims (models.claim_names_for)."""
    prefix = "mig-alloc-"
    if not name.startswith(prefix):
        return []
    try:
        allocation_uuid = uuid.UUID(name.removeprefix(prefix)[:36])
    except ValueError:
        return []
    return list(Allocation.objects.filter(uuid=allocation_uuid).values_list("pk", flat=True))
