"""GPU models that are shared whole (time-sliced or MPS) instead of cut into MIG slices, with their memory.

`memory_mib` is the total NVML reports (`nvidia-smi --query-gpu=memory.total`), a little under the datasheet's
GB: the driver publishes that total as the device's `memory` capacity, so shares are sized against it. Sources:
- NVIDIA L4: datasheet 24 GB GDDR6 (nvidia.com/en-us/data-center/l4/); NVML total 23034 MiB.
- NVIDIA L40S: datasheet 48 GB GDDR6 (nvidia.com/en-us/data-center/l40s/); NVML total 46068 MiB.
- NVIDIA A10: datasheet 24 GB GDDR6 (nvidia.com/en-us/data-center/products/a10-gpu/); NVML total 23028 MiB.
- NVIDIA T4: datasheet 16 GB GDDR6 (nvidia.com/en-us/data-center/tesla-t4/); NVML total 15360 MiB.
MPS with a per-client pinned memory limit and active-thread percentage needs Volta or newer (CUDA MPS guide,
docs.nvidia.com/deploy/mps/, "Volta MPS"); every model here is Turing or newer, so `mps` is True for all of them
and is kept as a field for older cards an operator may add.
"""

from __future__ import annotations

from dataclasses import dataclass


class UnknownSharedModel(KeyError):
    """No non-MIG GPU model of that name."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown GPU model"


@dataclass(frozen=True, slots=True)
class SharedGpuModel:
    name: str
    memory_mib: int
    mps: bool
    datasheet_gb: int


MODELS: tuple[SharedGpuModel, ...] = (
    SharedGpuModel("NVIDIA L4", 23034, True, 24),
    SharedGpuModel("NVIDIA L40S", 46068, True, 48),
    SharedGpuModel("NVIDIA A10", 23028, True, 24),
    SharedGpuModel("NVIDIA T4", 15360, True, 16),
)
_BY_NAME = {m.name: m for m in MODELS}


def shared_model(name: str) -> SharedGpuModel:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UnknownSharedModel(
            f"Unknown GPU model {name!r} for sharing. Known models: {', '.join(model_names())}."
        ) from None


def is_shared_model(name: str) -> bool:
    return name in _BY_NAME


def model_names() -> tuple[str, ...]:
    return tuple(m.name for m in MODELS)
