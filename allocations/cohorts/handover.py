"""Notices handed over (issue 15): pure Python, no database.

A lender L1 whose borrowed slices are being taken back can be admitted elsewhere before the grace ends (a release
made room meanwhile). Calling its notices off then is not free: another lender L2 of the cohort, waiting in the
same pool, may need that very room (traced in bench/fairness.py, greedy demand, seed 4: L2 asked while every
borrowed slice its room needed was already on notice for L1, so it had no notice of its own; L1 was admitted
elsewhere, the notice was called off, and L2 gave a new one: a new grace, 40 min in all, past grace + one
provisioning time). So the notices are handed to the waiting lenders whose room their release makes, *keeping
their deadline* (the owners were told that time; a new grace would restart L2's wait), and only the rest are
called off.

`choose_heirs`: the waiting lenders in admission order (each with no notice of its own standing, and not fitting
as things are), each given the fewest of the notices left whose release lets it be placed (reclaim.pick_fitting:
per GPU, then node, then pool), never its own tenant's slices; the room planned for one (cohorts/room.room_after)
is left out for the next (as the portal plans rooms: never two on one GPU). The caller passes the fleet
without the GPUs other lenders' rooms are on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from allocations.cohorts.reclaim import Candidate, driver_slots, pick_fitting
from allocations.cohorts.room import room_after, without
from allocations.mig.engine import choose_placement
from allocations.mig.fleet import Fleet, PlacementRequest


@dataclass(frozen=True)
class Heir:
    """A waiting lender that may take notices over."""

    allocation_id: int
    tenant_id: int
    request: PlacementRequest


def _placeable(fleet: Fleet, request: PlacementRequest, driver: bool) -> bool:
    if driver:
        return driver_slots(fleet, request) is not None
    return choose_placement(fleet, request, "first-fit") is not None


def _holding(fleet: Fleet, heir: Heir, released: set[str], driver: bool) -> Fleet:
    """The fleet without the GPUs the heir's room (once `released` are gone) is on: as the portal plans a
    lender's room around the others' (cohorts/fence.plan_room), never on a GPU another lender's room is on."""
    room = room_after(fleet, heir.request, released, (), driver=driver)
    return without(fleet, (), None, set(room))


def choose_heirs(
    fleet: Fleet, noticed: Sequence[Candidate], heirs: Sequence[Heir], *, driver: bool = False
) -> dict[int, list[Candidate]]:
    """Which of the `noticed` allocations (on notice for a lender that no longer needs them) each heir takes over,
    by heir's allocation id; those in no list are to be called off. `fleet` holds every allocation's instances
    (owned by str(allocation id)), without the GPUs other lenders' rooms are on; `heirs` in admission order."""
    left = list(noticed)
    handed: dict[int, list[Candidate]] = {}
    for heir in heirs:
        own = [c for c in left if c.tenant_id != heir.tenant_id]
        if not own:
            continue
        if _placeable(fleet, heir.request, driver):
            continue  # it fits as things are: the admission pass places it
        chosen = pick_fitting(fleet, heir.request, own, driver=driver)
        if not chosen:
            continue
        handed[heir.allocation_id] = chosen
        ids = {c.allocation_id for c in chosen}
        left = [c for c in left if c.allocation_id not in ids]
        if not left:
            break
        fleet = _holding(fleet, heir, {str(i) for i in ids}, driver)
    return handed
