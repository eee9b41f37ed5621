"""mig-parted configs for NVIDIA's MIG manager (GPU Operator), generated from a desired layout per GPU.

MIG-manager mode (pool mode ``static-manager``) does not create instances itself: it writes an entry of
``mig-configs`` into the manager's ConfigMap and points the node's ``nvidia.com/mig.config`` label at it; the
manager on the node applies it (reference dra-mig.md §4). The format (mig-parted ``api/spec/v1``)::

    version: v1
    mig-configs:
      fatia-3f2a9c41d0b7:
      - devices: [0, 1]
        mig-enabled: true
        mig-devices: {1g.10gb: 3, 2g.20gb: 2}

mig-parted has no placement field: an entry says how many instances of each profile a GPU gets, and the
driver picks the slots. So this mode chooses counts, not slots; the portal learns the slots afterwards from
the republished ResourceSlices (or the agent's inventory). What this module guarantees is that every count it
writes can be packed on the GPU at all (:func:`find_packing` searches the catalog's placement rules), so the
manager is never sent a config that must fail.

Names are ``fatia-<12 hex digits>`` of a hash of the entries, so the same layout always gets the same name
(a repeated call changes nothing) and entries written by others are never confused with ours. Pure Python, no
Django.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import yaml

from .catalog import GpuModel
from .layout import EMPTY, Geometry, LayoutKey, geometry

CONFIG_PREFIX = "fatia-"
CONFIG_KEY = "config.yaml"

#: profile name -> count, per GPU index of one node.
NodeLayout = Mapping[int, Mapping[str, int]]


class InvalidManagerLayout(ValueError):
    """A layout the MIG manager cannot apply; ``problems`` lists every reason (one line each)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class InvalidManagerConfig(ValueError):
    """The ConfigMap's existing ``config.yaml`` is not a mig-parted v1 config; Fatia will not overwrite it."""


def find_packing(model: GpuModel, counts: Mapping[str, int]) -> list[tuple[str, int]] | None:
    """One valid layout ``[(profile, start)]`` holding exactly ``counts`` on ``model``, or ``None`` when no
    packing exists (every placement rule of :mod:`.layout` applies). Larger profiles are placed first; the
    search is exhaustive, and small (a few hundred layouts on an 8-slot grid)."""
    geom = geometry(model)
    wanted = sorted(
        ((geom.profile_index(name), n) for name, n in counts.items() if n > 0),
        key=lambda item: (-geom.size[item[0]], item[0]),
    )
    order = [i for i, n in wanted for _ in range(n)]
    seen: set[tuple[LayoutKey, int]] = set()

    def place(key: LayoutKey, k: int) -> LayoutKey | None:
        if k == len(order):
            return key
        if (key, k) in seen:
            return None
        seen.add((key, k))
        for option in geom.options(key, order[k]):
            if not option.reuse:
                found = place(option.after, k + 1)
                if found is not None:
                    return found
        return None

    key = place(EMPTY, 0)
    if key is None:
        return None
    return [(name, start) for name, start, _ in geom.describe(key)]


def layout_problems(model: GpuModel, layout: NodeLayout) -> list[str]:
    """Why ``layout`` cannot be applied to GPUs of ``model``; empty when every GPU's counts can be packed."""
    geom = geometry(model)
    problems: list[str] = []
    if not layout:
        problems.append("the layout names no GPU")
    for index in sorted(layout):
        counts = layout[index]
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            problems.append(f"GPU index {index!r} is not a non-negative integer")
            continue
        known = True
        for name, n in sorted(counts.items()):
            if name not in geom.index:
                problems.append(
                    f"GPU {index}: {name!r} is not a MIG profile of {model.name} "
                    f"(known: {', '.join(model.profile_names())})"
                )
                known = False
            elif not isinstance(n, int) or isinstance(n, bool) or n < 0:
                problems.append(f"GPU {index}: the count of {name} must be a non-negative integer, not {n!r}")
                known = False
        if known and find_packing(model, counts) is None:
            why = _why(geom, counts)
            problems.append(f"GPU {index}: {_describe(counts)} cannot be packed on one {model.name}{why}")
    return problems


def _describe(counts: Mapping[str, int]) -> str:
    return " + ".join(f"{n} x {name}" for name, n in sorted(counts.items()) if n > 0) or "nothing"


