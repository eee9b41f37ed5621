"""The ordering rules as plain functions (allocations/queue_order.py): decay, fair share, priority, FIFO."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from allocations.queue_order import Held, Waiting, decayed_usage, fair_order, starving_head, within_tenant

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
H = 3600.0


def hours_ago(h: float) -> datetime:
    return NOW - timedelta(hours=h)


def test_usage_held_for_many_half_lives_counts_fully_and_usage_one_half_life_old_counts_half():
    usage = decayed_usage(
        [Held(1, 4, hours_ago(100), None), Held(2, 4, hours_ago(100), hours_ago(1))], now=NOW, half_life_s=H
    )
    assert usage[1] == pytest.approx(4.0)
    assert usage[2] == pytest.approx(2.0)


def test_usage_just_started_counts_little_and_future_or_empty_intervals_nothing():
    usage = decayed_usage(
        [Held(1, 4, hours_ago(1), None), Held(2, 4, NOW, None), Held(3, 4, hours_ago(2), hours_ago(3))],
        now=NOW,
        half_life_s=H,
    )
    assert usage[1] == pytest.approx(2.0)
    assert 2 not in usage and 3 not in usage


def w(pk: int, tenant: int, *, at: float, slices: int = 1, priority: int = 0) -> Waiting:
    return Waiting(pk, tenant, priority, hours_ago(at), slices)


def test_fair_order_interleaves_a_burst_with_another_tenants_requests():
    # given: tenant 1 queued three requests before tenant 2 queued two; no usage, equal quotas
    queue = [w(1, 1, at=5), w(2, 1, at=4), w(3, 1, at=3), w(4, 2, at=2), w(5, 2, at=1)]
    order = fair_order(queue, usage={}, quota={1: 4, 2: 4})
    # then: turns alternate (each request counts into its tenant's share), oldest head first on a tie
    assert [e.allocation_id for e in order] == [1, 4, 2, 5, 3]


def test_share_is_usage_against_quota():
    # given: tenant 1 uses 4 of 16, tenant 2 uses 2 of 4
    queue = [w(1, 2, at=5), w(2, 1, at=1)]
    order = fair_order(queue, usage={1: 4.0, 2: 2.0}, quota={1: 16, 2: 4})
    # then: tenant 1 (1/4) before tenant 2 (1/2), though it queued later
    assert [e.allocation_id for e in order] == [2, 1]


def test_a_tenant_without_quota_goes_last():
    order = fair_order([w(1, 3, at=9), w(2, 1, at=1)], usage={1: 100.0}, quota={1: 4})
    assert [e.allocation_id for e in order] == [2, 1]


def test_inside_a_tenant_priority_first_then_first_come_first_served():
    queue = [w(1, 1, at=3), w(2, 1, at=2, priority=5), w(3, 1, at=1, priority=5), w(4, 1, at=4, priority=-1)]
    assert [e.allocation_id for e in within_tenant(queue)] == [2, 3, 1, 4]
    assert [e.allocation_id for e in fair_order(queue, usage={}, quota={1: 1})] == [2, 3, 1, 4]


def test_the_starvation_bound_holds_room_for_the_first_in_admission_order_that_waited_past_it():
    # given: in admission order, one that waited 30 min, then two past the one-hour bound (the older one last)
    order = [w(1, 1, at=0.5), w(2, 2, at=1.5), w(3, 1, at=3)]
    # then: the first past the bound in that order, not the one that waited longest; none when none waited so long
    assert starving_head(order, now=NOW, reserve_after_s=H) == order[1]
    assert starving_head(order[1:], now=NOW, reserve_after_s=H) == order[1]
    assert starving_head(order, now=NOW, reserve_after_s=1.5 * H) == order[1]  # exactly at the bound counts
    assert starving_head(order, now=NOW, reserve_after_s=4 * H) is None
    assert starving_head([], now=NOW, reserve_after_s=H) is None
