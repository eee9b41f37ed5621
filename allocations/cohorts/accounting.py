"""Cohort arithmetic (Kueue's borrowingLimit / lendingLimit semantics), in compute slices and memory slots.

A member's quota is its guarantee. It lends min(lending limit, unused guarantee) to the cohort (NULL limit: all
its unused guarantee); a member's usage above its guarantee is borrowed, bounded by its borrowing limit (NULL: no
bound of its own) and by what the other members lend in total, less what the others already borrow. Compute and
memory are counted separately; a request must fit both.

Pure functions, no database: the services build `MemberState` rows from locked quota rows, and the fairness
bench replays them on a simulated pool.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class MemberState:
    """One member of a cohort as it stands now: its guarantee (quota limits), its whole usage, its limits."""

    tenant_id: int
    guarantee_compute: int
    guarantee_memory: int
    used_compute: int
    used_memory: int
    borrowing_compute_limit: int | None = None
    borrowing_memory_limit: int | None = None
    lending_compute_limit: int | None = None
    lending_memory_limit: int | None = None

    @property
    def borrowed_compute(self) -> int:
        return max(0, self.used_compute - self.guarantee_compute)

    @property
    def borrowed_memory(self) -> int:
        return max(0, self.used_memory - self.guarantee_memory)

    @property
    def lent_compute(self) -> int:
        """What this member offers the cohort now: its unused guarantee, at most its lending limit."""
        return _lends(self.guarantee_compute, self.used_compute, self.lending_compute_limit)

    @property
    def lent_memory(self) -> int:
        return _lends(self.guarantee_memory, self.used_memory, self.lending_memory_limit)

    def using(self, compute: int, memory: int) -> MemberState:
        """This member with `compute` / `memory` more in use (negative: less)."""
        return MemberState(
            tenant_id=self.tenant_id,
            guarantee_compute=self.guarantee_compute,
            guarantee_memory=self.guarantee_memory,
            used_compute=self.used_compute + compute,
            used_memory=self.used_memory + memory,
            borrowing_compute_limit=self.borrowing_compute_limit,
            borrowing_memory_limit=self.borrowing_memory_limit,
            lending_compute_limit=self.lending_compute_limit,
            lending_memory_limit=self.lending_memory_limit,
        )


@dataclass(frozen=True)
class Admission:
    """The part of an admitted request above its tenant's guarantee (0, 0: all within the guarantee)."""

    borrowed_compute: int
    borrowed_memory: int

    @property
    def borrows(self) -> bool:
        return self.borrowed_compute > 0 or self.borrowed_memory > 0


@dataclass(frozen=True)
class Shortfall:
    """What borrowers must give back (compute slices, memory slots) before a request can be admitted."""

    compute: int
    memory: int

    @property
    def any(self) -> bool:
        return self.compute > 0 or self.memory > 0


def _lends(guarantee: int, used: int, limit: int | None) -> int:
    unused = max(0, guarantee - used)
    return unused if limit is None else min(limit, unused)


def _member(members: Sequence[MemberState], tenant_id: int) -> MemberState:
    for member in members:
        if member.tenant_id == tenant_id:
            return member
    raise ValueError(f"Tenant {tenant_id} is not a member of this cohort.")


def borrow_room(members: Sequence[MemberState], tenant_id: int) -> tuple[int, int]:
    """How much more (compute, memory) the tenant may borrow now, above what it already borrows.

    Room = what the others lend, less what the others borrow, less what the tenant borrows already; capped by the
    tenant's own borrowing limit. Never negative.
    """
    me = _member(members, tenant_id)
    others = [m for m in members if m.tenant_id != tenant_id]
    pool_compute = sum(m.lent_compute for m in others) - sum(m.borrowed_compute for m in others)
    pool_memory = sum(m.lent_memory for m in others) - sum(m.borrowed_memory for m in others)
    room_compute = pool_compute - me.borrowed_compute
    room_memory = pool_memory - me.borrowed_memory
    if me.borrowing_compute_limit is not None:
        room_compute = min(room_compute, me.borrowing_compute_limit - me.borrowed_compute)
    if me.borrowing_memory_limit is not None:
        room_memory = min(room_memory, me.borrowing_memory_limit - me.borrowed_memory)
    return max(0, room_compute), max(0, room_memory)


def admit_within(members: Sequence[MemberState], tenant_id: int, compute: int, memory: int) -> Admission | None:
    """Admit `compute` slices and `memory` slots more for the tenant within guarantee plus borrowable, or None.

    Returns the part of this request above the tenant's guarantee (what it borrows). A request within the
    tenant's own guarantee is admitted here even when others borrow that guarantee: `reclaim_shortfall` tells what
    they must give back first.
    """
    me = _member(members, tenant_id)
    after = me.using(compute, memory)
    borrow_compute = after.borrowed_compute - me.borrowed_compute
    borrow_memory = after.borrowed_memory - me.borrowed_memory
    room_compute, room_memory = borrow_room(members, tenant_id)
    if borrow_compute > room_compute or borrow_memory > room_memory:
        return None
    return Admission(borrowed_compute=borrow_compute, borrowed_memory=borrow_memory)


def cohort_overdraft(members: Sequence[MemberState]) -> Shortfall:
    """How far the members' borrowing exceeds what the members lend (0, 0 when the cohort balances)."""
    compute = sum(m.borrowed_compute for m in members) - sum(m.lent_compute for m in members)
    memory = sum(m.borrowed_memory for m in members) - sum(m.lent_memory for m in members)
    return Shortfall(compute=max(0, compute), memory=max(0, memory))


def reclaim_shortfall(members: Sequence[MemberState], tenant_id: int, compute: int, memory: int) -> Shortfall:
    """What other members' borrowed slices must give back so the tenant may take `compute` / `memory` within its
    guarantee while the cohort still balances (borrowed never above lent).

    Only a request that stays within its tenant's guarantee reclaims (Kueue's reclaimWithinCohort); one that
    would borrow itself gets (0, 0) and waits for `admit_within` instead. Only the overdraft this request creates
    counts, not one that was there before (a guarantee lowered under running borrowers, say).
    """
    me = _member(members, tenant_id)
    after_me = me.using(compute, memory)
    if after_me.borrowed_compute > me.borrowed_compute or after_me.borrowed_memory > me.borrowed_memory:
        return Shortfall(compute=0, memory=0)
    before = cohort_overdraft(members)
    now = cohort_overdraft([after_me if m.tenant_id == tenant_id else m for m in members])
    return Shortfall(compute=max(0, now.compute - before.compute), memory=max(0, now.memory - before.memory))
