"""What a pool and a tenant's quota hold over a time window: the checks behind bookings (issue 15).

Over a window, what holds slots is (a) the leases running now, each until its lease ends (a lease that ends
before a moment frees its slots by then), and (b) the bookings promised but not built yet, each over its own
window. Nothing else can start later: new requests are placed now, and the guards below keep them and lease
extensions out of a booking's room. So occupancy only grows at a booking's start, and checking every booking
start inside the window (and the window's own start) is exact: if everything fits at each of those moments,
it fits throughout.

Room is slot-aware: the pool's real layout (read_pool) minus the leases ended by then, with every booking
running at that moment placed by the placement engine, largest first. Nothing here writes; callers hold the
pool's lock (then the quota's) so the answer cannot change before they act on it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from allocations.costs import gpu_model_for
from allocations.mig.catalog import GpuModel
from allocations.mig.demand import DemandMix
from allocations.mig.engine import PlacementEngine
from allocations.mig.fleet import Fleet, Gpu, Instance, Node, PlacementRequest
from allocations.models import Allocation, Booking, NodePool, Quota
from allocations.placement import POLICY, PlannedSlice, read_pool


@dataclass(frozen=True, slots=True)
class BookedRoom:
    """What one booking holds while its window runs: `count` x `profile` on one node of its pool."""

    booking_id: int
    tenant_id: int
    profile: str
    count: int
    compute_slices: int
    memory_slices: int
    starts_at: datetime
    ends_at: datetime

    @property
    def label(self) -> str:
        when = f"{self.starts_at:%Y-%m-%d %H:%M}-{self.ends_at:%H:%M}"
        return f"booking #{self.booking_id} ({self.count} x {self.profile}, {when} UTC)"


@dataclass(frozen=True, slots=True)
class Lease:
    """A quota-holding request of the pool and when its slices are gone at the latest we know of."""

    allocation_id: int
    tenant_id: int
    profile: str
    count: int
    compute_slices: int
    memory_slices: int
    ends_at: datetime

    @property
    def label(self) -> str:
        until = f"{self.ends_at:%Y-%m-%d %H:%M}"
        return f"request #{self.allocation_id} ({self.count} x {self.profile}, lease until {until} UTC)"


def _room(booking: Booking) -> BookedRoom:
    return BookedRoom(
        booking_id=booking.pk,
        tenant_id=booking.tenant_id,
        profile=booking.profile,
        count=booking.count,
        compute_slices=booking.compute_slices,
        memory_slices=booking.memory_slices,
        starts_at=booking.starts_at,
        ends_at=booking.ends_at,
    )


def booked_rooms(pool: NodePool, *, exclude_booking_id: int | None = None) -> list[BookedRoom]:
    """Every booking of the pool that still needs room: PENDING or APPROVED, and ACTIVE ones whose allocation has
    no slices yet (made at the start, not placed yet: nothing in the layout holds their room)."""
    waiting = Q(
        status=Booking.Status.ACTIVE, allocation__status__in=(Allocation.Status.APPROVED, Allocation.Status.QUEUED)
    )
    rows = Booking.objects.filter(Q(status__in=Booking.HOLDING) | waiting, pool=pool).order_by("starts_at", "pk")
    if exclude_booking_id is not None:
        rows = rows.exclude(pk=exclude_booking_id)
    return [_room(b) for b in rows]


def room_reserved_by_bookings(pool: NodePool, at: datetime | None = None) -> list[BookedRoom]:
    """What the pool's bookings hold at moment `at` (now by default): the queue and new placements must leave
    it free. Each entry is one booking's `count` x `profile` on one node (slot-aware: see `room_left_for_bookings`
    to test a layout against them)."""
    moment = at or timezone.now()
    return [r for r in booked_rooms(pool) if r.starts_at <= moment < r.ends_at]


def _lease_end(allocation: Allocation, now: datetime) -> datetime:
    if allocation.lease_expires_at is not None:
        return allocation.lease_expires_at
    # Not active yet: its lease starts when it is placed, so it runs at least this long from now.
    return now + timedelta(hours=allocation.lease_hours)


def pool_leases(pool: NodePool, *, now: datetime | None = None) -> list[Lease]:
    moment = now or timezone.now()
    rows = Allocation.objects.holding_quota().filter(pool=pool).order_by("pk")
    return [
        Lease(
            allocation_id=a.pk,
            tenant_id=a.tenant_id,
            profile=a.profile,
            count=a.count,
            compute_slices=a.compute_slices,
            memory_slices=a.memory_slices,
            ends_at=_lease_end(a, moment),
        )
        for a in rows
    ]


def moments(starts_at: datetime, ends_at: datetime, rooms: Iterable[BookedRoom]) -> list[datetime]:
    """The moments inside [starts_at, ends_at) where occupancy can grow: the start, and each booking start."""
    return sorted({starts_at} | {r.starts_at for r in rooms if starts_at < r.starts_at < ends_at})


def _running(rooms: Iterable[BookedRoom], at: datetime) -> list[BookedRoom]:
    return [r for r in rooms if r.starts_at <= at < r.ends_at]


# --- slot-aware room ----------------------------------------------------------------------------------------


@dataclass
class PoolAtMoment:
    """The pool's layout read once; `fleet_at` drops the leases over by a moment and adds planned slices."""

    pool: NodePool
    fleet: Fleet
    models: dict[tuple[str, int], GpuModel]

    @classmethod
    def read(cls, pool: NodePool) -> PoolAtMoment:
        layout = read_pool(pool)
        return cls(pool=pool, fleet=layout.fleet, models=layout.models)

    def fleet_at(self, ended: set[str], planned: Iterable[PlannedSlice] = (), profile: str = "") -> Fleet:
        extra: dict[tuple[str, int], list[Instance]] = {}
        for s in planned:
            extra.setdefault((s.node_name, s.gpu_index), []).append(
                Instance(profile=profile, start=s.start, owner="new")
            )
        nodes = []
        for node in self.fleet.nodes:
            gpus = [
                Gpu(
                    g.node,
                    g.index,
                    g.model,
                    [i for i in g.instances if i.owner not in ended] + extra.get((g.node, g.index), []),
                )
                for g in node.gpus
            ]
            nodes.append(Node(node.name, gpus, node.pool))
        return Fleet(nodes)


