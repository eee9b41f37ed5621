"""The reads of admission/outcomes.py without PostgreSQL's SQL, for the demo's SQLite database (issue 14).

outcomes.py reads a pool's ended holds, churn and held requests in one PostgreSQL statement each (window functions,
arrays, SKIP LOCKED). SQLite has none of them, and a demo pool switched to `hold` (or its admission page) failed
with a syntax error. These give the same answers with the ORM, in a few queries: fine at the demo's size, never
used on PostgreSQL. SQLite serialises writers, so there is no row another transaction holds to leave out."""

from __future__ import annotations

from datetime import datetime

from allocations.models import Allocation, NodePool


def _recent(pool: NodePool, window: int) -> list[datetime]:
    """When the pool's last `window` requests were created, newest first."""
    return list(
        Allocation.objects.filter(pool=pool).order_by("-created_at").values_list("created_at", flat=True)[:window]
    )


def ended_holds(pool: NodePool, window: int) -> list[tuple[str, str, int]]:
    """(profile, outcome, requests created after it ended) per hold that ended since the oldest of the pool's last
    `window` requests: outcomes._SINCE_SQL's rows."""
    recent = _recent(pool, window)
    ended = Allocation.objects.filter(pool=pool, hold_ended_at__isnull=False)
    if recent:
        ended = ended.filter(hold_ended_at__gte=recent[-1])
    rows = []
    for profile, outcome, at in ended.values_list("profile", "hold_outcome", "hold_ended_at"):
        if at is not None:  # always (filtered above): for the type checker
            rows.append((profile, outcome, len([created for created in recent if created > at])))
    return rows


def churn_and_held(pool: NodePool, window: int) -> tuple[int, int, dict[int, int]]:
    """The pool's last `window` requests (how many), allocations that ran and ended since the oldest of them, and its
    requests held now (id -> compute slices): outcomes._CHURN_SQL's row."""
    recent = _recent(pool, window)
    ended = Allocation.objects.filter(pool=pool, activated_at__isnull=False, ended_at__isnull=False)
    if recent:
        ended = ended.filter(ended_at__gte=recent[-1])
    held = Allocation.objects.filter(pool=pool, status=Allocation.Status.QUEUED, held=True).order_by("pk")
    return len(recent), ended.count(), dict(held.values_list("pk", "compute_slices"))
