"""Notices handed over (issue 15): a lender admitted elsewhere passes its notices to a waiting lender that needs them.

When a lender's request is admitted before its notices are carried out (a release made room elsewhere), its
notices were called off (cohort_notices.cancel_notices_for). But another lender of the cohort may be waiting on
that very room: one that asked while every borrowed slice its room needed was already on notice had no notice of
its own to give (give_notice takes only slices not on notice), and once the first lender's notices were called
off it gave new ones, a new grace: its wait went past grace + one provisioning time (the fairness bench, greedy
demand: 40 min). Now the notices go to the waiting lenders whose room their release makes
(allocations/cohorts/handover.py `choose_heirs`, the rule the bench runs), with the deadline the owners were told
kept, the room held for the new lender (cohorts/fence.py); only the rest are called off. Audited
`reclaim_handover` on each borrowed allocation handed over.

Called by the admission pass (services/queue.py, `hand_over_admitted`) for the request it just admitted: it holds the
pool's queued requests' locks (an heir is one of them, and only those) and the pool's; the borrowed allocations are
taken with SKIP LOCKED (services/locks.py), all of them or none: when another transaction holds one, the pass leaves
the notices standing and hands them over after commit, as for a withdrawn lender (session 13; before, it handed over
and called off the rest without the held one, which an heir could need together with them).

A lender *withdrawn* hands its notices over too, but not inside the withdrawal: that holds the lender's quota row,
and an heir's row comes before quota in the lock order. The withdrawal queues `hand_over_withdrawn` through the
outbox (cohort_notices.hand_over_later); it takes the same locks as an admission pass, in the same order.
"""

from __future__ import annotations

from django.db import transaction

from allocations.cohorts.fence import plan_room as room_after_release
from allocations.cohorts.fence import pool_fences, scheduler_picks_slots, unfenced
from allocations.cohorts.handover import Heir, choose_heirs
from allocations.cohorts.reclaim import Candidate
from allocations.mig.fleet import PlacementRequest
from allocations.models import Allocation, Quota
from allocations.placement import read_pool
from allocations.queue_state import queued_in_order
from allocations.services.cohort_notices import RECLAIMABLE, cancel_notices_for, hand_over_later
from allocations.services.compaction import rescue_applying
from allocations.services.lender_room import hold_room
from allocations.services.locks import lock_pool
from tenants.services import record_audit_event

Status = Allocation.Status


def _heirs(placed: Allocation, among: set[int] | None) -> list[Allocation]:
    """The pool's queued requests, in admission order, that may take notices over: members of the placed
    request's cohort asking within their guarantee (not borrowing), with no notice of their own standing and no
    rescue's moves applying (services/cohort_reclaim.reclaim_room_for's lender); only those in `among` (the rows
    the caller locked) unless it is None."""
    pool = placed.pool
    quotas = {q.tenant_id: q for q in Quota.objects.filter(pool=pool, cohort__pool_id=pool.pk)}
    mine = quotas.get(placed.tenant_id)
    if mine is None:
        return []
    noticed = set(
        Allocation.objects.filter(pool=pool, reclaim_at__isnull=False, status__in=RECLAIMABLE)
        .exclude(reclaimed_for=None)
        .values_list("reclaimed_for_id", flat=True)
    )
    heirs = []
    for allocation in queued_in_order(pool):
        quota = quotas.get(allocation.tenant_id)
        if (
            allocation.pk == placed.pk
            or (among is not None and allocation.pk not in among)
            or allocation.pk in noticed
            or quota is None
            or quota.cohort_id != mine.cohort_id
            or allocation.borrowed_compute_slices
            or allocation.borrowed_memory_slices
            or quota.compute_slices_used > quota.compute_slices_limit
            or quota.memory_slices_used > quota.memory_slices_limit
            or rescue_applying(allocation)
        ):
            continue
        heirs.append(allocation)
    return heirs


