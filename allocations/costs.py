"""What a slice request costs against quota, in the two dimensions the DRA counters count.

A MIG slice takes compute slices (of 7 on A100/H100/H200) and memory slots (of 8): a 1g.10gb
costs (1, 1), a 1g.20gb (1, 2), a 7g.80gb (7, 8). GPU-equivalents are max(c/7, m/8) on those GPUs.

A GPU shared whole (time-sliced or MPS pools, allocations/sharing) counts percent of a GPU and GiB instead
(allocations/sharing/units.py); to the quota arithmetic here it is a model with 100 compute units, its memory in
GiB as memory units and no MIG profile, so GPU-equivalents of a quota row keep the same max(c/C, m/M) formula.
"""

from __future__ import annotations

from dataclasses import dataclass

from allocations.mig.catalog import GpuModel, UnknownGpuModel, UnknownProfile, load_catalog
from allocations.sharing import units
from allocations.sharing.catalog import is_shared_model, shared_model


@dataclass(frozen=True, slots=True)
class Cost:
    compute_slices: int
    memory_slices: int
    gpu_equivalents: float

    def as_dict(self) -> dict[str, float | int]:
        return {
            "compute_slices": self.compute_slices,
            "memory_slices": self.memory_slices,
            "gpu_equivalents": round(self.gpu_equivalents, 3),
        }


def gpu_model_for(name: str) -> GpuModel:
    """The MIG catalog's model, or for a GPU shared whole its quota-units model (no profiles)."""
    if is_shared_model(name):
        return share_units_model(name)
    return load_catalog().model(name)


def share_units_model(name: str) -> GpuModel:
    shared = shared_model(name)
    return GpuModel(
        name=shared.name,
        aliases=(),
        compute_slices=100,
        memory_slices=units.gpu_memory_units(shared.memory_mib),
        memory_mib=shared.memory_mib,
        profiles=(),
        source="sharing",
    )


def gpu_equivalents(model: GpuModel, compute_slices: int, memory_slices: int) -> float:
    return max(compute_slices / model.compute_slices, memory_slices / model.memory_slices)


def slice_cost(*, gpu_model: str, profile: str, count: int) -> Cost:
    """Cost of `count` slices of `profile` on `gpu_model`. Raises UnknownGpuModel / UnknownProfile."""
    model = gpu_model_for(gpu_model)
    spec = model.profile(profile)
    compute = spec.compute_slices * count
    memory = spec.memory_slices * count
    return Cost(compute, memory, gpu_equivalents(model, compute, memory))


def share_request_cost(
    *, gpu_model: str, mps: bool, memory_mib: int, thread_percentage: int | None, count: int
) -> Cost:
    """Cost of `count` shares of `memory_mib` on a GPU shared whole: (% of a GPU, GiB, GPU-equivalents)."""
    shared = shared_model(gpu_model)
    cost = units.share_cost(
        mps=mps,
        memory_mib=memory_mib,
        thread_percentage=thread_percentage,
        count=count,
        gpu_memory_mib=shared.memory_mib,
    )
    return Cost(cost.compute_percent, cost.memory_gib, cost.gpu_equivalents)


__all__ = [
    "Cost",
    "UnknownGpuModel",
    "UnknownProfile",
    "gpu_equivalents",
    "gpu_model_for",
    "share_request_cost",
    "slice_cost",
]
