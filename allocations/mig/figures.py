"""A GPU model as a node's driver publishes it, and where it disagrees with the catalog (pure Python).

Fleet discovery keeps, per GPU, the figures NVIDIA's DRA driver publishes (allocations/cluster/published.py,
GpuFigures rows): the counter set and every MIG profile x placement with what it consumes. Where they and the
catalog disagree, the cluster wins for that GPU: `model_from_figures` turns them into a :class:`GpuModel` (the
profiles and placements the driver offers, NVML's figures in them) whose counter table
(:func:`.counters.counter_table`) is the published one, so the layout rules, the scheduler prediction and the
what-if all follow the node. `disagreements` says, in words, where the two differ.

Input shapes (JSON, as stored): `counters` {name: value}, memory in MiB, memory-slice-<i> included; `devices`
[{"suffix", "profile", "profile_id", "start", "size", "counters": {name: value}}] in the driver's order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from .catalog import EngineCounts, GpuModel, MigProfile, Placement
from .counters import NAMES, CounterTable, counter_table, register_counter_table

_COMPUTE = re.compile(r"^(?P<g>\d+)g\.")
_MEMORY_SLICE = re.compile(r"^memory-slice-\d+$")


def _engines(counters: Mapping[str, int]) -> EngineCounts:
    return EngineCounts(
        dec=int(counters.get("decoders", 0)),
        enc=int(counters.get("encoders", 0)),
        ce=int(counters.get("copy-engines", 0)),
        jpeg=int(counters.get("jpeg-engines", 0)),
        ofa=int(counters.get("ofa-engines", 0)),
    )


def _figures_of(counters: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(int(counters.get(name, 0)) for name in NAMES)


def model_from_figures(
    product: str, counters: Mapping[str, int], devices: Sequence[Mapping[str, Any]], base: GpuModel | None
) -> GpuModel | None:
    """The model a GPU's published figures describe, or None when they hold no MIG device (MIG off).

    Profiles, placements, memory, multiprocessors and engines are the driver's. What the driver does not
    publish comes from `base` (the catalog's model) where it has the profile: the per-profile instance limit
    and aliases; a profile the catalog lacks gets one instance per placement (one in all with media
    extensions). The model's counter table is registered: the scheduler prediction uses the published
    counters for every GPU of this model object."""
    by_profile: dict[str, list[Mapping[str, Any]]] = {}
    for device in devices:
        by_profile.setdefault(str(device["profile"]), []).append(device)
    if not by_profile:
        return None
    profiles = []
    for name, found in by_profile.items():
        first = found[0]
        sizes = {int(d["size"]) for d in found}
        if len(sizes) != 1 or not sizes.pop():
            continue  # placements of different sizes: nothing we can model; the profile is not offered there
        size = int(first["size"])
        known = base.profile(name) if base is not None and base.has_profile(name) else None
        compute = _COMPUTE.match(name)
        consumed = first["counters"]
        media = "+me" in name
        profiles.append(
            MigProfile(
                name=name,
                profile_id=int(first["profile_id"]),
                compute_slices=int(compute["g"]) if compute else (known.compute_slices if known else 1),
                memory_slices=size,
                memory_mib=int(consumed.get("memory", 0)) or None,
                max_count=known.max_count if known else (1 if media else len(found)),
                placements=tuple(sorted({Placement(int(d["start"]), size) for d in found})),
                sm_count=int(consumed.get("multiprocessors", 0)) or None,
                engines=_engines(consumed),
            )
        )
    if not profiles:
        return None
    grid = sum(1 for name in counters if _MEMORY_SLICE.match(name)) or max(p.memory_slices for p in profiles)
    model = GpuModel(
        name=product or (base.name if base is not None else "GPU"),
        aliases=base.aliases if base is not None else (),
        compute_slices=base.compute_slices if base is not None else max(p.compute_slices for p in profiles),
        memory_slices=grid,
        memory_mib=int(counters.get("memory", 0)) or (base.memory_mib if base is not None else 0),
        profiles=tuple(profiles),
        unconfirmed=False,
        source="cluster",
    )
    register_counter_table(
        model,
        CounterTable(
            need=tuple(_figures_of(by_profile[p.name][0]["counters"]) for p in model.profiles),
            capacity=_figures_of(counters),
        ),
    )
    return model


def disagreements(catalog: GpuModel, published: GpuModel) -> list[str]:
    """Where a GPU's published figures differ from the catalog's model, in words (empty: they agree)."""
    out: list[str] = []
    mine = set(published.profile_names())
    theirs = set(catalog.profile_names())
    if theirs - mine:
        out.append(f"Not published: {', '.join(p for p in catalog.profile_names() if p not in mine)}.")
    if mine - theirs:
        extra = ", ".join(p for p in published.profile_names() if p not in theirs)
        out.append(f"Published, not in the catalog: {extra}.")
    if published.memory_slices != catalog.memory_slices:
        out.append(f"Memory slots: {published.memory_slices} published, {catalog.memory_slices} in the catalog.")
    ours = counter_table(catalog)
    cluster = counter_table(published)
    if ours.capacity is not None and cluster.capacity is not None and ours.capacity != cluster.capacity:
        out.append(f"GPU counters: {_differing(cluster.capacity, ours.capacity)}.")
    elif ours.capacity is None:
        out.append("GPU counters: the catalog has no NVIDIA figures for this GPU; the published ones apply.")
    for profile in published.profiles:
        if not catalog.has_profile(profile.name):
            continue
        known = catalog.profile(profile.name)
        starts = [p.start for p in profile.placements]
        if starts != [p.start for p in known.placements] or profile.memory_slices != known.memory_slices:
            out.append(
                f"{profile.name} placements: published {_slots(starts, profile.memory_slices)}, "
                f"catalog {_slots([p.start for p in known.placements], known.memory_slices)}."
            )
        published_need = cluster.need[published.profiles.index(profile)]
        catalog_need = ours.need[catalog.profiles.index(known)]
        if catalog_need is None:
            out.append(f"{profile.name} counters: no NVIDIA figures in the catalog; the published ones apply.")
        elif published_need is not None and published_need != catalog_need:
            out.append(f"{profile.name} counters: {_differing(published_need, catalog_need)}.")
    return out


def _slots(starts: Sequence[int], size: int) -> str:
    return ", ".join(str(s) for s in starts) + f" (size {size})"


def _differing(published: Sequence[int], catalog: Sequence[int]) -> str:
    return ", ".join(
        f"{name} {p} (catalog {c})" for name, p, c in zip(NAMES, published, catalog, strict=True) if p != c
    )
