"""What kube-scheduler's DRA allocator does with claims pinned to a MIG profile and a GPU.

NVIDIA's DynamicMIG devices carry no placement attribute, so a claim can pin the profile and the GPU (the
devices' ``parentUUID``) but not the slot. The allocator walks the GPU's devices in the order the driver
publishes them and takes the first device whose counters are all free; the requests of one claim are allocated
together, in order. The driver sorts a GPU's devices by name as strings (:func:`driver_order`), so a profile's
placements come in the byte order of their starts: 0, 1, 10, 11, 2, ... on a grid of more than ten slots.
Claims are allocated one at a time, in the order their holder pods reach the scheduling queue, which nobody
controls (a pod's own claims together, in the order the pod lists them).

So on Kubernetes the portal plans what the scheduler will do instead of the other way round:

* the slot of a new slice is the first free legal start on its GPU (:func:`first_fit`), which the
  ``ours-first-slot`` policy (:mod:`.policies`) ranks GPUs by;
* a GPU takes another unallocated claim only while *every* order in which the scheduler may allocate its
  unallocated claims still fits them all (:func:`order_safe`), so a prediction can be wrong about which claim
  gets which slot, never about whether they all fit;
* when a claim is allocated, the plans of the claims still waiting on that GPU are re-predicted from what the
  cluster now holds (:func:`predict`);
* where our policy wants another slot than first fit, the devices the scheduler would take first are tainted
  (DeviceTaintRules, :func:`steer`) until the claim is allocated; such a claim has its GPU to itself meanwhile.

Only creatable placements count: dynamic MIG has no free instances to reuse. The scheduler knows nothing of
our layout rules (:mod:`.layout`), only the driver's counters (:mod:`.counters`): the node's published ones
once fleet discovery has seen them (the GPU's model is then built from its figures, :mod:`.figures`), NVIDIA's
from the catalog otherwise. A prediction follows the counters and is only made where our rules agree; where
they would not (NVML figures that break a rule we hold), or where there are no figures at all, the GPU is not
used for that request.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import permutations

from .counters import counter_table
from .layout import Geometry, LayoutKey, decode, encode

#: At most this many unallocated claims wait on one GPU; the order check costs (n + 1)! first-fit runs.
MAX_IN_FLIGHT_PER_GPU = 3

#: One claim's slices on one GPU: profile indexes, in the claim's request order.
Claim = Sequence[int]


def first_fit(
    geom: Geometry, key: LayoutKey, claim: Claim, blocked: frozenset[tuple[int, int]] = frozenset()
) -> tuple[LayoutKey, list[int]] | None:
    """The layout after the scheduler allocates ``claim`` on a GPU with layout ``key``, and the starts it
    takes (one per slice); ``None`` when the claim does not fit, or would land where our layout rules say
    no (then we cannot predict it, and the GPU is not used for it).

    Each slice takes the first placement of its profile, in the driver's order, whose counters (memory slots,
    multiprocessors, engines, memory) are all free: the driver's counters decide, not our rules. ``blocked``
    holds the ``(profile index, start)`` devices the scheduler may not take (tainted, see :func:`steer`).
    Greedy in request order is what the allocator's backtracking search finds first whenever greedy succeeds."""
    table = counter_table(geom.model)
    capacity = table.capacity
    if capacity is None or any(table.need[i] is None for i in claim):
        return None  # no figures (neither published nor NVIDIA's): the profile is not offered here
    need = table.need
    info = geom.info(key)
    occupied = info.occupied
    used = [0] * len(capacity)
    for code in key:
        # An instance of a profile without figures (made outside the portal) consumes what nobody can say:
        # count it as the whole GPU's, so that nothing is predicted next to it.
        for c, n in enumerate(need[decode(code)[1]] or capacity):
            used[c] += n
    starts = []
    for i in claim:
        wants = need[i] or capacity
        fits = [u + n <= cap for u, n, cap in zip(used, wants, capacity, strict=True)]
        placement = next(((s, m) for s, m in _walk(geom)[i] if not m & occupied and (i, s) not in blocked), None)
        if placement is None or not all(fits):
            return None
        start, mask = placement
        if not geom.can_create(geom.info(key), i, mask):
            return None
        key = tuple(sorted((*key, encode(start, i, False))))
        occupied |= mask
        used = [u + n for u, n in zip(used, wants, strict=True)]
        starts.append(start)
    return key, starts


