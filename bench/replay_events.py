"""The time order of an online replay's arrivals and departures, shared by every bench that replays pods or
tasks with a creation and a deletion time."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

ARRIVAL = 1
DEPARTURE = 0


class Timed(Protocol):
    @property
    def created(self) -> int: ...

    @property
    def deleted(self) -> int: ...


def replay_events(items: Sequence[Timed]) -> list[tuple[int, int, int]]:
    """``(time, ARRIVAL or DEPARTURE, index)`` in replay order. Departures come before arrivals at equal times
    (a slot freed at t is usable at t), except an item that ends when it starts (or before): sorted that way
    its departure would come before its own arrival, find nothing to release, and the item would hold its slot
    for the rest of the replay. Its departure comes right after its own arrival instead, before the next
    arrival at that time, as ``bench.placement_departures.replay_held`` does."""
    # (time, rank at that time, index, after its own arrival, kind): departures rank before arrivals.
    keyed: list[tuple[int, int, int, int, int]] = []
    for k, x in enumerate(items):
        keyed.append((x.created, ARRIVAL, k, 0, ARRIVAL))
        if x.deleted > x.created:
            keyed.append((x.deleted, DEPARTURE, k, 0, DEPARTURE))
        else:
            keyed.append((x.created, ARRIVAL, k, 1, DEPARTURE))
    return [(t, kind, k) for t, _, k, _, kind in sorted(keyed)]
