"""Reads of a pool's queue (issue 15): its admission order, the leases that will free room, position and ETA.

Selectors, not services: nothing here writes. The admission pass (services/queue.py), the starvation bound
(queue_reservation.py), the pages, the API and the CLI all read the queue through these functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from allocations.admission.hold import is_held
from allocations.models import Allocation, NodePool, Quota
from allocations.placement import POLICY, read_pool
from allocations.queue_eta import Estimate, Lease, QueuedAsk, estimate_starts
from allocations.queue_order import Held, Waiting, decayed_usage, fair_order

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User

Status = Allocation.Status

# Usage older than this many half-lives weighs under 0.1 %: not worth reading.
HISTORY_HALF_LIVES = 10


def tenant_usage(pool: NodePool, *, now: datetime) -> dict[int, float]:
    """Per tenant, its decayed usage of the pool in compute slices (queue_order.decayed_usage)."""
    half_life = float(settings.FATIA_QUEUE_HALF_LIFE_S)
    since = now - timedelta(seconds=half_life * HISTORY_HALF_LIVES)
    rows = (
        Allocation.objects.filter(pool=pool, activated_at__isnull=False)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gte=since))
        .values_list("tenant_id", "compute_slices", "activated_at", "ended_at")
    )
    return decayed_usage(
        (Held(tenant, compute, start, end) for tenant, compute, start, end in rows if start is not None),
        now=now,
        half_life_s=half_life,
    )


def queued_in_order(pool: NodePool, *, now: datetime | None = None) -> list[Allocation]:
    """The pool's QUEUED requests in admission order: fair across tenants, priority then FIFO within one."""
    now = now or timezone.now()
    queued = {
        a.pk: a
        for a in Allocation.objects.filter(pool=pool, status=Status.QUEUED).select_related("tenant", "requested_by")
    }
    if not queued:
        return []
    quota = dict(Quota.objects.filter(pool=pool).values_list("tenant_id", "compute_slices_limit"))
    order = fair_order([waiting_of(a) for a in queued.values()], usage=tenant_usage(pool, now=now), quota=quota)
    return [queued[w.allocation_id] for w in order]


def waiting_of(allocation: Allocation) -> Waiting:
    """A queued request as the pure ordering rules (queue_order.py) see it."""
    return Waiting(
        allocation.pk,
        allocation.tenant_id,
        allocation.priority,
        allocation.queued_at or allocation.created_at,
        allocation.compute_slices,
    )


def pool_leases(pool: NodePool, *, now: datetime) -> list[Lease]:
    """When each live request of the pool gives its slots back: its lease end; now for one being released.
    Requests still provisioning (no lease yet) are left out: they stay."""
    rows = Allocation.objects.filter(pool=pool, status__in=(Status.ACTIVE, Status.RELEASING)).values_list(
        "pk", "status", "lease_expires_at"
    )
    return [
        Lease(owner=str(pk), ends_at=now if status == Status.RELEASING or ends is None else max(ends, now))
        for pk, status, ends in rows
        if status == Status.RELEASING or ends is not None
    ]


def ask_of(allocation: Allocation) -> QueuedAsk:
    return QueuedAsk(allocation.pk, allocation.profile, allocation.count, allocation.lease_hours)


@dataclass(frozen=True, slots=True)
class QueueEntry:
    allocation: Allocation
    position: int  # 1 = next to be admitted
    estimate: Estimate | None  # None: no lease end frees a layout that fits it


def pool_queue(pool: NodePool, *, now: datetime | None = None) -> list[QueueEntry]:
    """The pool's queue with position and slot-aware estimated start (queue_eta.estimate_starts)."""
    now = now or timezone.now()
    ordered = queued_in_order(pool, now=now)
    if not ordered:
        return []
    estimates = (
        {}
        if pool.is_shared
        else estimate_starts(
            read_pool(pool).fleet,
            leases=pool_leases(pool, now=now),
            queue=[ask_of(a) for a in ordered],
            now=now,
            pool=pool.slug,
            policy=POLICY,
        )
    )
    return [QueueEntry(a, n, _held_estimate(a, estimates.get(a.pk))) for n, a in enumerate(ordered, start=1)]


def _held_estimate(allocation: Allocation, estimate: Estimate | None) -> Estimate | None:
    """A held request (issue 14, allocations/admission/) fits now but waits by choice: it starts when a release
    makes a place that strands nothing, and at the latest at `held_until`; the simulation, which places what fits,
    would say now."""
    if not is_held(allocation) or allocation.held_until is None:
        return estimate
    if estimate is None:
        return Estimate(starts_at=allocation.held_until, node="")
    return Estimate(starts_at=max(estimate.starts_at, allocation.held_until), node=estimate.node)


def visible_queue(
    user: User | AnonymousUser, *, pool: NodePool | None = None, mine: bool = False
) -> list[tuple[QueueEntry, int]]:
    """The queue entries `user` may see (their tenants' requests; every one for admins), each with the length of
    its pool's queue: positions count every tenant's requests, but other tenants' rows are not shown."""
    visible = Allocation.objects.for_user(user).filter(status=Status.QUEUED)
    if pool is not None:
        visible = visible.filter(pool=pool)
    if mine:
        visible = visible.filter(requested_by_id=user.pk)
    wanted = set(visible.values_list("pk", flat=True))
    if not wanted:
        return []
    pools = NodePool.objects.filter(allocations__pk__in=wanted).distinct().order_by("name")
    out: list[tuple[QueueEntry, int]] = []
    for each in pools:
        entries = pool_queue(each)
        out += [(e, len(entries)) for e in entries if e.allocation.pk in wanted]
    return out


def queue_entry_of(allocation: Allocation) -> tuple[QueueEntry, int] | None:
    """A queued request's place in its pool's queue (None when it is not queued)."""
    if allocation.status != Status.QUEUED:
        return None
    entries = pool_queue(allocation.pool)
    return next(((e, len(entries)) for e in entries if e.allocation.pk == allocation.pk), None)
