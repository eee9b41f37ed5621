"""GPU models and their MIG profiles.

The built-in table is ``data/mig_profiles.json``, a copy of the project's shared reference table, with
its sources and its ``unconfirmed`` flags kept. A node agent that reads NVML reports the real profiles
and placements; :meth:`Catalog.from_nvml` builds models from those reports, and they win over the
built-in table (a reported model replaces the built-in one of the same name).

Invariants of a :class:`GpuModel` (checked in ``__post_init__``):

* every placement of a profile has ``size == profile.memory_slices`` and lies in ``[0, memory_slices)``;
* profile names are unique within a model;
* ``memory_slices`` of the model is the width of the placement grid (the largest placement size).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any


class UnknownGpuModel(KeyError):
    """The catalog has no GPU model of that name (nor alias)."""

    def __str__(self) -> str:
        # KeyError.__str__ would wrap the message in quotes.
        return str(self.args[0]) if self.args else "unknown GPU model"


class UnknownProfile(KeyError):
    """The GPU model has no MIG profile of that name."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown MIG profile"


@dataclass(frozen=True, slots=True, order=True)
class Placement:
    """A memory-slot range ``[start, start + size)`` on a GPU's placement grid."""

    start: int
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size

    @property
    def mask(self) -> int:
        """Bitmask of the memory slots this placement occupies (bit i = slot i)."""
        return ((1 << self.size) - 1) << self.start