def hand_over_notices(placed: Allocation, *, why: str, among: set[int] | None = None) -> int:
    """`placed` (a lender) no longer needs its notices: hand those whose release makes room for a waiting lender
    (one of `among`, when given) to it, deadline kept, and call the rest off with `why`. How many were handed
    over."""
    pool = placed.pool
    rows = list(
        Allocation.objects.select_for_update(no_key=True, of=("self",), skip_locked=True)
        .filter(reclaimed_for=placed, status__in=RECLAIMABLE, reclaim_at__isnull=False)
        .order_by("pk")
    )
    heirs = _heirs(placed, among) if rows and not pool.is_shared else []
    handed: dict[int, list[Candidate]] = {}
    if heirs:
        layout = read_pool(pool)
        # Not on a GPU another lender's room is on (the placed request's own room is let go).
        fleet = unfenced(layout.fleet, pool_fences(pool.pk, besides=placed.pk))
        candidates = [
            Candidate(a.pk, a.compute_slices, a.memory_slices, a.activated_at or a.created_at, tenant_id=a.tenant_id)
            for a in rows
        ]
        asks = [
            Heir(h.pk, h.tenant_id, PlacementRequest(profile=h.profile, count=h.count, pool=pool.slug)) for h in heirs
        ]
        handed = choose_heirs(fleet, candidates, asks, driver=scheduler_picks_slots(pool))
    by_id = {a.pk: a for a in rows}
    heir_by_id = {h.pk: h for h in heirs}
    count = 0
    for heir_id, chosen in handed.items():
        heir = heir_by_id[heir_id]
        for candidate in chosen:
            allocation = by_id[candidate.allocation_id]
            allocation.reclaimed_for = heir
            allocation.save(update_fields=["reclaimed_for", "updated_at"])
            record_audit_event(
                actor=None,
                verb="reclaim_handover",
                obj=allocation,
                tenant_id=allocation.tenant_id,
                before={"for": placed.pk},
                after={
                    "for": heir.pk,
                    "reclaim_at": allocation.reclaim_at.isoformat() if allocation.reclaim_at else None,
                },
            )
            count += 1
        hold_room(heir, room_after_release(heir, [c.allocation_id for c in chosen]))  # as give_notice holds one
    cancel_notices_for(placed, why=why)  # the rest, and the placed request's room
    return count


@transaction.atomic
def hand_over_withdrawn(*, lender_id: int) -> int:
    """The notices still standing for a withdrawn lender (or one admitted while one of them was held: see
    `hand_over_admitted`) go to the waiting lenders whose room they make, deadline kept, audited `reclaim_handover`;
    the rest are called off (`reclaim_cancel`). How many were handed over. Run by hand_over_notices_task after the
    withdrawal (or the admission) commits.

    Locks as an admission pass does (services/queue.admit_queued): the pool's queued requests and the lender, in pk
    order, then the pool; the borrowed allocations with SKIP LOCKED, all of them or nothing is done (the task runs
    again while `notices_left`). Idempotent: a second run finds no notice left for the lender. A lender waiting
    again (it cannot: withdrawn is final) would keep its notices."""
    pool_id = Allocation.objects.filter(pk=lender_id).values_list("pool_id", flat=True).first()
    if pool_id is None:
        return 0  # no such request: nothing stands for it
    queued = Allocation.objects.filter(pool_id=pool_id, status=Status.QUEUED).values_list("pk", flat=True)
    locked = set(
        Allocation.objects.select_for_update(no_key=True, of=("self",))
        .filter(pk__in=[lender_id, *queued])
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    lock_pool(pool_id=pool_id)
    lender = Allocation.objects.select_related("pool").get(pk=lender_id)
    if lender.status in (Status.APPROVED, Status.QUEUED):
        return 0
    if not _all_free(lender):
        return 0  # all or none: the task runs again (notices_left)
    return hand_over_notices(lender, why=_why(lender), among=locked - {lender_id})


def hand_over_admitted(placed: Allocation, *, among: set[int]) -> int:
    """The admission pass admitted `placed` (a lender, perhaps): its notices go to a waiting lender of `among` (the
    queued rows the pass holds) whose room they make, deadline kept; the rest are called off. All or none, as for a
    withdrawn lender: when another transaction holds one of the borrowed allocations (a due sweep taking it back, its
    owner releasing it), choosing without it could call off a notice an heir needs together with it, so the pass
    leaves them all standing and hands them over after commit (`hand_over_withdrawn`, through the outbox, as a
    withdrawal does); its room ends now. How many were handed over now. Caller holds `placed`'s lock and the pool's."""
    if not _all_free(placed):
        hand_over_later(placed)
        return 0
    return hand_over_notices(placed, why=_why(placed), among=among - {placed.pk})


def _all_free(lender: Allocation) -> bool:
    """Lock the borrowed allocations whose notices stand for `lender` (SKIP LOCKED: never waits); whether no other
    transaction held any of them."""
    standing = Allocation.objects.filter(reclaimed_for=lender, status__in=RECLAIMABLE, reclaim_at__isnull=False)
    free = standing.select_for_update(no_key=True, of=("self",), skip_locked=True).order_by("pk").values_list("pk")
    return len(free) == standing.count()


def _why(lender: Allocation) -> str:
    """What the owners of the notices called off are told."""
    if lender.status == Status.WITHDRAWN:
        return f"request #{lender.pk} it was taken back for was withdrawn"
    return f"request #{lender.pk} it was taken back for started without it"


def notices_left(lender_id: int) -> bool:
    """Whether notices still stand for a lender that no longer waits. After `hand_over_withdrawn` they do only when
    it found one of their allocations held by another transaction (SKIP LOCKED) and did nothing, so the task runs
    it again rather than leave them to the due step, which would call them off."""
    standing = Allocation.objects.filter(reclaimed_for_id=lender_id, status__in=RECLAIMABLE, reclaim_at__isnull=False)
    return standing.exclude(reclaimed_for__status__in=(Status.APPROVED, Status.QUEUED)).exists()
