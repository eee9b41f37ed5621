"""What-if: "if tenant T's quota doubles (or is set to C/M)".

A quota bounds what a tenant may hold; the pool's free layouts bound what anyone can place. For each offered
profile the answer gives how many more slices T could hold now under the old and the new limits, and which of
the two bounds it: ``quota`` (more room in the pool than T may take), ``capacity`` (T may take more than fits)
or ``both``.

T's waiting requests come in two kinds (docs/queue.md): QUEUED ones already hold their quota and wait for room,
so a new quota only moves them in the fair order (T's share, usage / quota, falls); PENDING ones the quota
leaves short wait for quota, and the new limits say how many of them (in the order they were made) it would
cover and how many of those the free layouts would then place. The queue is replayed in admission order with
the old and the new quota, so the effect on the other tenants' queued requests is measured, not guessed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from allocations.mig.catalog import GpuModel
from allocations.mig.demand import DemandMix
from allocations.mig.fleet import Fleet
from allocations.queue_order import Waiting, fair_order

from .replay import Ask, Replay, capacity


@dataclass(frozen=True, slots=True)
class Limits:
    compute: int
    memory: int


@dataclass(frozen=True, slots=True)
class TenantQuota:
    """T's quota row in the pool: limits, what it holds (QUEUED included) and its per-profile caps."""

    limits: Limits
    compute_used: int
    memory_used: int
    caps: Mapping[str, int]
    held: Mapping[str, int]  # slices held per profile


@dataclass(frozen=True, slots=True)
class Queued:
    """A QUEUED request: what it asks for and what the fair order needs to know of it."""

    ask: Ask
    waiting: Waiting


@dataclass(frozen=True, slots=True)
class ProfileRoom:
    profile: str
    fits_now: int  # the pool's free layouts, each profile alone
    quota_before: int  # more slices the old quota allows
    quota_after: int
    more_before: int  # min of the two: what T could hold more now
    more_after: int
    bound_before: str  # "quota", "capacity" or "both"
    bound_after: str


@dataclass(frozen=True, slots=True)
class QuotaAnswer:
    tenant_id: int
    before: Limits
    after: Limits
    rooms: list[ProfileRoom]
    compute_free_in_pool: int
    memory_free_in_pool: int
    share_before: float  # T's decayed usage / compute quota (lower goes first); inf without quota
    share_after: float
    queued: int  # T's QUEUED requests
    queued_admitted_before: int  # of them, placed now in the admission order under the old / new quota
    queued_admitted_after: int
    first_position_before: int | None  # T's first request's place in the admission order (1 = next)
    first_position_after: int | None
    others_queued: int
    others_admitted_before: int
    others_admitted_after: int
    pending: int  # T's PENDING requests
    pending_within_quota_before: int  # of them (oldest first), how many the limits cover
    pending_within_quota_after: int
    pending_placed_after: int  # of those the new limits cover, how many the free layouts place now


