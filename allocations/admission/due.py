"""Held requests that have waited their bound are placed (issue 14): the beat's step, every minute.

It only starts the admission pass of each pool with such a request (services/queue.admit_queued), which places
them forced, in the queue's order and under the pass's locks (the pool's queued requests, then the pool): two runs
at once, or a run and a release's pass, admit each request once. A forced request that still does not fit stays
queued as one waiting for room. Idempotent: a second run finds nothing due.
"""

from __future__ import annotations

from allocations.services.admission import pools_with_due_holds
from allocations.services.queue import admit_queued


def admit_due_holds() -> dict[int, int]:
    """Per pool with a held request past its `held_until`, how many requests its pass admitted."""
    return {pool_id: len(admit_queued(pool_id=pool_id)) for pool_id in pools_with_due_holds()}