def steer(geom: Geometry, key: LayoutKey, i: int, start: int) -> list[int] | None:
    """The starts of the devices of profile ``i`` to taint so that the scheduler, walking them in order, takes
    the one at ``start`` on a GPU with layout ``key`` (empty: it would anyway); ``None`` when it cannot get
    there (``start`` does not fit). DeviceTaintRules select one device each, so the list is what it costs."""
    blocked: set[tuple[int, int]] = set()
    while True:
        placed = first_fit(geom, key, [i], frozenset(blocked))
        if placed is None:
            return None
        taken = placed[1][0]
        if taken == start:
            return sorted(s for _, s in blocked)
        blocked.add((i, taken))


def driver_order(start: int) -> bytes:
    """Sort key of a placement among its profile's devices on one GPU, as the driver publishes them.

    The driver (dra-driver-nvidia-gpu ``driver.go``) sorts a GPU's devices by name, Go strings, so byte order;
    the names of one profile's devices on one GPU (``gpu-<i>-mig-<profile>-<id>-<start>``) differ only in the
    decimal start at the end, so their order is that of the starts' digits: "1" < "10" < "2"."""
    return str(start).encode()


Walk = tuple[tuple[tuple[int, int], ...], ...]
_WALKS: dict[int, tuple[Geometry, Walk]] = {}


def _walk(geom: Geometry) -> Walk:
    """Per profile index, its ``(start, mask)`` placements in the order the allocator walks them (cached per
    geometry object; the entry keeps the geometry alive, so its id is not reused, as in counters.counter_table)."""
    found = _WALKS.get(id(geom))
    if found is not None and found[0] is geom:
        return found[1]
    walk = tuple(tuple(sorted(p, key=lambda pm: driver_order(pm[0]))) for p in geom.placements)
    _WALKS[id(geom)] = (geom, walk)
    return walk


def fits(geom: Geometry, key: LayoutKey, i: int) -> int:
    """How many more devices of profile ``i`` the scheduler would allocate, one after another, on a GPU with
    layout ``key``: the what-if on Kubernetes, where the counters (published or NVIDIA's) decide."""
    n = 0
    while (placed := first_fit(geom, key, [i])) is not None:
        key = placed[0]
        n += 1
    return n


def order_safe(geom: Geometry, base: LayoutKey, claims: Sequence[Claim]) -> bool:
    """Whether every order of allocating ``claims`` on a GPU holding ``base`` fits them all."""
    for order in permutations(claims):
        key = base
        for claim in order:
            placed = first_fit(geom, key, claim)
            if placed is None:
                return False
            key = placed[0]
    return True


def admits(geom: Geometry, base: LayoutKey, waiting: Sequence[Claim], claim: Claim) -> bool:
    """Whether a GPU holding ``base`` with the unallocated ``waiting`` claims may take ``claim`` too."""
    return len(waiting) < MAX_IN_FLIGHT_PER_GPU and order_safe(geom, base, [*waiting, claim])


def predict(geom: Geometry, base: LayoutKey, waiting: Sequence[Claim]) -> list[list[int] | None]:
    """The starts the scheduler will give each waiting claim if it takes them in this order (first waiting
    first); ``None`` for a claim that no longer fits (the cluster took its room, see kube_sync)."""
    key = base
    out: list[list[int] | None] = []
    for claim in waiting:
        placed = first_fit(geom, key, claim)
        if placed is None:
            out.append(None)
            continue
        key, starts = placed
        out.append(starts)
    return out
