"""What a slice request costs against quota, in the two dimensions the DRA counters count.

A MIG slice takes compute slices (of 7 on A100/H100/H200) and memory slots (of 8): a 1g.10gb
costs (1, 1), a 1g.20gb (1, 2), a 7g.80gb (7, 8). GPU-equivalents are max(c/7, m/8) on those GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

from allocations.mig.catalog import GpuModel, UnknownGpuModel, UnknownProfile, load_catalog


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
    return load_catalog().model(name)


def gpu_equivalents(model: GpuModel, compute_slices: int, memory_slices: int) -> float:
    return max(compute_slices / model.compute_slices, memory_slices / model.memory_slices)


def slice_cost(*, gpu_model: str, profile: str, count: int) -> Cost:
    """Cost of `count` slices of `profile` on `gpu_model`. Raises UnknownGpuModel / UnknownProfile."""
    model = gpu_model_for(gpu_model)
    spec = model.profile(profile)
    compute = spec.compute_slices * count
    memory = spec.memory_slices * count
    return Cost(compute, memory, gpu_equivalents(model, compute, memory))


__all__ = ["Cost", "UnknownGpuModel", "UnknownProfile", "gpu_equivalents", "gpu_model_for", "slice_cost"]
