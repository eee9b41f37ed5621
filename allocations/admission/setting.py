"""A pool's admission setting (issue 14): validated and set on the pool row; services/pools.update_node_pool saves
and audits it. The API's serializer and the admission page read its bounds from here, without the services.
"""

from __future__ import annotations

from allocations.models import NodePool
from tenants.errors import InvalidInput

# The longest a pool may hold a request: a day. A hold is meant to wait for a release, not to park work.
MAX_HOLD_MINUTES_LIMIT = 24 * 60


def apply_admission(pool: NodePool, *, admission: str | None, max_hold_minutes: int | None) -> bool:
    """Set the pool's admission fields (the caller, services/pools.update_node_pool, holds the pool's lock, saves
    and audits). Holding needs a slot layout to judge stranding by: refused in static-MIG pools (the layout is
    pre-made and placement pins existing instances, so nothing is stranded by choosing) and in time-sliced and MPS
    pools (no slots). Raises InvalidInput on the field. True when requests held so far should be tried again at
    once (admission turned off: they are now placed wherever they fit)."""
    if admission is not None:
        if admission not in NodePool.Admission.values:
            valid = ", ".join(NodePool.Admission.values)
            raise InvalidInput({"admission": [f"Unknown admission {admission!r}. Valid: {valid}."]})
        was = pool.admission
        pool.admission = admission
    else:
        was = pool.admission
    if max_hold_minutes is not None:
        if not 1 <= max_hold_minutes <= MAX_HOLD_MINUTES_LIMIT:
            why = f"Between 1 and {MAX_HOLD_MINUTES_LIMIT} minutes (a day), not {max_hold_minutes}."
            raise InvalidInput({"max_hold_minutes": [why]})
        pool.max_hold_minutes = max_hold_minutes
    refuse_where_it_cannot_apply(pool)
    return was == NodePool.Admission.HOLD and pool.admission != NodePool.Admission.HOLD


def refuse_where_it_cannot_apply(pool: NodePool) -> None:
    """InvalidInput on `admission` when the pool holds requests but its kind or MIG mode gives holding nothing to
    judge (also when the kind or mode is changed under a pool that holds: turn admission off in the same change)."""
    if not pool.holds_requests:
        return
    if pool.is_shared:
        why = (
            f"{pool.get_kind_display()} pools share whole GPUs by memory size: there are no MIG slots whose layout "
            "a request could strand, so there is nothing to hold for."
        )
    elif pool.is_static:
        why = (
            "Static MIG pools place requests on pre-created instances (or reshape a GPU for them): the layout is the "
            "admin's, not chosen per request, so holding a request keeps no room. Use a dynamic MIG pool."
        )
    else:
        return
    raise InvalidInput({"admission": [f"Holding requests does not apply to {pool.name}. {why}"]})
