"""Placement policies for GPUs shared without MIG (time-sliced or MPS), as the benchmark compares them.

Every policy has the signature ``place(gpus, request) -> index | None``: it returns the index of the GPU
in ``gpus`` to put ONE share on, or None when no GPU can take it. A policy only reads; the caller
commits. Every policy returns only a GPU that ``fits`` (no memory or compute over-commit).

``ours`` is the portal's packing as issue 13 describes it, written here because
``allocations/sharing/packing.py`` is not on this branch yet; the merger swaps it for the portal's
``place_shares`` when both are in (see the report in docs/benchmarks.md, "Placement, shared GPUs").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from bench.shared_workload import WHOLE, ShareRequest


@dataclass
class Gpu:
    """One physical GPU of a shared pool: its memory and what its shares use."""

    memory_mib: int
    used_memory_mib: int = 0
    used_milli: int = 0
    shares: int = 0

    @property
    def free_memory_mib(self) -> int:
        return self.memory_mib - self.used_memory_mib

    @property
    def free_milli(self) -> int:
        return WHOLE - self.used_milli


Policy = Callable[[Sequence[Gpu], ShareRequest], int | None]


class OverCommit(Exception):
    """A share was committed to a GPU that cannot hold it: a policy broke its invariant."""


def fits(gpu: Gpu, request: ShareRequest) -> bool:
    if request.whole:
        return gpu.shares == 0 and request.memory_mib <= gpu.memory_mib
    return gpu.used_memory_mib + request.memory_mib <= gpu.memory_mib and gpu.used_milli + request.milli <= WHOLE


def commit(gpu: Gpu, request: ShareRequest) -> None:
    if not fits(gpu, request):
        raise OverCommit(f"{request} does not fit on {gpu}")
    gpu.used_memory_mib += request.memory_mib
    gpu.used_milli += request.milli
    gpu.shares += 1


def release(gpu: Gpu, request: ShareRequest) -> None:
    gpu.used_memory_mib -= request.memory_mib
    gpu.used_milli -= request.milli
    gpu.shares -= 1


def _leftover(gpu: Gpu, request: ShareRequest) -> float:
    """Free capacity left after placing, memory and compute each as a share of the GPU, summed."""
    return (gpu.free_memory_mib - request.memory_mib) / gpu.memory_mib + (gpu.free_milli - request.milli) / WHOLE


def first_fit(gpus: Sequence[Gpu], request: ShareRequest) -> int | None:
    """The first GPU in device order that fits (roughly what a claim gets when nothing scores GPUs)."""
    return next((i for i, g in enumerate(gpus) if fits(g, request)), None)


def best_fit(gpus: Sequence[Gpu], request: ShareRequest) -> int | None:
    """The GPU left with the least free memory + compute (each as a share of the GPU) after placing."""
    scored = [(_leftover(g, request), i) for i, g in enumerate(gpus) if fits(g, request)]
    return min(scored)[1] if scored else None


def worst_fit(gpus: Sequence[Gpu], request: ShareRequest) -> int | None:
    """The GPU left with the most free memory + compute after placing (spreads load)."""
    scored = [(-_leftover(g, request), i) for i, g in enumerate(gpus) if fits(g, request)]
    return min(scored)[1] if scored else None


def ours(gpus: Sequence[Gpu], request: ShareRequest) -> int | None:
    """The portal's packing (issue 13): a share goes to a GPU that is already shared when one fits, so
    that untouched GPUs stay whole for whole-GPU requests; among those, the tightest memory fit (least
    memory left after placing), then the least compute left, then device order. Only when no shared GPU
    fits does it open an untouched one (the first in device order). A whole-GPU request takes the first
    untouched GPU. Memory and compute are never over-committed."""
    best: tuple[int, int, int] | None = None
    first_empty: int | None = None
    for i, g in enumerate(gpus):
        if not fits(g, request):
            continue
        if g.shares == 0:
            if first_empty is None:
                first_empty = i
            continue
        key = (g.free_memory_mib - request.memory_mib, g.free_milli - request.milli, i)
        if best is None or key < best:
            best = key
    return best[2] if best is not None else first_empty


class FgdLike:
    """A peer after the FGD paper's idea (our own code, GPU-only, memory + compute): the GPU whose
    expected fragmentation grows least. A GPU's fragmentation for one kind of request is its free
    compute (milli) when that request cannot fit there (not enough memory or compute, or a whole-GPU
    request on a shared GPU), else 0; the expected fragmentation weighs the kinds by how often the
    workload asks for them (``mix``: request -> weight)."""

    def __init__(self, mix: Mapping[ShareRequest, float]) -> None:
        total = sum(mix.values())
        self.mix = [(r, w / total) for r, w in mix.items()]
        self._cache: dict[tuple[int, int, int, bool], float] = {}

    def fragmentation(self, memory_mib: int, used_memory_mib: int, used_milli: int, shared: bool) -> float:
        key = (memory_mib, used_memory_mib, used_milli, shared)
        found = self._cache.get(key)
        if found is None:
            gpu = Gpu(memory_mib, used_memory_mib, used_milli, 1 if shared else 0)
            found = sum(w * gpu.free_milli for r, w in self.mix if not fits(gpu, r))
            self._cache[key] = found
        return found

    def __call__(self, gpus: Sequence[Gpu], request: ShareRequest) -> int | None:
        best: tuple[float, int] | None = None
        for i, g in enumerate(gpus):
            if not fits(g, request):
                continue
            before = self.fragmentation(g.memory_mib, g.used_memory_mib, g.used_milli, g.shares > 0)
            after = self.fragmentation(
                g.memory_mib, g.used_memory_mib + request.memory_mib, g.used_milli + request.milli, True
            )
            key = (after - before, i)
            if best is None or key < best:
                best = key
        return best[1] if best is not None else None


POLICIES: dict[str, Callable[[Mapping[ShareRequest, float]], Policy]] = {
    "first-fit": lambda _mix: first_fit,
    "best-fit": lambda _mix: best_fit,
    "worst-fit": lambda _mix: worst_fit,
    "ours": lambda _mix: ours,
    "fgd-like": FgdLike,
}
