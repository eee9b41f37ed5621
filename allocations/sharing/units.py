"""What a share of a whole GPU costs against quota (the common contract of issue 13).

In shared and MPS pools the quota row's two counters change meaning: `memory_slices_*` count GiB of GPU memory
(a share of `memory_mib` costs ceil(memory_mib / 1024)), `compute_slices_*` count percent of one GPU (MPS: the
share's active-thread percentage; time-sliced: its memory fraction of the GPU, ceil(100 * memory_mib /
gpu_memory_mib), since time-slicing guarantees no compute at all, so memory is the only fair measure).
GPU-equivalents of a request are memory_mib * count / gpu_memory_mib.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MIB_PER_GIB = 1024


@dataclass(frozen=True, slots=True)
class ShareCost:
    compute_percent: int
    memory_gib: int
    gpu_equivalents: float


def memory_units(memory_mib: int) -> int:
    """GiB of quota one share of `memory_mib` takes."""
    return math.ceil(memory_mib / MIB_PER_GIB)


def compute_units(*, mps: bool, memory_mib: int, thread_percentage: int | None, gpu_memory_mib: int) -> int:
    """Percent of one GPU one share takes: MPS its thread share, time-slicing its memory fraction."""
    if mps:
        return int(thread_percentage or 100)
    return math.ceil(100 * memory_mib / gpu_memory_mib)


def share_cost(
    *, mps: bool, memory_mib: int, thread_percentage: int | None, count: int, gpu_memory_mib: int
) -> ShareCost:
    compute = compute_units(
        mps=mps, memory_mib=memory_mib, thread_percentage=thread_percentage, gpu_memory_mib=gpu_memory_mib
    )
    return ShareCost(compute * count, memory_units(memory_mib) * count, memory_mib * count / gpu_memory_mib)


def gpu_memory_units(gpu_memory_mib: int) -> int:
    """GiB units of a whole GPU: what one share of all its memory costs, so that share is one GPU-equivalent."""
    return memory_units(gpu_memory_mib)


@dataclass(frozen=True, slots=True)
class UnitNames:
    """How pages and messages name a pool's two quota counters."""

    compute: str
    memory: str


MIG_UNITS = UnitNames(compute="compute slices", memory="memory slots")
SHARED_UNITS = UnitNames(compute="% of a GPU", memory="GiB")


def unit_names(*, shared: bool) -> UnitNames:
    return SHARED_UNITS if shared else MIG_UNITS


def size_label(*, profile: str, memory_mib: int | None, thread_percentage: int | None = None) -> str:
    """What one slice or share of a request is, for messages: "1g.10gb", "4 GiB share", "4 GiB, 25 % MPS share"."""
    if memory_mib is None:
        return profile
    size = f"{memory_mib / MIB_PER_GIB:g} GiB" if memory_mib % 256 == 0 else f"{memory_mib} MiB"
    if thread_percentage is not None:
        return f"{size}, {thread_percentage} % MPS share"
    return f"{size} share"