@dataclass(frozen=True, slots=True)
class EngineCounts:
    """Media/copy engines of a GPU-instance profile, as ``nvidia-smi mig -lgip`` prints them."""

    dec: int = 0
    enc: int = 0
    ce: int = 0
    jpeg: int = 0
    ofa: int = 0


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU-instance profile of one GPU model.

    ``memory_slices`` is the placement size in grid units; ``placements`` are the only legal
    positions. Fields listed in ``unconfirmed_fields`` come from no source that shows them for this
    model (the reference copies them from a sibling model); NVML data should replace them.
    """

    name: str
    profile_id: int
    compute_slices: int
    memory_slices: int
    memory_mib: int | None
    max_count: int
    placements: tuple[Placement, ...]
    unconfirmed_fields: tuple[str, ...] = ()
    sm_count: int | None = None
    engines: EngineCounts | None = None

    @property
    def unconfirmed(self) -> bool:
        return bool(self.unconfirmed_fields)

    @property
    def has_media_extensions(self) -> bool:
        """``+me`` and ``+me.all`` profiles: at most one such instance per GPU (MIG guide)."""
        return "+me" in self.name

    @property
    def takes_all_media(self) -> bool:
        """``+me.all``: while one exists, only ``-me`` profiles may coexist (nvml.h)."""
        return self.name.endswith("+me.all")

    @property
    def excludes_media(self) -> bool:
        """``-me`` profiles have no media engines and may coexist with ``+me.all``."""
        return self.name.endswith("-me")


@dataclass(frozen=True, slots=True)
class GpuModel:
    """A GPU product with MIG enabled: its grid, its profiles and where the data came from."""

    name: str
    aliases: tuple[str, ...]
    compute_slices: int
    memory_slices: int
    memory_mib: int
    profiles: tuple[MigProfile, ...]
    unconfirmed: bool = False
    source: str = "catalog"
    _by_name: Mapping[str, MigProfile] = field(default_factory=dict, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        by_name: dict[str, MigProfile] = {}
        for p in self.profiles:
            if p.name in by_name:
                raise ValueError(f"{self.name}: profile {p.name!r} is listed twice")
            by_name[p.name] = p
            for pl in p.placements:
                if pl.size != p.memory_slices or pl.start < 0 or pl.end > self.memory_slices:
                    raise ValueError(
                        f"{self.name}: placement {pl.start}:{pl.size} of {p.name} does not fit a "
                        f"{self.memory_slices}-slot grid with size {p.memory_slices}"
                    )
        object.__setattr__(self, "_by_name", by_name)

    def profile(self, name: str) -> MigProfile:
        try:
            return self._by_name[name]
        except KeyError:
            raise UnknownProfile(
                f"{self.name} has no MIG profile {name!r}; known profiles: {', '.join(self.profile_names())}"
            ) from None

    def has_profile(self, name: str) -> bool:
        return name in self._by_name

    def profile_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.profiles)

    def profile_by_id(self, profile_id: int) -> MigProfile:
        for p in self.profiles:
            if p.profile_id == profile_id:
                return p
        raise UnknownProfile(f"{self.name} has no MIG profile with NVML GI profile id {profile_id}")


def gpu_equivalents(model: GpuModel, compute_slices: int, memory_slices: int) -> float:
    """Share of a whole GPU that an instance takes: the larger of its compute and memory shares."""
    return max(compute_slices / model.compute_slices, memory_slices / model.memory_slices)


def smallest_profile_covering(
    model: GpuModel, compute_fraction: float, memory_mib: int | None = None
) -> MigProfile | None:
    """Smallest plain profile (no ``+me``/``+gfx``/``-me`` suffix) giving at least that share of compute
    and that much memory; ``None`` when even the whole GPU is too small. Ties go to fewer memory slots."""
    candidates = [
        p
        for p in model.profiles
        if "+" not in p.name
        and not p.name.endswith("-me")
        and p.compute_slices >= compute_fraction * model.compute_slices - 1e-9
        and (memory_mib is None or (p.memory_mib or _nominal_mib(model, p)) >= memory_mib)
    ]
    if not candidates:
        return None
    return min(candidates, key=lambda p: (p.compute_slices, p.memory_slices, p.profile_id))


def _nominal_mib(model: GpuModel, profile: MigProfile) -> int:
    # Profiles whose lgip memory is unconfirmed: fall back to the share of the grid they occupy.
    return model.memory_mib * profile.memory_slices // model.memory_slices


@dataclass(frozen=True, slots=True)
class NvmlProfileReport:
    """What an agent reads for one GI profile: ``nvmlDeviceGetGpuInstanceProfileInfo`` (``.id``,
    ``.sliceCount``, ``.instanceCount``, ``.memorySizeMB``, ``.name``) plus
    ``nvmlDeviceGetGpuInstancePossiblePlacements``."""

    name: str
    profile_id: int
    slice_count: int
    instance_count: int
    memory_mib: int
    placements: Sequence[tuple[int, int]]
    sm_count: int | None = None
    engines: EngineCounts | None = None


@dataclass(frozen=True, slots=True)
class NvmlGpuReport:
    """What an agent reads for one GPU: ``nvmlDeviceGetName``, total memory and its GI profiles."""

    name: str
    memory_mib: int
    profiles: Sequence[NvmlProfileReport]


class Catalog:
    """Immutable set of GPU models, looked up by product name (or an alias, case-insensitively)."""

    __slots__ = ("_lookup", "_models")

    def __init__(self, models: Iterable[GpuModel]) -> None:
        self._models: dict[str, GpuModel] = {}
        self._lookup: dict[str, str] = {}
        for m in models:
            self._models[m.name] = m
        for m in self._models.values():
            for key in (m.name, *m.aliases):
                self._lookup.setdefault(key.casefold(), m.name)
        # Canonical names win over aliases of other models.
        for m in self._models.values():
            self._lookup[m.name.casefold()] = m.name

    def model(self, name: str) -> GpuModel:
        canonical = self._lookup.get(name.casefold())
        if canonical is None:
            raise UnknownGpuModel(
                f"no GPU model {name!r} in the MIG catalog; known models: {', '.join(self.model_names())}"
            )
        return self._models[canonical]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.casefold() in self._lookup

    def model_names(self) -> tuple[str, ...]:
        return tuple(self._models)

    def models(self) -> tuple[GpuModel, ...]:
        return tuple(self._models.values())

    def with_models(self, models: Iterable[GpuModel]) -> Catalog:
        """A new catalog where the given models replace same-named ones."""
        merged = dict(self._models)
        for m in models:
            merged[m.name] = m
        return Catalog(merged.values())

    @classmethod
    def from_nvml(cls, reports: Iterable[NvmlGpuReport], base: Catalog | None = None) -> Catalog:
        """Models as the node agent read them from NVML; they replace the same-named models of ``base``.

        Reported values are hardware truth, so the models have no unconfirmed fields. Aliases and the
        per-profile SM/engine data missing from the report are kept from ``base`` when it has the model.
        """
        built = [model_from_nvml(r, base) for r in reports]
        return (base or Catalog(())).with_models(built)


def model_from_nvml(report: NvmlGpuReport, base: Catalog | None = None) -> GpuModel:
    """One :class:`GpuModel` from one agent report (see :meth:`Catalog.from_nvml`)."""
    known = base.model(report.name) if base is not None and report.name in base else None
    profiles = []
    for r in report.profiles:
        if not r.placements:
            continue  # NVML lists profiles this GPU cannot place (e.g. needs a newer driver).
        sizes = {size for _, size in r.placements}
        if len(sizes) != 1:
            raise ValueError(f"{report.name}: profile {r.name} reports placements of sizes {sorted(sizes)}")
        old = known.profile(r.name) if known is not None and known.has_profile(r.name) else None
        profiles.append(
            MigProfile(
                name=r.name,
                profile_id=r.profile_id,
                compute_slices=r.slice_count,
                memory_slices=sizes.pop(),
                memory_mib=r.memory_mib,
                max_count=r.instance_count,
                placements=tuple(sorted(Placement(s, z) for s, z in r.placements)),
                sm_count=r.sm_count if r.sm_count is not None else (old.sm_count if old else None),
                engines=r.engines if r.engines is not None else (old.engines if old else None),
            )
        )
    if not profiles:
        raise ValueError(f"{report.name}: the report has no placeable MIG profile")
    grid = max(p.memory_slices for p in profiles)
    return GpuModel(
        name=report.name,
        aliases=known.aliases if known else (),
        # The full-GPU profile's slice count; with no such profile, the largest count NVML reported.
        compute_slices=max(p.compute_slices for p in profiles),
        memory_slices=grid,
        memory_mib=report.memory_mib,
        profiles=tuple(profiles),
        unconfirmed=False,
        source="nvml",
    )


def _aliases(name: str, aka: Sequence[str]) -> tuple[str, ...]:
    out: list[str] = []
    if name.startswith("NVIDIA "):
        out.append(name.removeprefix("NVIDIA "))  # older drivers print the name without the vendor
    for text in aka:
        alias = text.split(" (", 1)[0].strip()
        if alias and " share" not in alias and alias not in out:  # skip prose such as "... shares the table"
            out.append(alias)
    return tuple(out)


def _profile_from_json(raw: Mapping[str, Any]) -> MigProfile:
    eng = raw.get("engines")
    fields = tuple(raw.get("unconfirmed_fields", ()))
    if raw.get("unconfirmed") and not fields:
        fields = ("unspecified",)
    return MigProfile(
        name=raw["name"],
        profile_id=int(raw["nvml_profile_id"]),
        compute_slices=int(raw["compute_slices"]),
        memory_slices=int(raw["memory_slices"]),
        memory_mib=raw.get("memory_mib"),
        max_count=int(raw["max_count"]),
        placements=tuple(Placement(int(p["start"]), int(p["size"])) for p in raw["placements"]),
        unconfirmed_fields=fields,
        sm_count=raw.get("sm_count"),
        engines=EngineCounts(**{k: int(v) for k, v in eng.items()}) if eng else None,
    )


def catalog_from_json(data: Mapping[str, Any]) -> Catalog:
    """Build a catalog from the reference JSON layout (``{"models": {name: {...}}}``)."""
    models = []
    for name, raw in data["models"].items():
        models.append(
            GpuModel(
                name=name,
                aliases=_aliases(name, raw.get("aka", ())),
                compute_slices=int(raw["compute_slices"]),
                memory_slices=int(raw["memory_slices"]),
                memory_mib=int(raw["memory_mib"]),
                profiles=tuple(_profile_from_json(p) for p in raw["profiles"]),
                unconfirmed=bool(raw.get("unconfirmed", False)),
            )
        )
    return Catalog(models)


@functools.cache
def load_catalog() -> Catalog:
    """The built-in catalog (read once per process)."""
    text = resources.files("allocations.mig").joinpath("data/mig_profiles.json").read_text(encoding="utf-8")
    return catalog_from_json(json.loads(text))
