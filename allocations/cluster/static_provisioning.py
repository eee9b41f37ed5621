"""Provisioning in a static-agent pool: pin a free pre-created instance, or have the layout changed first.

Called by sync.start_provisioning under the allocation's and the pool's locks. When a free MIG device of the
profile fits (static_placement.choose_static finds a plan without operations), the placements are recorded with
the device's uuid and the request goes on as on DynamicMIG: the claim pins `uuid` (and the profile and GPU), the
holder pod makes the scheduler allocate it. Otherwise a reconfiguration of the chosen GPU is requested
(services/reconfiguration.py) and the request stays APPROVED, saying so, until the reconfiguration is over;
its task then provisions the request again. A request whose reconfiguration failed is not planned into a
second one: it fails with the reason, its quota given back.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from allocations.cluster.static_placement import choose_static
from allocations.models import Allocation, MigReconfiguration, NodePool, SlicePlacement
from allocations.services.lifecycle import fail_locked_allocation, start_claiming
from allocations.services.reconfiguration import queue_advance, request_reconfiguration

Status = Allocation.Status


def start_static_provisioning(*, allocation: Allocation, pool: NodePool) -> Allocation:
    """APPROVED -> PROVISIONING on a free pre-created instance, or APPROVED (waiting for a reconfiguration), or
    FAILED (no room even after a reconfiguration; or the one made for it failed). Caller holds the allocation's
    and the pool's locks, in that order."""
    live = MigReconfiguration.objects.filter(allocation=allocation, status__in=MigReconfiguration.LIVE).first()
    if live is not None:
        # A redelivered task, or the stuck-request sweep: the reconfiguration's task provisions it when it is over.
        # A living task moves a step within the step timeout; past it, its message was lost: start it again.
        started = live.step_started_at or live.created_at
        lost_after = timedelta(
            seconds=settings.FATIA_RECONFIGURATION_STEP_TIMEOUT_S + 10 * settings.FATIA_RECONFIGURATION_POLL_S
        )
        if timezone.now() - started > lost_after:
            queue_advance(live.pk)
        return allocation
    choice = choose_static(pool=pool, profile=allocation.profile, count=allocation.count)
    if choice is None:
        return fail_locked_allocation(
            allocation,
            f"No room in {pool.name} for {allocation.count} x {allocation.profile} on one GPU, even after "
            "changing a GPU's MIG layout; the quota was given back. Try fewer slices or a smaller profile.",
        )
    if choice.plan.operations:
        failed = MigReconfiguration.objects.filter(allocation=allocation, status=MigReconfiguration.Status.FAILED)
        last = failed.order_by("-pk").first()
        if last is not None:
            return fail_locked_allocation(
                allocation,
                f"Changing the MIG layout of {last.gpu} for this request failed: {last.error} "
                "The quota was given back.",
            )
        reconfiguration = request_reconfiguration(
            gpu_id=choice.gpu.pk,
            operations=choice.plan.operations,
            reason=f"request #{allocation.pk}: {allocation.count} x {allocation.profile}",
            allocation_id=allocation.pk,
        )
        allocation.status_message = (
            f"Waiting for a MIG layout change on {choice.gpu} ({len(choice.plan.operations)} steps, "
            f"reconfiguration #{reconfiguration.pk}); provisioning resumes when the node publishes it."
        )
        allocation.save(update_fields=["status_message", "updated_at"])
        return allocation
    slices = choice.slices(allocation.profile)
    start_claiming(
        allocation=allocation, slices=slices, audit={"pinned": [choice.existing[s.start][0] for s in slices]}
    )
    for planned in slices:
        SlicePlacement.objects.filter(allocation=allocation, gpu_id=planned.gpu_id, start=planned.start).update(
            mig_uuid=choice.existing[planned.start][0]
        )
    return allocation
