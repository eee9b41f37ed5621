"""Keep a room for a lender (issue 15, allocations/cohorts/fence.py): store the slots planned for it, audited.

Two places plan such a room: notices to borrowers (services/cohort_notices.give_notice, the slots the release and
any moves make) and the rescue of a lender refused for fragmentation alone (services/compaction
.rescue_with_moves, the slot its moves make). Whether the room holds is derived (fence.pool_fences); letting it
go is cohort_notices.drop_room. Caller holds the lender's lock (and its pool's).
"""

from __future__ import annotations

from collections.abc import Sequence

from allocations.cohorts.fence import HeldSlot
from allocations.models import Allocation
from tenants.services import record_audit_event


def hold_room(lender: Allocation, slots: Sequence[HeldSlot]) -> None:
    """Store `slots` as the lender's room (empty: none is held); audited `reclaim_room` when there is one."""
    room = [slot.as_json() for slot in slots]
    lender.reclaim_room = room
    lender.save(update_fields=["reclaim_room", "updated_at"])
    if room:
        record_audit_event(
            actor=None, verb="reclaim_room", obj=lender, tenant_id=lender.tenant_id, after={"held": room}
        )
