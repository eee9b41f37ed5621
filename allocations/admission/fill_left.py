"""Which refusal a plan's hold came from (issue 14): the hold policy's fill-left rule or its stranding rule.

A plan that may hold builds a fresh engine per decision (outcomes.choose_priced), and a refused plan comes back None
either way; the engine says why in `PlacementEngine.kept_empty`. Within `noting_refusals`, choose_priced notes each
decision's answer here, so that plan_or_hold (hold.py) words a fill-left hold with its own reason (the last decision
of the plan is the one that refused: a Kubernetes plan may decide more than once, allocations/placement.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from allocations.mig.fill_left import KeptEmpty


@dataclass(slots=True)
class Refusals:
    """The last decision's fill-left refusal within the block, if it was one."""

    kept_empty: KeptEmpty | None = None


_NOTED: ContextVar[Refusals | None] = ContextVar("fatia_fill_left_refusals", default=None)


@contextmanager
def noting_refusals() -> Iterator[Refusals]:
    """Within this block, decisions that may hold note whether the fill-left rule refused them."""
    noted = Refusals()
    token = _NOTED.set(noted)
    try:
        yield noted
    finally:
        _NOTED.reset(token)


def note_decision(kept_empty: KeptEmpty | None) -> None:
    """A decision that may hold was made (outcomes.choose_priced): `kept_empty` when the fill-left rule refused it."""
    noted = _NOTED.get()
    if noted is not None:
        noted.kept_empty = kept_empty
