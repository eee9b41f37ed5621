"""Celery tasks: ids in, one service call, done. Every service they call is idempotent.

Retried with exponential backoff: KubeUnavailable (5xx, timeouts, an unreachable API) and the database's
transient errors (a deadlock or serialization failure rolled the service's transaction back: OperationalError; the
connection broke: OperationalError or InterfaceError), because running the service again is safe. Terminal cluster
errors are handled inside the services (the request ends FAILED with the API server's message).

Work a service queues goes through the outbox (services/outbox.py): a task that ran to the end marks its outbox
rows done (the task_success handler at the end), and `sweep_outbox_task` sends again what is due and not done.
"""

from __future__ import annotations

from typing import Any

from celery import Task, shared_task
from celery.exceptions import SoftTimeLimitExceeded
from celery.signals import task_prerun, task_success
from django.conf import settings
from django.db import InterfaceError, OperationalError

from allocations import move_mail, notifications
from allocations.admission.due import admit_due_holds
from allocations.cluster import check_runs, namespace_discovery, namespace_sync, reconcile, reconfigure
from allocations.cluster import sync as kube_sync
from allocations.cluster.kube import KubeUnavailable
from allocations.cluster.watcher import FleetDiscovery
from allocations.models import Allocation
from allocations.placement import PoolBusy
from allocations.services import (
    bookings,
    cohort_handover,
    cohort_reclaim,
    compaction,
    leases,
    moves,
    outbox,
    preshaping,
    provisioning,
    reclaim,
    requeue,
)
from allocations.services import queue as admission
from portal.metrics import events as metric_events

# Retry after 1, 2, 4, 8, then every 10 s for about a quarter of an hour; past that the beat's sweep queues the
# work again (services/requeue.py), so an outage of any length converges.
KUBE_RETRY: dict[str, Any] = {
    "autoretry_for": (KubeUnavailable, OperationalError, InterfaceError),
    "retry_backoff": 1,
    "retry_backoff_max": 10,
    "retry_jitter": False,
    "max_retries": 100,
}

DB_RETRY: dict[str, Any] = {**KUBE_RETRY, "autoretry_for": (OperationalError, InterfaceError), "max_retries": 10}


# PoolBusy: the request fits only next to claims the scheduler is about to allocate; look again soon.
POOL_BUSY_RETRY_S = 0.25
POOL_BUSY_MAX_RETRIES = 1200


@shared_task(bind=True, acks_late=True, **KUBE_RETRY)
def provision_allocation_task(self: Any, allocation_id: int) -> None:
    try:
        allocation = provisioning.provision_allocation(allocation_id=allocation_id)
    except PoolBusy as exc:
        raise self.retry(exc=exc, countdown=POOL_BUSY_RETRY_S, max_retries=POOL_BUSY_MAX_RETRIES) from exc
    if allocation.status == Allocation.Status.PROVISIONING:
        # Kubernetes backend: the claim and its holder pod are applied; watch for the scheduler's result.
        await_claim_allocation_task.apply_async((allocation_id,), countdown=kube_sync.poll_delay(0))


@shared_task(bind=True, acks_late=True, **{**KUBE_RETRY, "max_retries": 1000})
def await_claim_allocation_task(self: Any, allocation_id: int) -> None:
    """Polls the claim until the scheduler has allocated it; the service bounds the wait in time."""
    progress = kube_sync.sync_claim_allocation(allocation_id=allocation_id)
    if progress == kube_sync.ClaimProgress.WAITING:
        raise self.retry(countdown=kube_sync.poll_delay(self.request.retries))
    if progress == kube_sync.ClaimProgress.REPLAN:
        provision_allocation_task.delay(allocation_id)


@shared_task(acks_late=True, **KUBE_RETRY)
def advance_reconfiguration_task(reconfiguration_id: int) -> None:
    """One step of a static-MIG reconfiguration, then again after FATIA_RECONFIGURATION_POLL_S until it is over
    (each wait inside is bounded by FATIA_RECONFIGURATION_STEP_TIMEOUT_S). Provisioning resumes when it is."""
    progress = reconfigure.advance_reconfiguration(reconfiguration_id=reconfiguration_id)
    if progress == reconfigure.Next.AGAIN:
        advance_reconfiguration_task.delay(reconfiguration_id)
    elif progress == reconfigure.Next.WAIT:
        advance_reconfiguration_task.apply_async((reconfiguration_id,), countdown=settings.FATIA_RECONFIGURATION_POLL_S)
    else:
        allocation_id = reconfigure.allocation_waiting(reconfiguration_id=reconfiguration_id)
        if allocation_id is not None:
            provision_allocation_task.delay(allocation_id)


