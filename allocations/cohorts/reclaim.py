"""Which borrowed allocations to take back for a lender (issue 15): pure Python, no database.

Order: least used first where the node agents report use (the fraction of observed slice-time in use over the
last hour; no report counts as fully used, so a busy-looking slice is never preferred to a known idle one), then
youngest first (the one that started last has lost the least work). Taken in that order until the need is
covered in both compute slices and memory slots; a candidate that helps with neither dimension still short is
passed over.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from allocations.cohorts.accounting import Shortfall


@dataclass(frozen=True)
class Candidate:
    allocation_id: int
    # What taking it back gives: its borrowed part (quota-wise) or all of it (room in the pool).
    compute: int
    memory: int
    started_at: datetime
    used_fraction: float | None = None


def reclaim_order(candidates: Sequence[Candidate]) -> list[Candidate]:
    def key(c: Candidate) -> tuple[float, float, int]:
        used = 1.0 if c.used_fraction is None else c.used_fraction
        return (used, -c.started_at.timestamp(), -c.allocation_id)

    return sorted(candidates, key=key)


def pick_reclaims(candidates: Sequence[Candidate], need: Shortfall) -> list[Candidate]:
    """Enough candidates, in reclaim order, to cover `need`; all of them when they cannot cover it."""
    compute, memory = need.compute, need.memory
    picked: list[Candidate] = []
    for candidate in reclaim_order(candidates):
        if compute <= 0 and memory <= 0:
            break
        if (compute > 0 and candidate.compute > 0) or (memory > 0 and candidate.memory > 0):
            picked.append(candidate)
            compute -= candidate.compute
            memory -= candidate.memory
    return picked
