"""Which sets of GPU instances can coexist on one GPU, and what fits next to them.

A *layout* is the set of GPU instances on one GPU. It is valid when (reference §2; the catalog has the
tables):

1. every instance sits on one of its profile's placements;
2. no two instances share a memory slot;
3. no profile has more than ``max_count`` instances;
4. at most one instance has media extensions (``+me`` or ``+me.all``): the whole GPU has a single OFA
   engine, and every media-extension profile takes it (derived from the lgip engine counts; the MIG
   guide says "a single 1g profile can include media extensions");
5. while a ``+me.all`` instance exists, every other instance is a ``-me`` profile (nvml.h);
6. the instances' compute slices add up to at most the GPU's compute slices (implied by 1-2 on every
   table we have; checked anyway because agent-reported tables may differ).

Validity is *downward closed*: removing instances from a valid layout keeps it valid. The
reconfiguration planner relies on this to order operations (all destroys, then all creates).

:class:`Geometry` compiles a model into bitmasks once, and caches per layout (a :data:`LayoutKey`) what
fits next to it, so the placement engine does dictionary lookups instead of geometry per decision.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from .catalog import GpuModel, UnknownProfile

#: One instance, packed: ``(start << 8) | (profile_index << 1) | free``. Sorting codes sorts by start.
Code = int
#: A layout: the sorted codes of its instances. Hashable, cheap to compare; the engine indexes by it.
LayoutKey = tuple[Code, ...]

EMPTY: LayoutKey = ()


def encode(start: int, profile_index: int, free: bool) -> Code:
    return (start << 8) | (profile_index << 1) | int(free)


def decode(code: Code) -> tuple[int, int, bool]:
    """``(start, profile_index, free)`` of a packed instance."""
    return code >> 8, (code >> 1) & 0x7F, bool(code & 1)


@dataclass(frozen=True, slots=True)
class Option:
    """One way to host one more instance of a profile on a GPU: reuse a free instance or create one."""

    start: int
    reuse: bool
    after: LayoutKey


@dataclass(slots=True)
class LayoutInfo:
    """Facts about one layout, computed once. ``free`` instances exist on the GPU but hold no allocation."""

    key: LayoutKey
    occupied: int  # memory-slot bitmask of all instances, free ones included
    counts: tuple[int, ...]  # instances per profile index
    used_compute: int  # compute slices of all instances
    allocated_compute: int  # compute slices of the instances that hold an allocation
    allocated_instances: int
    media: int  # instances with media extensions
    media_all: bool  # a +me.all instance exists
    with_media_engines: int  # instances that are not -me
    options: list[tuple[Option, ...] | None] = field(default_factory=list)
    fit: tuple[int, ...] | None = None


class Geometry:
    """A GPU model compiled for fast layout questions. Get one with :func:`geometry`."""

    __slots__ = (
        "_infos",
        "_named",
        "compute",
        "full_mask",
        "index",
        "max_count",
        "media",
        "media_all",
        "model",
        "no_media",
        "placements",
        "profiles",
        "size",
        "width",
    )

    def __init__(self, model: GpuModel) -> None:
        if len(model.profiles) > 127:
            raise ValueError("a layout code holds at most 127 profiles")
        self.model = model
        self.width = model.memory_slices
        self.full_mask = (1 << self.width) - 1
        self.profiles = model.profiles
        self.index = {p.name: i for i, p in enumerate(model.profiles)}
        self.compute = tuple(p.compute_slices for p in model.profiles)
        self.size = tuple(p.memory_slices for p in model.profiles)
        self.max_count = tuple(p.max_count for p in model.profiles)
        self.media = tuple(p.has_media_extensions for p in model.profiles)
        self.media_all = tuple(p.takes_all_media for p in model.profiles)
        self.no_media = tuple(p.excludes_media for p in model.profiles)
        self.placements = tuple(tuple((pl.start, pl.mask) for pl in p.placements) for p in model.profiles)
        self._infos: dict[LayoutKey, LayoutInfo] = {}
        self._named: dict[tuple[tuple[str, int, bool], ...], LayoutKey] = {}

    def profile_index(self, name: str) -> int:
        try:
            return self.index[name]
        except KeyError:
            self.model.profile(name)  # raises UnknownProfile with the list of known names
            raise UnknownProfile(name) from None

    def key(self, instances: Iterable[tuple[int, int, bool]]) -> LayoutKey:
        """Layout key of ``(profile_index, start, free)`` triples (not validated; see :meth:`violations`)."""
        return tuple(sorted(encode(s, i, f) for i, s, f in instances))

    def named_key(self, instances: tuple[tuple[str, int, bool], ...]) -> LayoutKey:
        """Layout key of ``(profile_name, start, free)`` triples (any order), validated; raises ``ValueError`` listing
        the broken rules. Cached: a fleet has few distinct layouts, so building an index of thousands of
        GPUs validates each distinct layout once."""
        found = self._named.get(instances)
        if found is not None:
            return found
        problems = self.violations([(name, start) for name, start, _ in instances])
        if problems:
            raise ValueError("; ".join(problems))
        key = self.key((self.index[name], start, free) for name, start, free in instances)
        if len(self._named) < 100_000:  # bounded: agent reports cannot grow it without limit
            self._named[instances] = key
        return key

    def info(self, key: LayoutKey) -> LayoutInfo:
        """Cached facts about a layout. ``key`` must be valid (keys made by this module are)."""
        found = self._infos.get(key)
        if found is not None:
            return found
        occupied = used = allocated = n_alloc = media = with_engines = 0
        media_all = False
        counts = [0] * len(self.profiles)
        for code in key:
            start, i, free = decode(code)
            occupied |= ((1 << self.size[i]) - 1) << start
            counts[i] += 1
            used += self.compute[i]
            if not free:
                allocated += self.compute[i]
                n_alloc += 1
            media += self.media[i]
            media_all = media_all or self.media_all[i]
            with_engines += not self.no_media[i]
        made = LayoutInfo(
            key=key,
            occupied=occupied,
            counts=tuple(counts),
            used_compute=used,
            allocated_compute=allocated,
            allocated_instances=n_alloc,
            media=media,
            media_all=media_all,
            with_media_engines=with_engines,
            options=[None] * len(self.profiles),
        )
        self._infos[key] = made
        return made

    def can_create(self, info: LayoutInfo, i: int, mask: int) -> bool:
        """Would profile ``i`` on ``mask`` keep the layout valid (rules 2-6; rule 1 is the caller's)."""
        if mask & info.occupied or info.counts[i] >= self.max_count[i]:
            return False
        if info.used_compute + self.compute[i] > self.model.compute_slices:
            return False
        if self.media[i] and info.media:
            return False
        if self.media_all[i] and info.with_media_engines:
            return False
        return not (info.media_all and not self.no_media[i])

    def options(self, key: LayoutKey, i: int) -> tuple[Option, ...]:
        """Every way to host one more instance of profile ``i``: free instances of ``i`` first (in slot
        order), then creatable placements (in slot order)."""
        info = self.info(key)
        cached = info.options[i]
        if cached is not None:
            return cached
        out: list[Option] = []
        for n, code in enumerate(key):
            start, j, free = decode(code)
            if free and j == i:
                after = (*key[:n], code & ~1, *key[n + 1 :])
                out.append(Option(start, True, after))
        for start, mask in self.placements[i]:
            if self.can_create(info, i, mask):
                out.append(Option(start, False, tuple(sorted((*key, encode(start, i, False))))))
        result = tuple(out)
        info.options[i] = result
        return result

    def fit(self, key: LayoutKey) -> tuple[int, ...]:
        """Per profile index: how many more instances of that profile alone this GPU can host now
        (free instances of it plus the most it can create), computed exactly."""
        info = self.info(key)
        if info.fit is not None:
            return info.fit
        out = []
        for i in range(len(self.profiles)):
            reusable = sum(1 for code in key if code & 1 and (code >> 1) & 0x7F == i)
            out.append(reusable + self._max_creatable(info, i))
        info.fit = tuple(out)
        return info.fit

    def _max_creatable(self, info: LayoutInfo, i: int) -> int:
        cap = self.max_count[i] - info.counts[i]
        spare = self.model.compute_slices - info.used_compute
        cap = min(cap, spare // self.compute[i]) if self.compute[i] else cap
        if self.media[i]:
            cap = min(cap, 0 if info.media else 1)
        if (self.media_all[i] and info.with_media_engines) or (info.media_all and not self.no_media[i]):
            cap = 0
        if cap <= 0:
            return 0
        masks = [m for _, m in self.placements[i] if not m & info.occupied]

        # Exact maximum set of pairwise disjoint placements (at most a dozen candidates).
        def best(k: int, used: int) -> int:
            if k == len(masks):
                return 0
            skip = best(k + 1, used)
            if masks[k] & used:
                return skip
            return max(skip, 1 + best(k + 1, used | masks[k]))

        return min(cap, best(0, 0))

    def violations(self, instances: Sequence[tuple[str, int]]) -> list[str]:
        """Why a layout of ``(profile_name, start)`` pairs is not valid; empty when it is."""
        problems: list[str] = []
        occupied = used = media = with_engines = 0
        media_all = False
        counts = [0] * len(self.profiles)
        for name, start in instances:
            if name not in self.index:
                problems.append(f"{name} is not a MIG profile of {self.model.name}")
                continue
            i = self.index[name]
            mask = dict(self.placements[i]).get(start)
            if mask is None:
                legal = ", ".join(str(s) for s, _ in self.placements[i])
                problems.append(f"{name} cannot start at memory slot {start} (legal starts: {legal})")
                continue
            if mask & occupied:
                problems.append(f"{name} at {start} overlaps another instance's memory slots")
            occupied |= mask
            counts[i] += 1
            used += self.compute[i]
            media += self.media[i]
            media_all = media_all or self.media_all[i]
            with_engines += not self.no_media[i]
        for i, n in enumerate(counts):
            if n > self.max_count[i]:
                problems.append(f"{n} instances of {self.profiles[i].name}; at most {self.max_count[i]}")
        if media > 1:
            problems.append(f"{media} instances with media extensions; at most 1 per GPU")
        if media_all and with_engines > 1:
            problems.append("a +me.all instance allows only -me instances beside it")
        if used > self.model.compute_slices:
            problems.append(f"{used} compute slices in use; the GPU has {self.model.compute_slices}")
        return problems

    def is_valid(self, instances: Sequence[tuple[str, int]]) -> bool:
        return not self.violations(instances)

    def describe(self, key: LayoutKey) -> list[tuple[str, int, bool]]:
        """``(profile_name, start, free)`` of each instance of a layout, in slot order."""
        return [(self.profiles[i].name, s, f) for s, i, f in map(decode, key)]

    def all_layouts(self, free_instances: bool = False) -> Iterator[LayoutKey]:
        """Every valid layout of allocated instances (and, optionally, free ones too), each once."""

        def walk(slot: int, key: LayoutKey) -> Iterator[LayoutKey]:
            if slot >= self.width:
                yield key
                return
            yield from walk(slot + 1, key)
            info = self.info(key)
            for i in range(len(self.profiles)):
                for start, mask in self.placements[i]:
                    if start == slot and self.can_create(info, i, mask):
                        for free in (False, True) if free_instances else (False,):
                            nxt = tuple(sorted((*key, encode(start, i, free))))
                            yield from walk(slot + self.size[i], nxt)

        yield from walk(0, EMPTY)


_GEOMETRIES: dict[int, tuple[GpuModel, Geometry]] = {}


def geometry(model: GpuModel) -> Geometry:
    """The compiled :class:`Geometry` of a model (one per model object per process).

    Keyed by identity: hashing a model means hashing all its profiles, too slow per decision.
    The cache keeps the model alive so the id cannot be reused.
    """
    found = _GEOMETRIES.get(id(model))
    if found is not None and found[0] is model:
        return found[1]
    made = Geometry(model)
    _GEOMETRIES[id(model)] = (model, made)
    return made


def layout_violations(model: GpuModel, instances: Sequence[tuple[str, int]]) -> list[str]:
    """Why ``(profile_name, start)`` pairs are not a valid layout on ``model``; empty when they are."""
    return geometry(model).violations(instances)


def is_valid_layout(model: GpuModel, instances: Sequence[tuple[str, int]]) -> bool:
    return not layout_violations(model, instances)
