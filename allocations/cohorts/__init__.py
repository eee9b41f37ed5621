"""Cohorts (issue 15): tenants of one pool that lend each other unused guarantee, Kueue-style.

`accounting` is the arithmetic (pure Python, no database): what a member may borrow now and what a lender's
request would need taken back. `reclaim` picks the borrowed allocations to take back. The services that change
state live in allocations/services/cohorts.py; the rules are explained in docs/queue.md ("Borrowing and lending").
"""