@shared_task(acks_late=True, **KUBE_RETRY)
def teardown_allocation_task(allocation_id: int) -> None:
    provisioning.teardown_allocation(allocation_id=allocation_id)


@shared_task(acks_late=True, **KUBE_RETRY)
def delete_cluster_objects_task(allocation_id: int) -> None:
    kube_sync.delete_cluster_objects(allocation_id=allocation_id)


@shared_task(acks_late=True, **KUBE_RETRY)
def onboard_tenant_task(tenant_id: int) -> None:
    kube_sync.onboard_tenant(tenant_id=tenant_id)


@shared_task(acks_late=True, **KUBE_RETRY)
def bind_tenant_namespace_task(namespace_id: int) -> None:
    namespace_sync.bind_tenant_namespace(namespace_id=namespace_id)


@shared_task(acks_late=True, **KUBE_RETRY)
def unbind_tenant_namespace_task(name: str) -> None:
    namespace_sync.unbind_tenant_namespace(name=name)


@shared_task(acks_late=True)
def reconcile_cluster_task() -> None:
    """Kubernetes: one reconcile pass (cluster/reconcile.py); the next beat tick retries. Requests whose task was
    lost are requeued by sweep_outbox_task on every backend, whether the cluster answers or not."""
    if settings.FATIA_CLUSTER_BACKEND == "kubernetes":
        reconcile.reconcile_cluster()
        namespace_discovery.discover_labelled_namespaces()
    metric_events.record_pass("reconcile")


@shared_task(acks_late=True, soft_time_limit=50, time_limit=60, **DB_RETRY)
def sweep_outbox_task() -> None:
    """Every FATIA_OUTBOX_SWEEP_S: send again outbox rows due and not done, then requeue requests stuck past
    FATIA_STUCK_REQUEST_S with no outbox row open (a lost chained task). Touches only the database and the broker."""
    outbox.resend_due_messages()
    requeue.sweep_stuck_requests()


@shared_task(acks_late=True, soft_time_limit=240, time_limit=300)
def discover_fleet_task() -> None:
    """Kubernetes: list the cluster and write what fleet discovery finds (allocations/cluster/watcher.py). The
    long-lived `manage.py discover_fleet` does this within a second of each change; this is the safety net for
    when it does not run. A no-op with the simulated backend; the next beat tick retries."""
    if settings.FATIA_CLUSTER_BACKEND == "kubernetes":
        FleetDiscovery().sync_once()


@shared_task(acks_late=True, **DB_RETRY)
def admit_queued_task(pool_id: int) -> None:
    """Room may have freed up in the pool: admit what its queue now fits (services/queue.py)."""
    admission.admit_queued(pool_id=pool_id)


@shared_task(acks_late=True, soft_time_limit=240, time_limit=300, **DB_RETRY)
def admit_all_queued_task() -> None:
    """The queue's slow safety sweep (FATIA_QUEUE_SWEEP_S): one admission pass per pool with a queue."""
    admission.admit_all_queued()


@shared_task(acks_late=True, **DB_RETRY)
def expire_due_leases_task() -> None:
    leases.expire_due_leases()


@shared_task(acks_late=True, **DB_RETRY)
def warn_expiring_leases_task() -> None:
    leases.warn_expiring_leases()


@shared_task(acks_late=True, soft_time_limit=50, time_limit=60, **DB_RETRY)
def reclaim_idle_allocations_task() -> None:
    reclaim.reclaim_idle_allocations()


@shared_task(acks_late=True, soft_time_limit=50, time_limit=60, **DB_RETRY)
def preshape_static_pools_task() -> None:
    preshaping.preshape_static_pools()


@shared_task(acks_late=True, soft_time_limit=50, time_limit=60, **DB_RETRY)
def record_slice_devices_task() -> None:
    reclaim.record_slice_devices()


@shared_task(acks_late=True, **DB_RETRY)
def notify_managers_task(allocation_id: int) -> None:
    notifications.notify_managers_of_pending_request(allocation_id=allocation_id)


@shared_task(acks_late=True, **DB_RETRY)
def notify_requester_task(allocation_id: int) -> None:
    notifications.notify_requester_of_decision(allocation_id=allocation_id)


@shared_task(acks_late=True, **DB_RETRY)
def notify_managers_of_extension_task(extension_id: int) -> None:
    notifications.notify_managers_of_pending_extension(extension_id=extension_id)


