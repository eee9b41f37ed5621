"""The smallest MIG profile of a GPU model, or the smallest share of a whole GPU, that holds an estimate with
headroom, what it costs in quota units, and why each smaller profile does not do."""

from __future__ import annotations

import math
from dataclasses import dataclass

from allocations.advisor.estimate import GIB
from allocations.costs import Cost, gpu_equivalents
from allocations.mig.catalog import GpuModel, MigProfile
from allocations.sharing import units

#: The part of a slice's memory an estimate may fill: vLLM's default gpu_memory_utilization is 0.9, and
#: training frameworks fragment memory at least as much.
HEADROOM = 0.10
MIB = 1024**2


@dataclass(frozen=True, slots=True)
class Fit:
    """`profile` (MIG) or `share_mib` (a share of a whole GPU) is the choice; None for both when nothing in the
    pool holds the estimate. `refused` says, for each smaller choice, why it does not do."""

    profile: str | None
    memory_mib: int
    cost: Cost | None
    refused: tuple[tuple[str, str], ...]
    share_mib: int | None = None


def profile_memory_mib(model: GpuModel, profile: MigProfile) -> int:
    """Memory of an instance of `profile`: the catalog's figure, or its memory slots' part of the GPU's."""
    return profile.memory_mib or model.memory_mib * profile.memory_slices // model.memory_slices


def _gib(mib: float) -> str:
    return f"{mib / 1024:.1f} GiB"


def fit_profile(needed: float, model: GpuModel, offered: list[str], headroom: float = HEADROOM) -> Fit:
    """The offered profile with the fewest memory slots (then compute slices) whose memory, less the headroom,
    holds `needed` bytes."""
    profiles = sorted(
        (model.profile(name) for name in offered if model.has_profile(name)),
        key=lambda p: (p.memory_slices, p.compute_slices, p.name),
    )
    needed_mib = needed / MIB
    refused: list[tuple[str, str]] = []
    for p in profiles:
        memory = profile_memory_mib(model, p)
        usable = memory * (1 - headroom)
        if usable >= needed_mib:
            cost = Cost(p.compute_slices, p.memory_slices, gpu_equivalents(model, p.compute_slices, p.memory_slices))
            return Fit(p.name, memory, cost, tuple(refused))
        refused.append(
            (
                p.name,
                f"{_gib(memory)}, of which {_gib(usable)} usable with {headroom:.0%} headroom; "
                f"needs {_gib(needed_mib)}",
            )
        )
    if profiles:
        refused.append(
            (
                "",
                "MIG instances cannot be joined into one device for a model (no peer-to-peer between "
                "instances): use a pool with larger GPUs, a lower precision or a shorter context.",
            )
        )
    return Fit(None, 0, None, tuple(refused))


def fit_share(needed: float, gpu_memory_mib: int, *, mps: bool, headroom: float = HEADROOM) -> Fit:
    """The smallest whole-GiB share of a GPU shared whole that holds `needed` with headroom (MPS: the thread share
    left at 100 %, the pool's default)."""
    share_mib = math.ceil(needed / (1 - headroom) / GIB) * 1024
    if share_mib > gpu_memory_mib:
        return Fit(
            None,
            0,
            None,
            (
                (
                    "share",
                    f"needs {_gib(share_mib)} with {headroom:.0%} headroom; a whole GPU has {_gib(gpu_memory_mib)}",
                ),
            ),
        )
    c = units.share_cost(
        mps=mps, memory_mib=share_mib, thread_percentage=100 if mps else None, count=1, gpu_memory_mib=gpu_memory_mib
    )
    return Fit(None, share_mib, Cost(c.compute_percent, c.memory_gib, c.gpu_equivalents), (), share_mib=share_mib)
