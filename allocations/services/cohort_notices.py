"""Notice to borrowers (issue 15): mark borrowed allocations to be taken back for a lender, or call it off.

A lender's request within its guarantee that cannot be admitted (its cohort lent that guarantee away, or the
pool is full while other members' borrowed slices occupy it) picks borrowed allocations of other members of the
cohort in the same pool (allocations/cohorts/reclaim.py: those whose release lets the lender's request be placed,
fewest then youngest; when none does, least used then youngest first, enough slices), and gives their owners
notice: `reclaim_notice_at` now, `reclaim_at` after the cohort's grace, `reclaimed_for` the lender's request;
inbox and e-mail; audited `reclaim_notice`. services/cohort_reclaim.py takes them back when due. The room their
release plans for the lender is held for it meanwhile (allocations/cohorts/fence.py; audited `reclaim_room`).

Room for a lender in a pool that compacts (services/compaction.py), when no set of borrowed allocations taken back
makes a place its profile fits: allocations/cohorts/rescue.py `plan_room` takes back those of one GPU together with
at most two moves of movable slices off it; the notices are given and the moves started at once as the lender's
rescue (compaction.rescue_lender, once per request), so they are done within the grace.

Called while the lender's allocation and its pool are locked: the borrowed allocations are taken with SKIP LOCKED
(services/locks.py), so a busy one is passed over rather than waited for.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from allocations.cohorts.accounting import Shortfall
from allocations.cohorts.fence import plan_room as room_after_release
from allocations.cohorts.fence import planned_room, pool_fences, scheduler_picks_slots, unfenced
from allocations.cohorts.reclaim import NOTHING, Candidate, pick_fitting, pick_reclaims
from allocations.cohorts.rescue import plan_room
from allocations.mig.defrag import DefragPlan
from allocations.mig.fleet import PlacementRequest
from allocations.models import Allocation, Cohort, NodePool, Notification, Quota
from allocations.nodeagent.usage import used_slice_hours
from allocations.placement import PoolLayout, read_pool
from allocations.services.compaction import may_rescue, movable_allocation_ids, rescue_lender
from allocations.services.lender_room import hold_room
from allocations.services.notifications import notify_users
from allocations.services.outbox import enqueue_task
from tenants.services import record_audit_event

logger = logging.getLogger(__name__)

Status = Allocation.Status
RECLAIM_TASK = "allocations.tasks.reclaim_borrowed_task"
# A withdrawn lender's notices are handed over (or called off) by this task: services/cohort_handover.py.
HANDOVER_TASK = "allocations.tasks.hand_over_notices_task"
# Only slices that run can be taken back; queued ones hold no borrowed part (services/cohorts.py).
RECLAIMABLE = (Status.PROVISIONING, Status.ACTIVE)
USE_WINDOW = timedelta(hours=1)


def _used_fractions(rows: list[Allocation], now: datetime) -> dict[int, float]:
    """Share of observed slice-time in use over the last hour, per allocation the agents report on."""
    windows = {a.pk: (max(a.activated_at or a.created_at, now - USE_WINDOW), now) for a in rows}
    fractions = {}
    for allocation_id, by_hour in used_slice_hours(windows).items():
        observed = sum(h.observed for h in by_hour.values())
        if observed > 0:
            fractions[allocation_id] = sum(h.used for h in by_hour.values()) / observed
    return fractions


def give_notice(
    *, lender: Allocation, cohort: Cohort, need: Shortfall, whole: bool, now: datetime | None = None
) -> list[Allocation]:
    """Mark enough borrowed allocations of the cohort's other members in its pool for `lender`; the marked.
    `whole`: each counts for all its slices (room in the pool), else for its borrowed part (the cohort's balance).
    Grace 0 queues the taking back at once (through the outbox); otherwise the beat's sweep takes them when due."""
    now = now or timezone.now()
    members = Quota.objects.filter(cohort=cohort, pool_id=cohort.pool_id).values_list("tenant_id", flat=True)
    rows = list(
        Allocation.objects.select_for_update(no_key=True, of=("self",), skip_locked=True)
        .filter(pool_id=cohort.pool_id, tenant_id__in=list(members), status__in=RECLAIMABLE)
        .filter(reclaimed_for__isnull=True, reclaim_at__isnull=True)
        .filter(Q(borrowed_compute_slices__gt=0) | Q(borrowed_memory_slices__gt=0))
        .exclude(tenant_id=lender.tenant_id)
        .order_by("pk")
    )
    if not rows and not whole:
        return []  # room, though, may come from moves alone (`_choose`)
    used = _used_fractions(rows, now) if rows else {}
    candidates = [
        Candidate(
            allocation_id=a.pk,
            compute=a.compute_slices if whole else a.borrowed_compute_slices,
            memory=a.memory_slices if whole else a.borrowed_memory_slices,
            started_at=a.activated_at or a.created_at,
            used_fraction=used.get(a.pk),
        )
        for a in rows
    ]
    by_id = {a.pk: a for a in rows}
    chosen, moves = _choose(lender, candidates, need, whole=whole)
    marked = [by_id[c.allocation_id] for c in chosen]
    reclaim_at = now + timedelta(minutes=cohort.reclaim_grace_minutes)
    for allocation in marked:
        allocation.reclaim_notice_at = now
        allocation.reclaim_at = reclaim_at
        allocation.reclaimed_for = lender
        allocation.save(update_fields=["reclaim_notice_at", "reclaim_at", "reclaimed_for", "updated_at"])
        record_audit_event(
            actor=None,
            verb="reclaim_notice",
            obj=allocation,
            tenant_id=allocation.tenant_id,
            after={
                "reclaim_at": reclaim_at.isoformat(),
                "for": lender.pk,
                "cohort": cohort.name,
                "borrowed_compute_slices": allocation.borrowed_compute_slices,
            },
        )
        _tell_owner(allocation, cohort=cohort, reclaim_at=reclaim_at)
        if cohort.reclaim_grace_minutes == 0:
            enqueue_task(RECLAIM_TASK, allocation.pk)
    if moves is not None:
        rescue_lender(lender, layout=moves[0], plan=moves[1])
    _hold_room(lender, marked, moves)
    return marked


def _hold_room(lender: Allocation, marked: list[Allocation], moves: tuple[PoolLayout, DefragPlan] | None) -> None:
    """Fence the room the marked allocations' release (and the rescue's moves, if any) plans for the lender
    (allocations/cohorts/fence.py), so that nothing else is placed there meanwhile; audited with the notices."""
    if not marked and moves is None:
        return
    if moves is not None and moves[1].placement is not None:
        # The moves make the room (with or without notices): the slot the rescue plan planned for the lender is
        # the one to keep; with moves alone it holds while the plan applies or is done (cohorts/fence.py).
        slots = planned_room(lender.pool, moves[0].by_position, moves[1].placement)
    else:
        slots = room_after_release(lender, [a.pk for a in marked])
    hold_room(lender, slots)


def _choose(
    lender: Allocation, candidates: list[Candidate], need: Shortfall, *, whole: bool
) -> tuple[list[Candidate], tuple[PoolLayout, DefragPlan] | None]:
    """Slot-aware first: the borrowed allocations whose release lets the lender's request be placed (and, for the
    cohort's balance, covers the shortfall; on Kubernetes DynamicMIG, placed where the driver's first fit puts
    it); for room (`whole`) in a pool that compacts, when no such set exists, a set taken back together with at
    most two moves of movable slices (allocations/cohorts/rescue.py `plan_room`; the moves are returned, to
    start); when none does (or a shared pool, placed by memory), by count as before. For room, fitting is the
    whole need: counting the request's slices again would take more. All of it on the pool without the GPUs
    other lenders' rooms are on (cohorts/fence.unfenced): neither the room nor a move lands in theirs."""
    pool = lender.pool
    if not pool.is_shared:
        request = PlacementRequest(profile=lender.profile, count=lender.count, pool=pool.slug)
        layout = read_pool(pool)
        fleet = unfenced(layout.fleet, pool_fences(pool.pk, besides=lender.pk))
        if whole and may_rescue(lender):
            room = plan_room(fleet, request, candidates, _movable(pool))
            if room is not None:
                return room.reclaims, None if room.defrag is None else (layout, room.defrag)
        else:
            fitting = pick_fitting(
                fleet, request, candidates, NOTHING if whole else need, driver=scheduler_picks_slots(pool)
            )
            if fitting:
                return fitting, None
    return pick_reclaims(candidates, need), None


def _movable(pool: NodePool) -> set[str]:
    """Owners (as in the fleet) of the slices compaction may move, less those on notice: they are leaving."""
    leaving = set(Allocation.objects.filter(pool=pool).exclude(reclaim_at=None).values_list("pk", flat=True))
    return {str(pk) for pk in movable_allocation_ids(pool) - leaving}


def _what(allocation: Allocation) -> str:
    return f"{allocation.count} × {allocation.profile} in {allocation.pool.name}"


def _tell_owner(allocation: Allocation, *, cohort: Cohort, reclaim_at: datetime) -> None:
    user = allocation.requested_by
    link = reverse("request-detail", args=[allocation.pk])
    text = (
        f"Request #{allocation.pk} ({_what(allocation)}) runs on slices borrowed from cohort {cohort.name}; a "
        f"tenant that lent them needs its guarantee back. They will be taken back at {reclaim_at:%Y-%m-%d %H:%M} "
        "UTC and the request put back in the queue."
    )
    if user.email:
        send_mail(
            subject=f"[Fatia] Request #{allocation.pk} runs on borrowed slices: taken back at {reclaim_at:%H:%M} UTC",
            message=(
                f"Hello {user.get_username()},\n\n{text}\nSave your work before then.\n\n"
                f"The request: {settings.SITE_URL}{link}\n"
            ),
            from_email=settings.DEFAULT_FROM_EMAIL,
            recipient_list=[user.email],
        )
    else:
        logger.info("allocation %s: requester has no email address; reclaim notice in the inbox only", allocation.pk)
    notify_users(recipient_ids=[user.pk], kind=Notification.Kind.BORROW_RECLAIM, text=text, link=link, actor=None)


def clear_notice(allocation: Allocation, *, why: str) -> None:
    """Call off the notice on one locked allocation and tell its owner."""
    lender_id = allocation.reclaimed_for_id
    allocation.reclaim_notice_at = None
    allocation.reclaim_at = None
    allocation.reclaimed_for = None
    allocation.save(update_fields=["reclaim_notice_at", "reclaim_at", "reclaimed_for", "updated_at"])
    record_audit_event(
        actor=None,
        verb="reclaim_cancel",
        obj=allocation,
        tenant_id=allocation.tenant_id,
        after={"for": lender_id, "why": why},
    )
    notify_users(
        recipient_ids=[allocation.requested_by_id],
        kind=Notification.Kind.BORROW_RECLAIM,
        text=f"Request #{allocation.pk} ({_what(allocation)}) keeps its borrowed slices: {why}.",
        link=reverse("request-detail", args=[allocation.pk]),
        actor=None,
    )


def cancel_notices_for(lender: Allocation, *, why: str) -> int:
    """The lender's request was withdrawn or admitted otherwise: call off the notices given for it. One held by
    another transaction is passed over; the due step checks the lender again before taking anything back."""
    rows = list(
        Allocation.objects.select_for_update(no_key=True, of=("self",), skip_locked=True)
        .filter(reclaimed_for=lender, status__in=RECLAIMABLE, reclaim_at__isnull=False)
        .select_related("pool")
        .order_by("pk")
    )
    for allocation in rows:
        clear_notice(allocation, why=why)
    drop_room(lender)  # the fence ends with the wait
    return len(rows)


def hand_over_later(lender: Allocation) -> None:
    """The lender's request was withdrawn: its fence ends now, and its notices are handed to waiting lenders whose
    room they make, or called off, by HANDOVER_TASK after commit (cohort_handover.hand_over_withdrawn). Not here:
    the withdrawal holds the lender's quota row, and the waiting lenders' rows come before quota in the lock order
    (services/locks.py). Until the task runs the notices stand; the due step leaves them to it. Caller holds the
    lender's lock."""
    drop_room(lender)
    if Allocation.objects.filter(reclaimed_for=lender, status__in=RECLAIMABLE, reclaim_at__isnull=False).exists():
        enqueue_task(HANDOVER_TASK, lender.pk)


def drop_room(lender: Allocation) -> None:
    """Hold no room for the lender any more (allocations/cohorts/fence.py). Caller holds the lender's lock."""
    if lender.reclaim_room:
        held = lender.reclaim_room
        lender.reclaim_room = []
        lender.save(update_fields=["reclaim_room", "updated_at"])
        record_audit_event(
            actor=None, verb="reclaim_room", obj=lender, tenant_id=lender.tenant_id, before={"held": held}
        )
