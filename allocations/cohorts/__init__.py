"""Cohorts (issue 15): tenants of one pool that lend each other unused guarantee, Kueue-style.

`accounting` is the arithmetic (pure Python, no database): what a member may borrow now and what a lender's
request would need taken back; `members` reads a cohort's quota rows into that arithmetic; `reclaim` orders and
picks the borrowed allocations to take back. The services that change state are allocations/services/cohorts.py
(the borrowed part), cohort_notices.py and cohort_reclaim.py (reclaim with grace); docs/queue.md, "Borrowing and
lending", explains the rules.
"""