def _place_all(fleet: Fleet, pool: NodePool, rooms: list[BookedRoom]) -> BookedRoom | None:
    """Place every room on the fleet, largest first; the first that finds no room, or None when all fit."""
    model = gpu_model_for(pool.gpu_model)
    engine = PlacementEngine(fleet, POLICY, DemandMix())

    def size(r: BookedRoom) -> tuple[int, int, int]:
        slices = model.profile(r.profile).memory_slices if model.has_profile(r.profile) else 0
        return (-slices * r.count, -r.count, r.booking_id)

    for room in sorted(rooms, key=size):
        if (
            engine.place(
                PlacementRequest(profile=room.profile, count=room.count, pool=pool.slug), f"b{room.booking_id}"
            )
            is None
        ):
            return room
    return None


def capacity_conflict(
    *,
    pool: NodePool,
    candidate: BookedRoom | None,
    rooms: list[BookedRoom],
    at: list[datetime],
    leases: list[Lease],
    layout: PoolAtMoment | None = None,
    planned: Iterable[PlannedSlice] = (),
    planned_profile: str = "",
) -> str | None:
    """Why `candidate` plus the bookings running at each moment of `at` do not all fit the pool, or None.

    `leases` (with their ends) decide which held slices are gone by each moment; `planned` are slices about to
    be placed now (a new request's choice) that count as held throughout."""
    current = layout or PoolAtMoment.read(pool)
    for moment in at:
        running = _running(rooms, moment) + ([candidate] if candidate is not None else [])
        if not running:
            continue
        ended = {str(lease.allocation_id) for lease in leases if lease.ends_at <= moment}
        stuck = _place_all(current.fleet_at(ended, planned, planned_profile), pool, running)
        if stuck is not None:
            return _blame(pool, moment, stuck, candidate, running, leases)
    return None