@shared_task(acks_late=True, **DB_RETRY)
def notify_requester_of_extension_task(extension_id: int) -> None:
    notifications.notify_requester_of_extension_decision(extension_id=extension_id)


@shared_task(acks_late=True, **DB_RETRY)
def notify_booking_owners_of_extension_task(consent_id: int) -> None:
    notifications.notify_booking_owners_of_extension(consent_id=consent_id)


@shared_task(acks_late=True, **DB_RETRY)
def notify_requester_of_booking_task(booking_id: int) -> None:
    """A booking's decision by e-mail (issue 15)."""
    notifications.notify_requester_of_booking_decision(booking_id=booking_id)


@shared_task(acks_late=True, soft_time_limit=check_runs.SOFT_TIME_LIMIT_S, time_limit=check_runs.TIME_LIMIT_S)
def check_cluster_task() -> None:
    """The admin page's cluster check. Not retried: a cluster that does not answer is what the report says."""
    try:
        check_runs.run_cluster_check()
    except SoftTimeLimitExceeded:
        check_runs.record_unfinished_check()


# Compaction (issue 14; services/compaction.py, services/moves.py): one step per run, the next queued by the step.
# Kubernetes: a step waiting for the scheduler to allocate the move's new claim looks again shortly (the service
# bounds the wait with FATIA_KUBE_ALLOCATION_TIMEOUT_S).
@shared_task(bind=True, acks_late=True, **{**KUBE_RETRY, "max_retries": 1000})
def advance_move_plan_task(self: Any, plan_id: int) -> None:
    if moves.step_move_plan(plan_id=plan_id).wait:
        raise self.retry(countdown=kube_sync.poll_delay(self.request.retries))


@shared_task(acks_late=True, **DB_RETRY)
def notify_move_task(move_id: int, phase: str) -> None:
    move_mail.notify_owner_of_move(move_id=move_id, phase=phase)


@shared_task(acks_late=True, soft_time_limit=50, time_limit=60, **DB_RETRY)
def compact_pools_task() -> None:
    compaction.compact_pools()


@shared_task(acks_late=True, soft_time_limit=50, time_limit=60, **DB_RETRY)
def run_due_bookings_task() -> None:
    """Bookings (issue 15): start those whose window began, settle those whose request is over. Idempotent."""
    bookings.run_due_bookings()


@shared_task(acks_late=True, **DB_RETRY)
def reclaim_borrowed_task(allocation_id: int) -> None:
    """Cohorts (issue 15): take one borrowed allocation back if its notice is due (grace 0: queued at notice)."""
    cohort_reclaim.reclaim_borrowed(allocation_id=allocation_id)


@shared_task(bind=True, acks_late=True, **DB_RETRY)
def hand_over_notices_task(self: Any, allocation_id: int) -> None:
    """Cohorts (issue 15): a withdrawn lender's notices go to waiting lenders whose room they make, else are called
    off (services/cohort_handover.hand_over_withdrawn). A notice passed over because another transaction held its
    allocation is tried again shortly; past the retries the outbox sends the task again."""
    cohort_handover.hand_over_withdrawn(lender_id=allocation_id)
    if cohort_handover.notices_left(allocation_id):
        raise self.retry(countdown=1)


@shared_task(acks_late=True, soft_time_limit=50, time_limit=60, **DB_RETRY)
def reclaim_due_borrowed_task() -> None:
    """Cohorts (issue 15): the minute sweep that takes back borrowed allocations whose grace is over."""
    cohort_reclaim.reclaim_due_borrowed()


@shared_task(acks_late=True, soft_time_limit=50, time_limit=60, **DB_RETRY)
def admit_due_holds_task() -> None:
    """Admission (issue 14): the minute step that places held requests past their bound (allocations/admission/)."""
    admit_due_holds()


# The outbox's bookkeeping: a task that returned has done what the rows open when it started asked for; a change
# committed while it ran keeps its row and gets a run of its own. A failing query here is logged by Celery and
# costs only a resend.
@task_prerun.connect
def _note_outbox_rows(task: Task[Any, Any] | None = None, args: Any = None, **_: Any) -> None:
    if task is not None and task.name.startswith("allocations."):
        task.request.update(outbox_rows=outbox.open_message_ids(task.name, list(args or ())))


@task_success.connect
def _mark_outbox_done(sender: Task[Any, Any] | None = None, **_: Any) -> None:
    if sender is not None:
        outbox.mark_done(getattr(sender.request, "outbox_rows", None) or [])
