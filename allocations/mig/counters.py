"""The counters NVIDIA's DRA driver publishes per GPU with DynamicMIG, and what each MIG device consumes.

Per GPU one counter set: multiprocessors, copy engines, decoders, encoders, JPEG and OFA engines, memory
(MiB) and one counter per memory slot; the full-GPU device consumes all of it, a MIG device its profile's
figures plus its memory slots (shared/reference/dra-mig.md §3, ``partitions.go``). kube-scheduler allocates a
device only while all of its counters are still free, so these figures, not our layout rules, decide what the
scheduler takes (see :mod:`.scheduler`).

Where they come from, per GPU (:func:`counter_table`): what the node's driver publishes, once fleet discovery
has seen it (:func:`.figures.model_from_figures` registers the table of the model it builds); otherwise the
catalog's NVML figures (``lgip``: SMs, engines, memory). Nothing is made up: a profile whose figures the
catalog lacks (A100-40GB ``1g.10gb``, the 3g/4g/7g profiles of B200 and GH200 144G, ...), or every profile of a
GPU whose whole-GPU figures it lacks, has no counters, and the scheduler prediction does not place it
(:func:`.scheduler.first_fit` says no): with no slices and no NVIDIA data, the profile is not offered on
Kubernetes (allocations/placement.py ``offered_profiles``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .catalog import GpuModel, MigProfile

#: Counter names, in the driver's order; memory is in MiB here (a quantity in the ResourceSlice).
NAMES = ("multiprocessors", "copy-engines", "decoders", "encoders", "jpeg-engines", "ofa-engines", "memory")


@dataclass(frozen=True, slots=True)
class CounterTable:
    """Per profile of a model (in its order) what one device consumes, in NAMES order (None: unknown), and
    the GPU's counter set (None: unknown, then nothing is placed). Memory slots aside: the layout has them."""

    need: tuple[tuple[int, ...] | None, ...]
    capacity: tuple[int, ...] | None

    def known(self, index: int) -> bool:
        return self.capacity is not None and self.need[index] is not None


def full_profile(model: GpuModel) -> MigProfile:
    """The profile that takes the whole GPU; its figures are the GPU's counters."""
    return max(model.profiles, key=lambda p: (p.memory_slices, p.compute_slices))


def profile_counters(model: GpuModel, profile: MigProfile) -> dict[str, int] | None:
    """What one device of ``profile`` consumes (memory slots aside), from the catalog's NVML figures; None
    when the catalog lacks any of them."""
    engines = profile.engines
    if profile.sm_count is None or engines is None or profile.memory_mib is None:
        return None
    values = (profile.sm_count, engines.ce, engines.dec, engines.enc, engines.jpeg, engines.ofa, profile.memory_mib)
    return dict(zip(NAMES, values, strict=True))


def gpu_counters(model: GpuModel) -> dict[str, int] | None:
    """One GPU's counter set (memory slots aside): the full profile's figures, None when unknown."""
    return profile_counters(model, full_profile(model))


_TABLES: dict[int, tuple[GpuModel, CounterTable]] = {}


def register_counter_table(model: GpuModel, table: CounterTable) -> None:
    """The counters of GPUs of this model object (a model built from a node's published figures)."""
    if len(table.need) != len(model.profiles):
        raise ValueError(f"{model.name}: {len(table.need)} counter rows for {len(model.profiles)} profiles")
    _TABLES[id(model)] = (model, table)  # the entry keeps the model alive, so its id is not reused


def counter_table(model: GpuModel) -> CounterTable:
    """The counters the scheduler prediction uses for GPUs of ``model``: registered (published) ones, else
    the catalog's (cached per model object; keyed by identity, as layout.geometry is)."""
    found = _TABLES.get(id(model))
    if found is not None and found[0] is model:
        return found[1]
    whole = gpu_counters(model)
    table = CounterTable(
        need=tuple(tuple(c.values()) if (c := profile_counters(model, p)) else None for p in model.profiles),
        capacity=tuple(whole.values()) if whole is not None else None,
    )
    _TABLES[id(model)] = (model, table)
    return table