def _why(geom: Geometry, counts: Mapping[str, int]) -> str:
    """The first simple rule the counts break, as a hint; the packing search is the real judge."""
    model = geom.model
    compute = sum(model.profile(name).compute_slices * n for name, n in counts.items())
    memory = sum(model.profile(name).memory_slices * n for name, n in counts.items())
    if compute > model.compute_slices:
        return f" ({compute} compute slices; the GPU has {model.compute_slices})"
    if memory > model.memory_slices:
        return f" ({memory} memory slices; the GPU has {model.memory_slices})"
    for name, n in counts.items():
        if n > model.profile(name).max_count:
            return f" (at most {model.profile(name).max_count} x {name})"
    present = [model.profile(name) for name, n in counts.items() if n > 0]
    if sum(counts[p.name] for p in present if p.has_media_extensions) > 1:
        return " (at most one instance with media extensions per GPU)"
    if any(p.takes_all_media for p in present) and sum(counts[p.name] for p in present if not p.excludes_media) > 1:
        return " (a +me.all instance allows only -me instances beside it)"
    return " (no arrangement of their placements avoids an overlap)"


def config_entries(layout: NodeLayout) -> list[dict[str, Any]]:
    """The ``mig-configs`` entry list for one node: GPUs with the same counts share one entry
    (``devices: [i, j]``), entries ordered by their first GPU index; zero counts are left out, so a GPU with
    none gets ``mig-devices: {}`` (MIG on, no instances)."""
    groups: dict[tuple[tuple[str, int], ...], list[int]] = {}
    for index in sorted(layout):
        devices = tuple(sorted((name, n) for name, n in layout[index].items() if n > 0))
        groups.setdefault(devices, []).append(index)
    entries = [
        {"devices": indices, "mig-enabled": True, "mig-devices": dict(devices)} for devices, indices in groups.items()
    ]
    return sorted(entries, key=lambda e: e["devices"][0])


def config_name(entries: list[dict[str, Any]]) -> str:
    """``fatia-<hash>``: the same entries always give the same name, different ones a different name."""
    canonical = json.dumps(entries, sort_keys=True, separators=(",", ":"))
    return CONFIG_PREFIX + hashlib.sha256(canonical.encode()).hexdigest()[:12]


def build_config(model: GpuModel, layout: NodeLayout) -> tuple[str, list[dict[str, Any]]]:
    """Validate ``layout`` against ``model`` and return its config name and entries; raises
    :class:`InvalidManagerLayout` listing every problem."""
    problems = layout_problems(model, layout)
    if problems:
        raise InvalidManagerLayout(problems)
    entries = config_entries(layout)
    return config_name(entries), entries


def parse_config(text: str | None) -> dict[str, Any]:
    """The ConfigMap's ``config.yaml`` as a dict (an empty v1 config for a missing or empty key)."""
    if not text or not text.strip():
        return {"version": "v1", "mig-configs": {}}
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidManagerConfig(f"{CONFIG_KEY} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict) or data.get("version") != "v1":
        raise InvalidManagerConfig(f"{CONFIG_KEY} is not a mig-parted config of version v1")
    configs = data.get("mig-configs")
    if configs is None:
        data["mig-configs"] = {}
    elif not isinstance(configs, dict):
        raise InvalidManagerConfig(f"{CONFIG_KEY}: mig-configs is not a mapping of config names")
    return data


def merged_config(text: str | None, name: str, entries: list[dict[str, Any]]) -> str | None:
    """``config.yaml`` with Fatia's entry ``name`` added, every other entry (ours and others') kept as it was;
    ``None`` when it already holds exactly that entry (nothing to write).

    A foreign config of the same name is never replaced: Fatia's names carry a hash, so a clash means someone
    copied one; :class:`InvalidManagerConfig` says so rather than overwrite their entry.
    """
    data = parse_config(text)
    configs: dict[str, Any] = data["mig-configs"]
    if name in configs:
        if configs[name] == entries:
            return None
        raise InvalidManagerConfig(f"{CONFIG_KEY} already has a different config named {name}")
    configs[name] = entries
    return render_config(data)


def render_config(data: Mapping[str, Any]) -> str:
    """YAML as mig-parted reads it: ``version`` first, then the configs in name order."""
    ordered = {"version": data.get("version", "v1"), **{k: v for k, v in data.items() if k != "version"}}
    ordered["mig-configs"] = dict(sorted(dict(data.get("mig-configs") or {}).items()))
    return yaml.safe_dump(ordered, sort_keys=False, default_flow_style=None, width=120)
