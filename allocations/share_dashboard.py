"""How the dashboard draws a time-sliced or MPS GPU: a memory bar of one cell per GiB (the pool's quota unit),
each share a run of cells stacked after the one before, coloured by tenant like a MIG slice."""

from __future__ import annotations

from dataclasses import dataclass, field

from allocations.sharing.units import MIB_PER_GIB, memory_units


@dataclass(slots=True)
class SharedBar:
    _next: dict[int, int] = field(default_factory=dict)

    def cells(self, gpu_id: int, memory_mib: int | None, width: int) -> tuple[int, int, str]:
        """Start cell, cells and label of the next share on `gpu_id` (a bar `width` GiB wide); the rounded-up GiB
        of several shares can pass the GPU's width, so the last cells are clipped to the bar."""
        start = min(self._next.get(gpu_id, 0), max(width - 1, 0))
        size = max(min(memory_units(memory_mib or 0), width - start), 1)
        self._next[gpu_id] = start + size
        gib = (memory_mib or 0) / MIB_PER_GIB
        return start, size, f"{gib:.3g} GiB"
