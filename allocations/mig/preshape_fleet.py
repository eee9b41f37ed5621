"""Pre-shaping scored on the whole pool's free instances, by evidence (issue 12's last static-MIG question).

:mod:`.preshape` shapes each GPU alone toward the layout that serves the learnt mix longest. Measured
(docs/benchmarks.md), that does not cut the reconfigurations requests wait for: every GPU drifts to the same
mix-shaped layout, so the pool holds many free instances of the common profiles and too few of the rare large
ones, and each reshape destroys instances another request would have taken.

Here the question is asked of the pool: a request waits for a reconfiguration only when NO GPU has a free
instance of its profile. Over the next ``horizon`` requests the mix expects ``horizon * w[p]`` of profile ``p``;
the pool's free instances cover ``sum_p min(free[p], horizon * w[p])`` of them (``coverage``). A quiet-period
change is made only where it raises that coverage by at least ``margin`` requests after paying ``op_cost`` per
operation, one GPU at a time, at most ``max_gpus`` per quiet period, never on a GPU in ``busy`` (a claim or a
reconfiguration in flight). Free instances of a profile the pool has no more of than it expects to need are
never traded away (their loss lowers the coverage), which keeps large free instances for large requests.

Each GPU's possible free layouts (every valid layout keeping its held instances where they are) are
enumerated once per distinct layout, and reduced to the fewest operations per free-instance count vector.
Operations are destroys then creates, valid at every step as in :mod:`.preshape`. Pure Python, no Django.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from .catalog import GpuModel
from .fleet import Instance
from .layout import geometry
from .preshape import _layouts
from .reconfig import Operation

HORIZON = 16  # requests looked ahead
OP_COST = 0.25  # expected requests one operation must buy
MARGIN = 1.0  # smallest coverage gain, in requests, worth a change
MAX_GPUS = 2  # changes per quiet period


@dataclass(frozen=True, slots=True)
class GpuChange:
    position: int  # index into the GPUs given
    operations: tuple[Operation, ...]
    layout_after: tuple[Instance, ...]
    gain: float  # coverage gained, in requests, net of the operations' cost


def coverage(free: Mapping[str, int], want: Mapping[str, float]) -> float:
    """Expected requests among the next ones that find a free instance of their profile somewhere."""
    return sum(min(free.get(p, 0), n) for p, n in want.items())


Counts = tuple[tuple[str, int], ...]


Option = tuple[Counts, int, frozenset[tuple[str, int]]]
_OPTIONS: dict[tuple[str, tuple[tuple[int, str, bool], ...]], tuple[Option, ...]] = {}


def _options(model: GpuModel, layout: tuple[tuple[int, str, bool], ...]) -> tuple[Option, ...]:
    """Per reachable free-instance count vector of a GPU holding ``layout`` ((start, profile, free) triples), the
    fewest operations and a target free layout reaching it. Cached per model and layout (bounded)."""
    found = _OPTIONS.get((model.name, layout))
    if found is not None:
        return found
    held = {(p, s) for s, p, free in layout if not free}
    current = frozenset((p, s) for s, p, free in layout if free)
    best: dict[Counts, tuple[int, frozenset[tuple[str, int]]]] = {}
    for candidate in _layouts(geometry(model)):
        if not held <= candidate:
            continue
        free = frozenset(candidate - held)
        ops = len(current - free) + len(free - current)
        counts = tuple(sorted(Counter(p for p, _ in free).items()))
        known = best.get(counts)
        if known is None or (ops, sorted(free)) < (known[0], sorted(known[1])):
            best[counts] = (ops, free)
    options = tuple((counts, ops, free) for counts, (ops, free) in sorted(best.items()))
    if len(_OPTIONS) < 20_000:
        _OPTIONS[(model.name, layout)] = options
    return options


def plan_fleet_preshape(
    model: GpuModel,
    gpus: Sequence[Sequence[Instance]],
    weights: Mapping[str, float],
    *,
    busy: Collection[int] = (),
    allowed: Collection[str] | None = None,
    keep_free_gpus: bool = False,
    horizon: int = HORIZON,
    op_cost: float = OP_COST,
    margin: float = MARGIN,
    max_gpus: int = MAX_GPUS,
) -> list[GpuChange]:
    """The GPU changes (at most ``max_gpus``, best first) that raise the pool's coverage of the next ``horizon``
    requests under ``weights`` (profile -> share) by ``margin`` each, net of ``op_cost`` per operation. Only
    profiles in ``allowed`` (all when None) are created; GPUs in ``busy`` (positions) are never changed, nor, with
    ``keep_free_gpus``, GPUs that hold nothing (whole free GPUs stay one contiguous run for large requests)."""
    total = sum(weights.values()) or 1.0
    want = {p: horizon * w / total for p, w in weights.items() if w > 0}
    free: Counter[str] = Counter(x.profile for gpu in gpus for x in gpu if x.free)
    changes: list[GpuChange] = []
    changed: set[int] = set()
    for _ in range(max_gpus):
        base = coverage(free, want)
        best: tuple[float, int, int, frozenset[tuple[str, int]], Counter[str]] | None = None
        for position, instances in enumerate(gpus):
            if position in busy or position in changed or (keep_free_gpus and all(x.free for x in instances)):
                continue
            layout = tuple(sorted((x.start, x.profile, x.free) for x in instances))
            mine = Counter(x.profile for x in instances if x.free)
            current = {(x.profile, x.start) for x in instances if x.free}
            for counts, ops, target in _options(model, layout):
                if ops == 0 or (allowed is not None and any(p not in allowed for p, _ in target - current)):
                    continue
                after = free - mine + Counter(dict(counts))
                gain = coverage(after, want) - base - op_cost * ops
                if best is None or (gain, -ops, -position) > (best[0], -best[1], -best[2]):
                    best = (gain, ops, position, target, after)
        if best is None or best[0] < margin:
            break
        gain, _, position, target, after = best
        instances = gpus[position]
        current = {(x.profile, x.start) for x in instances if x.free}
        destroys = sorted(current - target, key=lambda x: (x[1], x[0]))
        creates = sorted(target - current, key=lambda x: (x[1], x[0]))
        operations = tuple(Operation("destroy", p, s) for p, s in destroys) + tuple(
            Operation("create", p, s) for p, s in creates
        )
        kept = [x for x in instances if not x.free]
        layout_after = tuple(sorted([*kept, *(Instance(p, s) for p, s in target)], key=lambda x: (x.start, x.profile)))
        changes.append(GpuChange(position, operations, layout_after, gain))
        changed.add(position)
        free = +after
    return changes
