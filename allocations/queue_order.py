"""The order a pool's queue is admitted in (issue 15): fair across tenants, priority then FIFO within a tenant.

Plain data in, plain data out: the admission service (services/queue.py), the queue pages and bench/fairness.py
all order with these functions, so the benchmark measures the rule the portal runs.

Fairness follows Kueue's admission fair sharing: a tenant's *share* is its usage of the pool, decayed over time
with a half-life (FATIA_QUEUE_HALF_LIFE_S), divided by its quota. The tenant with the lowest share goes first;
each request ordered raises its tenant's share by what it asks for, so one tenant's burst does not take every
turn. Decay means a tenant that ran a lot an hour ago still yields to one that ran nothing, but not for ever.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True, slots=True)
class Waiting:
    """One queued request, as the ordering sees it."""

    allocation_id: int
    tenant_id: int
    priority: int
    queued_at: datetime
    compute_slices: int


@dataclass(frozen=True, slots=True)
class Held:
    """Compute slices a tenant held from `start` to `end` (None: still held)."""

    tenant_id: int
    compute_slices: int
    start: datetime
    end: datetime | None


def decayed_usage(held: Iterable[Held], *, now: datetime, half_life_s: float) -> dict[int, float]:
    """Per tenant, the exponentially decayed average of the compute slices it held up to `now`.

    Each held interval [a, b] contributes c * (2^-(now-b)/H - 2^-(now-a)/H): the integral of c over the
    interval, weighted by 2^-(age/H), times ln2/H, so a tenant that has held c slices for much longer than H
    scores c, and one that stopped holding them H ago scores about c/2. Units stay compute slices, so the
    share against a quota is a plain ratio.
    """
    rate = math.log(2) / half_life_s
    usage: dict[int, float] = {}
    for h in held:
        end = now if h.end is None or h.end > now else h.end
        if end <= h.start:
            continue
        older = math.exp(-rate * (now - h.start).total_seconds())
        newer = math.exp(-rate * (now - end).total_seconds())
        usage[h.tenant_id] = usage.get(h.tenant_id, 0.0) + h.compute_slices * (newer - older)
    return usage


def within_tenant(entries: Iterable[Waiting]) -> list[Waiting]:
    """A tenant's own queue: higher priority first, then first come first served."""
    return sorted(entries, key=lambda e: (-e.priority, e.queued_at, e.allocation_id))


def fair_order(entries: Sequence[Waiting], *, usage: dict[int, float], quota: dict[int, int]) -> list[Waiting]:
    """The whole queue in admission order.

    Repeatedly takes the head of the tenant with the lowest share (usage / quota; ties: the head that has
    waited longest), then counts that request into its tenant's share. A tenant without quota in the pool
    (quota 0) sorts last; it cannot have an approved request there anyway.
    """
    queues: dict[int, list[Waiting]] = {}
    for entry in entries:
        queues.setdefault(entry.tenant_id, []).append(entry)
    heads = {tenant: within_tenant(items) for tenant, items in queues.items()}
    share_base = dict(usage)
    ordered: list[Waiting] = []
    while heads:

        def key(tenant: int) -> tuple[float, datetime, int]:
            limit = quota.get(tenant, 0)
            share = share_base.get(tenant, 0.0) / limit if limit > 0 else math.inf
            head = heads[tenant][0]
            return (share, head.queued_at, head.allocation_id)

        tenant = min(heads, key=key)
        entry = heads[tenant].pop(0)
        ordered.append(entry)
        share_base[tenant] = share_base.get(tenant, 0.0) + entry.compute_slices
        if not heads[tenant]:
            del heads[tenant]
    return ordered


def starving_head(order: Sequence[Waiting], *, now: datetime, reserve_after_s: float) -> Waiting | None:
    """The request the starvation bound holds room for (queue_reservation.py): the first in admission order that
    has waited `reserve_after_s` or longer; None when none has. Once it is admitted the bound passes to the next
    such request, so callers ask again after each admission."""
    bound = now - timedelta(seconds=reserve_after_s)
    return next((w for w in order if w.queued_at <= bound), None)