def quota_room(model: GpuModel, quota: TenantQuota, limits: Limits, profile: str) -> int:
    """More slices of ``profile`` that ``limits`` let T hold, given what it holds and its cap."""
    spec = model.profile(profile)
    free_compute = limits.compute - quota.compute_used
    free_memory = limits.memory - quota.memory_used
    room = min(free_compute // max(spec.compute_slices, 1), free_memory // max(spec.memory_slices, 1))
    cap = quota.caps.get(profile)
    if cap is not None:
        room = min(room, cap - quota.held.get(profile, 0))
    return max(room, 0)


def _bound(quota: int, fits: int) -> str:
    if quota == fits:
        return "both"
    return "quota" if quota < fits else "capacity"


def _share(usage: float, limit: int) -> float:
    return usage / limit if limit > 0 else math.inf


def _within(model: GpuModel, quota: TenantQuota, limits: Limits, pending: Sequence[Ask]) -> list[Ask]:
    """The pending asks, oldest first, that fit the limits one after the other (each charged as approved)."""
    compute, memory = quota.compute_used, quota.memory_used
    held = dict(quota.held)
    covered = []
    for ask in pending:
        spec = model.profile(ask.profile)
        c, m = spec.compute_slices * ask.count, spec.memory_slices * ask.count
        cap = quota.caps.get(ask.profile)
        if compute + c > limits.compute or memory + m > limits.memory:
            break  # approval follows the order requests were made in: a later one does not jump a blocked one
        if cap is not None and held.get(ask.profile, 0) + ask.count > cap:
            break
        compute, memory = compute + c, memory + m
        held[ask.profile] = held.get(ask.profile, 0) + ask.count
        covered.append(ask)
    return covered


def what_if_quota(
    fleet: Fleet,
    *,
    pool: str,
    offered: Sequence[str],
    model: GpuModel,
    tenant_id: int,
    quota: TenantQuota,
    new_limits: Limits,
    queue: Sequence[Queued],
    usage: Mapping[int, float],
    quotas: Mapping[int, int],
    pending: Sequence[Ask],
    demand: DemandMix,
) -> QuotaAnswer:
    """T's room, waiting requests and the others' queue under T's current and new limits.

    ``quotas``: every tenant's compute limit in the pool (the fair order's denominator); ``usage``: their decayed
    usage (allocations/queue_order.py); ``pending``: T's PENDING requests, oldest first."""
    now = capacity(fleet, offered)
    rooms = []
    for profile in offered:
        fits = now.fits[profile]
        q_before = quota_room(model, quota, quota.limits, profile)
        q_after = quota_room(model, quota, new_limits, profile)
        rooms.append(
            ProfileRoom(
                profile=profile,
                fits_now=fits,
                quota_before=q_before,
                quota_after=q_after,
                more_before=min(q_before, fits),
                more_after=min(q_after, fits),
                bound_before=_bound(q_before, fits),
                bound_after=_bound(q_after, fits),
            )
        )
    by_id = {q.waiting.allocation_id: q for q in queue}
    waitings = [q.waiting for q in queue]
    results = {}
    for name, limit in (("before", quota.limits.compute), ("after", new_limits.compute)):
        order = fair_order(waitings, usage=dict(usage), quota={**quotas, tenant_id: limit})
        replay = Replay(fleet, pool=pool, demand=demand)
        admitted = {a.key for a in replay.place([by_id[w.allocation_id].ask for w in order])}
        mine = [w for w in order if w.tenant_id == tenant_id]
        first = next((n for n, w in enumerate(order, start=1) if w.tenant_id == tenant_id), None)
        results[name] = (
            sum(1 for w in mine if str(w.allocation_id) in admitted),
            sum(1 for w in order if w.tenant_id != tenant_id and str(w.allocation_id) in admitted),
            first,
            replay,
        )
    covered_before = _within(model, quota, quota.limits, pending)
    covered_after = _within(model, quota, new_limits, pending)
    # The queue goes first (it is admitted ahead of anything approved later); then the newly covered requests.
    placed_after = results["after"][3].place(covered_after)
    return QuotaAnswer(
        tenant_id=tenant_id,
        before=quota.limits,
        after=new_limits,
        rooms=rooms,
        compute_free_in_pool=now.compute_free,
        memory_free_in_pool=now.memory_free,
        share_before=_share(usage.get(tenant_id, 0.0), quota.limits.compute),
        share_after=_share(usage.get(tenant_id, 0.0), new_limits.compute),
        queued=sum(1 for w in waitings if w.tenant_id == tenant_id),
        queued_admitted_before=results["before"][0],
        queued_admitted_after=results["after"][0],
        first_position_before=results["before"][2],
        first_position_after=results["after"][2],
        others_queued=sum(1 for w in waitings if w.tenant_id != tenant_id),
        others_admitted_before=results["before"][1],
        others_admitted_after=results["after"][1],
        pending=len(pending),
        pending_within_quota_before=len(covered_before),
        pending_within_quota_after=len(covered_after),
        pending_placed_after=len(placed_after),
    )