def _blame(
    pool: NodePool,
    moment: datetime,
    stuck: BookedRoom,
    candidate: BookedRoom | None,
    running: list[BookedRoom],
    leases: list[Lease],
) -> str:
    what = candidate or stuck
    others = [r.label for r in running if r is not candidate]
    held = [lease.label for lease in leases if lease.ends_at > moment]
    blockers = others + held
    shown = "; ".join(blockers[:5]) + (f"; and {len(blockers) - 5} more" if len(blockers) > 5 else "")
    return (
        f"No room in {pool.name} for {what.count} x {what.profile} at {moment:%Y-%m-%d %H:%M} UTC: "
        f"{'held then by ' + shown if blockers else 'the pool has no GPU where it fits'}."
    )


# --- quota over the window ---------------------------------------------------------------------------------


def quota_conflict(
    *,
    quota: Quota | None,
    pool: NodePool,
    candidate: BookedRoom,
    rooms: list[BookedRoom],
    leases: list[Lease],
) -> str | None:
    """Why the candidate does not fit its tenant's quota at some moment of its window (the tenant's leases still
    running and its other bookings running then count), or None. Caller holds the quota row's lock."""
    if quota is None:
        return f"The tenant has no quota in {pool.name}."
    mine_rooms = [r for r in rooms if r.tenant_id == candidate.tenant_id]
    mine_leases = [lease for lease in leases if lease.tenant_id == candidate.tenant_id]
    cap = quota.profile_caps.get(candidate.profile)
    for moment in moments(candidate.starts_at, candidate.ends_at, mine_rooms):
        held: list[BookedRoom | Lease] = [
            *_running(mine_rooms, moment),
            *(x for x in mine_leases if x.ends_at > moment),
        ]
        compute = sum(x.compute_slices for x in held) + candidate.compute_slices
        memory = sum(x.memory_slices for x in held) + candidate.memory_slices
        same = sum(x.count for x in held if x.profile == candidate.profile) + candidate.count
        if (
            compute > quota.compute_slices_limit
            or memory > quota.memory_slices_limit
            or (cap is not None and same > cap)
        ):
            blockers = "; ".join(x.label for x in held[:5]) or "nothing else"
            return (
                f"Over the tenant's quota in {pool.name} at {moment:%Y-%m-%d %H:%M} UTC: needs {compute} of "
                f"{quota.compute_slices_limit} compute slices and {memory} of {quota.memory_slices_limit} memory "
                f"slots{f' and {same} of at most {cap} x {candidate.profile}' if cap is not None else ''} "
                f"with {blockers}."
            )
    return None


def window_hours(starts_at: datetime, ends_at: datetime) -> int:
    """The window's length in whole hours, rounded up (what a lease of that length is)."""
    return max(1, math.ceil((ends_at - starts_at).total_seconds() / 3600))


def room_left_for_bookings(
    *, pool: NodePool, profile: str, slices: list[PlannedSlice], until: datetime, allocation_id: int | None = None
) -> str | None:
    """Would placing `slices` (a new request's planned slices, held until `until`) take room a booking holds?
    A message naming the booking it would squeeze out, or None. The request's own booking (the allocation a
    booking made at its start) is left out. Caller holds the pool's lock."""
    now = timezone.now()
    own = (
        Booking.objects.filter(allocation_id=allocation_id).values_list("pk", flat=True).first()
        if allocation_id
        else None
    )
    rooms = [r for r in booked_rooms(pool, exclude_booking_id=own) if r.ends_at > now and r.starts_at < until]
    if not rooms:
        return None
    leases = [lease for lease in pool_leases(pool, now=now) if lease.allocation_id != allocation_id]
    return capacity_conflict(
        pool=pool,
        candidate=None,
        rooms=rooms,
        at=moments(now, until, rooms),
        leases=leases,
        planned=slices,
        planned_profile=profile,
    )


def bookings_during(*, pool: NodePool, until: datetime, allocation_id: int | None = None) -> str:
    """The bookings of the pool whose window overlaps from now to `until`, named for a message (at most three):
    those a request's lease would squeeze (issue 15). Its own booking is left out."""
    now = timezone.now()
    own = (
        Booking.objects.filter(allocation_id=allocation_id).values_list("pk", flat=True).first()
        if allocation_id
        else None
    )
    rooms = [r for r in booked_rooms(pool, exclude_booking_id=own) if r.ends_at > now and r.starts_at < until]
    named = ", ".join(r.label for r in rooms[:3])
    return named + (f" and {len(rooms) - 3} more" if len(rooms) > 3 else "") if rooms else "a booking"
