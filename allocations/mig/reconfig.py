"""Reconfiguration planner for static MIG: destroy free instances so that a request fits.

Given one GPU's layout, where held instances (busy or idle) are immovable and free instances may be
destroyed, find the smallest set of operations that gives the request its instances:

* free instances of the requested profile are reused (no operation);
* otherwise the planner destroys as few free instances as possible, then creates the missing ones.

The number of operations is ``len(destroyed) + len(created)``, and the creates are fixed by the request,
so minimising destroys minimises operations. Free instances are at most one per memory slot (a dozen),
so the planner tries every subset in increasing size: exact, and microseconds on real grids.

Ordering: all destroys, then all creates. Validity is downward closed (see :mod:`.layout`): every
prefix of the destroys is a subset of the starting layout, every prefix of the creates a subset of the
final one, so every intermediate layout is valid. Creates carry explicit placements
(``nvmlDeviceCreateGpuInstanceWithPlacement``), which avoids the driver's ordering pitfalls.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from .catalog import GpuModel
from .fleet import Instance
from .layout import Geometry, LayoutKey, decode, geometry
from .policies import stranded


@dataclass(frozen=True, slots=True)
class Operation:
    """One NVML step on one GPU: destroy the GI at ``start``, or create ``profile`` at ``start``."""

    action: Literal["destroy", "create"]
    profile: str
    start: int


@dataclass(frozen=True, slots=True)
class ReconfigurationPlan:
    """Operations in execution order, the instances that serve the request, and the resulting layout.

    ``targets`` are ``(profile, start)`` of the request's instances (reused ones included);
    ``restored`` are the destroyed free instances that the optional ``restore`` step re-creates.
    """

    operations: tuple[Operation, ...]
    targets: tuple[tuple[str, int], ...]
    destroyed: tuple[Instance, ...]
    restored: tuple[tuple[str, int], ...]
    layout_after: tuple[Instance, ...]

    @property
    def cost(self) -> int:
        return len(self.operations)


def plan_reconfiguration(
    model: GpuModel,
    instances: Sequence[Instance],
    profile: str,
    count: int = 1,
    restore: bool = False,
) -> ReconfigurationPlan | None:
    """Smallest destroy/create plan that gives ``count`` instances of ``profile`` on this GPU, without
    touching held instances; ``None`` when even destroying every free instance is not enough.

    With ``restore``, destroyed free instances are re-created afterwards wherever they still fit (extra
    create operations that keep the static carve as close as possible to what the admin configured).
    Among plans with the fewest operations, the one that destroys the fewest memory slots wins, then the
    one whose new instances strand the least (the ``ours`` policy's own rank).
    """
    geom = geometry(model)
    i = geom.profile_index(profile)
    problems = geom.violations([(x.profile, x.start) for x in instances])
    if problems:
        raise ValueError(f"invalid layout on {model.name}: {'; '.join(problems)}")
    free = [x for x in instances if x.free]
    held = [x for x in instances if not x.free]
    reusable = [x for x in free if x.profile == profile][:count]
    needed = count - len(reusable)
    others = [x for x in free if x not in reusable]
    fixed = held + reusable
    for size in range(len(others) + 1):
        best: tuple[tuple[int, float], tuple[Instance, ...], tuple[int, ...]] | None = None
        for drop in itertools.combinations(others, size):
            keep = [x for x in others if x not in drop]
            key = _key(geom, fixed + keep)
            starts = _place(geom, key, i, needed)
            if starts is None:
                continue
            slots = sum(model.profile(x.profile).memory_slices for x in drop)
            score = (slots, _stranded_after(geom, key, i, starts))
            if best is None or score < best[0]:
                best = (score, drop, starts)
        if best is not None:
            return _plan(geom, instances, profile, reusable, best[1], best[2], restore)
    return None


def _key(geom: Geometry, instances: Sequence[Instance]) -> LayoutKey:
    return geom.key((geom.index[x.profile], x.start, x.free) for x in instances)


def _place(geom: Geometry, key: LayoutKey, i: int, needed: int) -> tuple[int, ...] | None:
    """Starts for ``needed`` new instances of profile ``i`` (slot order), or ``None`` if they do not fit."""
    if needed == 0:
        return ()
    for o in geom.options(key, i):
        if o.reuse:
            continue
        rest = _place(geom, o.after, i, needed - 1)
        if rest is not None:
            return (o.start, *rest)
    return None


def _stranded_after(geom: Geometry, key: LayoutKey, i: int, starts: tuple[int, ...]) -> float:
    current = [(j, s, f) for s, j, f in map(decode, key)]
    after = geom.key([*current, *((i, s, False) for s in starts)])
    return float(stranded(geom, after, frozenset(range(len(geom.profiles)))))


def _plan(
    geom: Geometry,
    instances: Sequence[Instance],
    profile: str,
    reusable: Sequence[Instance],
    drop: Sequence[Instance],
    starts: Sequence[int],
    restore: bool,
) -> ReconfigurationPlan:
    ops = [Operation("destroy", x.profile, x.start) for x in sorted(drop, key=lambda x: x.start)]
    ops += [Operation("create", profile, s) for s in starts]
    after = [x for x in instances if x not in drop]
    after += [Instance(profile, s) for s in starts]
    restored: list[tuple[str, int]] = []
    if restore:
        for x in sorted(drop, key=lambda x: -geom.model.profile(x.profile).memory_slices):
            key = _key(geom, after)
            option = next((o for o in geom.options(key, geom.index[x.profile]) if not o.reuse), None)
            if option is not None:
                ops.append(Operation("create", x.profile, option.start))
                after.append(Instance(x.profile, option.start))
                restored.append((x.profile, option.start))
    targets = tuple(sorted([(profile, x.start) for x in reusable] + [(profile, s) for s in starts]))
    return ReconfigurationPlan(
        operations=tuple(ops),
        targets=targets,
        destroyed=tuple(sorted(drop, key=lambda x: x.start)),
        restored=tuple(restored),
        layout_after=tuple(sorted(after, key=lambda x: x.start)),
    )


def intermediate_layouts(instances: Sequence[Instance], plan: ReconfigurationPlan) -> list[list[tuple[str, int]]]:
    """The layout after each operation of ``plan`` (for checks and for the worker's dry-run log)."""
    current = [(x.profile, x.start) for x in instances]
    out = []
    for op in plan.operations:
        if op.action == "destroy":
            current = [c for c in current if c != (op.profile, op.start)]
        else:
            current = [*current, (op.profile, op.start)]
        out.append(list(current))
    return out
