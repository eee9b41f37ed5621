"""What the request page says about a request in a time-sliced or MPS pool: the share's size, its units and what
the pool's kind does not isolate (allocations/sharing/isolation.py holds the words)."""

from __future__ import annotations

from typing import Any

from allocations.models import Allocation
from allocations.sharing.isolation import isolation_of
from allocations.sharing.units import size_label


def share_summary(allocation: Allocation) -> dict[str, Any] | None:
    """None for a MIG request."""
    pool = allocation.pool
    if not pool.is_shared:
        return None
    isolation = isolation_of(pool.kind)
    return {
        "size": size_label(
            profile=allocation.profile, memory_mib=allocation.memory_mib, thread_percentage=allocation.thread_percentage
        ),
        "kind": isolation.label,
        "isolation": isolation.text,
        "interval": pool.sharing_interval if pool.kind == pool.Kind.SHARED else "",
    }
