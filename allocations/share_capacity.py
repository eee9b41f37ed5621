"""What fits now in a time-sliced or MPS pool, in GiB: the API's capacity, the pools and what-if pages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from allocations.models import NodePool
from allocations.share_placement import read_shared_pool
from allocations.sharing.packing import shares_that_fit, whole_gpus_free
from allocations.sharing.units import MIB_PER_GIB

# The share sizes capacity is told in (GiB); a whole GPU is added per pool.
SHARE_SIZES_GIB = (1, 2, 4, 8, 16)


@dataclass(frozen=True, slots=True)
class SharedCapacity:
    pool_id: int
    fits_now: dict[str, int]
    free_memory_mib: int
    total_memory_mib: int
    whole_gpus_free: int
    gpus: int

    @property
    def free_memory_gib(self) -> float:
        return round(self.free_memory_mib / MIB_PER_GIB, 1)

    @property
    def total_memory_gib(self) -> float:
        return round(self.total_memory_mib / MIB_PER_GIB, 1)

    def as_dict(self) -> dict[str, Any]:
        return {
            "pool": self.pool_id,
            "fits_now": self.fits_now,
            "free_memory_gib": self.free_memory_gib,
            "whole_gpus_free": self.whole_gpus_free,
        }


def shared_capacity(pool: NodePool) -> SharedCapacity:
    gpus, _ = read_shared_pool(pool)
    gpu_memory = gpus[0].memory_mib if gpus else 0
    fits = {
        f"{gib} GiB": shares_that_fit(gpus, memory_mib=gib * MIB_PER_GIB)
        for gib in SHARE_SIZES_GIB
        if gib * MIB_PER_GIB <= gpu_memory
    }
    if gpu_memory:
        fits["whole GPU"] = whole_gpus_free(gpus)
    return SharedCapacity(
        pool_id=pool.pk,
        fits_now=fits,
        free_memory_mib=sum(g.free_memory_mib for g in gpus),
        total_memory_mib=sum(g.memory_mib for g in gpus),
        whole_gpus_free=whole_gpus_free(gpus),
        gpus=len(gpus),
    )
