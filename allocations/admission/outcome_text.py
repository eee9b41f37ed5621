"""How a request's own hold ended, in words for its page (issue 14): "Held for 7 min, placed after a release".

`Allocation.hold_outcome` and `hold_ended_at` are recorded once, when the hold ends (services/admission.py
`end_hold`); when it began is the request's first `hold` audit event (also recorded once), which the page's timeline
already reads. The CLI words the same fields from the API (allocations/cli.py `_hold_pair`), without Django.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from allocations.models import Allocation
from tenants.models import AuditEvent

HoldOutcome = Allocation.HoldOutcome


def held_for(seconds: float) -> str:
    """A hold's length for people: "under a minute", "7 min", "2 h 5 min"."""
    minutes = int(seconds // 60)
    if minutes < 1:
        return "under a minute"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"


def hold_began(timeline: Iterable[AuditEvent]) -> datetime | None:
    """When the request was first held: its first `hold` event (None: no such event, e.g. trimmed history)."""
    return next((e.created_at for e in timeline if e.verb == "hold"), None)


def hold_ended_text(allocation: Allocation, *, began: datetime | None) -> str:
    """How its hold ended; "" when it was never held or is held still."""
    if not allocation.hold_outcome or allocation.hold_ended_at is None:
        return ""
    lasted: timedelta | None = None if began is None else allocation.hold_ended_at - began
    held = "Held" if lasted is None else f"Held for {held_for(max(lasted.total_seconds(), 0.0))}"
    if allocation.hold_outcome == HoldOutcome.PLACED:
        return f"{held}, placed after a release."
    if allocation.hold_outcome == HoldOutcome.FORCED:
        return f"{held}, placed at the deadline."
    if allocation.status == Allocation.Status.QUEUED:
        waiting = "waiting for room"
    elif allocation.activated_at is not None:
        waiting = "it waited for room, then started"
    else:
        waiting = "it waited for room"
    return f"{held}, then it no longer fit: {waiting}."
