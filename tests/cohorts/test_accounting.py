"""Cohort arithmetic (issue 15), pure: Kueue's borrowingLimit / lendingLimit semantics and the reclaim order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from allocations.cohorts.accounting import (
    Admission,
    MemberState,
    Shortfall,
    admit_within,
    borrow_ceiling,
    borrow_room,
    cohort_overdraft,
    reclaim_shortfall,
)
from allocations.cohorts.reclaim import Candidate, pick_reclaims


def member(tenant_id: int, guarantee: int, used: int = 0, **limits: int | None) -> MemberState:
    """Compute and memory alike, so each case reads in one number."""
    return MemberState(
        tenant_id=tenant_id,
        guarantee_compute=guarantee,
        guarantee_memory=guarantee,
        used_compute=used,
        used_memory=used,
        borrowing_compute_limit=limits.get("borrow"),
        borrowing_memory_limit=limits.get("borrow"),
        lending_compute_limit=limits.get("lend"),
        lending_memory_limit=limits.get("lend"),
    )


def test_within_the_guarantee_nothing_is_borrowed():
    members = [member(1, 4), member(2, 4)]
    assert admit_within(members, 1, 4, 4) == Admission(0, 0)


def test_null_limits_borrow_all_the_others_unused_guarantee_and_no_more():
    members = [member(1, 4, used=4), member(2, 6, used=1)]
    assert borrow_room(members, 1) == (5, 5)
    assert admit_within(members, 1, 5, 5) == Admission(5, 5)
    assert admit_within(members, 1, 6, 6) is None


def test_a_request_partly_within_the_guarantee_borrows_only_the_part_above_it():
    members = [member(1, 4, used=3), member(2, 4)]
    assert admit_within(members, 1, 3, 3) == Admission(2, 2)


def test_a_borrowing_limit_of_zero_never_borrows_and_one_bounds_the_whole_borrowed_usage():
    assert admit_within([member(1, 4, used=4, borrow=0), member(2, 8)], 1, 1, 1) is None
    members = [member(1, 4, used=6, borrow=3), member(2, 8)]  # borrows 2 already
    assert borrow_room(members, 1) == (1, 1)
    assert admit_within(members, 1, 1, 1) == Admission(1, 1)
    assert admit_within(members, 1, 2, 2) is None


def test_a_lending_limit_caps_what_a_member_lends_and_zero_lends_nothing():
    assert borrow_room([member(1, 0), member(2, 8, lend=3)], 1) == (3, 3)
    assert borrow_room([member(1, 0), member(2, 8, lend=0)], 1) == (0, 0)
    # the lender's use eats its unused guarantee before its lending limit: 2 unused, limit 3, lends 2
    assert borrow_room([member(1, 0), member(2, 8, used=6, lend=3)], 1) == (2, 2)


def test_several_borrowers_share_what_the_lenders_lend():
    members = [member(1, 0, used=3), member(2, 0, used=2), member(3, 10, used=2)]  # 8 lent, 5 borrowed
    assert borrow_room(members, 1) == (3, 3)
    assert borrow_room(members, 2) == (3, 3)
    assert admit_within(members, 2, 4, 4) is None


def test_compute_and_memory_are_counted_apart():
    members = [
        MemberState(1, 0, 0, 0, 0),
        MemberState(2, 4, 2, 0, 0),  # lends 4 compute, 2 memory
    ]
    assert admit_within(members, 1, 3, 2) == Admission(3, 2)
    assert admit_within(members, 1, 3, 3) is None


def test_a_lender_within_its_guarantee_is_admitted_and_the_overdraft_it_creates_is_to_reclaim():
    members = [member(1, 6), member(2, 2, used=6)]  # 2 borrowed 4 of 1's 6
    assert admit_within(members, 1, 4, 4) == Admission(0, 0)
    assert reclaim_shortfall(members, 1, 2, 2) == Shortfall(0, 0)  # 4 unused left: still covers the 4 borrowed
    assert reclaim_shortfall(members, 1, 4, 4) == Shortfall(2, 2)


def test_a_lending_limit_protects_the_rest_of_the_guarantee_from_reclaim():
    members = [member(1, 10, lend=4), member(2, 0, used=4)]
    assert reclaim_shortfall(members, 1, 6, 6) == Shortfall(0, 0)
    assert reclaim_shortfall(members, 1, 7, 7) == Shortfall(1, 1)


def test_a_request_that_would_borrow_never_reclaims_and_an_old_overdraft_is_not_its_own():
    members = [member(1, 4, used=4), member(2, 0, used=3)]  # 1 lends nothing now, 2 borrows 3: overdrawn before
    assert cohort_overdraft(members) == Shortfall(3, 3)
    assert reclaim_shortfall(members, 1, 1, 1) == Shortfall(0, 0)


def test_reclaim_takes_the_youngest_first_unless_telemetry_shows_one_less_used():
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    old = Candidate(1, compute=2, memory=2, started_at=t0)
    young = Candidate(2, compute=1, memory=1, started_at=t0 + timedelta(hours=1))
    assert pick_reclaims([old, young], Shortfall(1, 1)) == [young]
    assert pick_reclaims([old, young], Shortfall(2, 2)) == [young, old]
    idle_old = Candidate(1, compute=2, memory=2, started_at=t0, used_fraction=0.0)
    busy_young = Candidate(2, compute=1, memory=1, started_at=t0 + timedelta(hours=1), used_fraction=0.9)
    assert pick_reclaims([idle_old, busy_young], Shortfall(1, 1)) == [idle_old]
    assert pick_reclaims([old, young], Shortfall(0, 0)) == []


def test_the_borrow_ceiling_is_what_the_others_could_ever_lend_capped_by_the_borrowing_limit():
    members = [member(1, 2, used=2), member(2, 8, used=8, lend=3), member(3, 4)]
    assert borrow_ceiling(members, 1) == (7, 7)
    assert borrow_ceiling([member(1, 2, borrow=1), member(2, 8)], 1) == (1, 1)
