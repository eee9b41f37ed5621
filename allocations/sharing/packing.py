"""Where the shares of a request go on whole GPUs shared by memory (time-sliced or MPS pools). Pure and
deterministic: the same GPUs and request give the same slots.

Rules:
- a GPU's shares never add up to more than its memory, nor (MPS) to more than 100 % of its threads;
- best fit by memory among GPUs already shared: the share goes where the least memory is left over, so untouched
  GPUs stay whole for whole-GPU requests; only when no shared GPU has room does it open an untouched one (the
  first in node/index order);
- anti-affinity: a tenant that avoids co-tenants gets only GPUs no other tenant holds a share on, and no other
  tenant lands on a GPU where such a tenant holds one.
The shares of one request may land on one GPU or several; each share is placed in turn, seeing the ones before.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class GpuShares:
    """One GPU of the pool as placement sees it. `order` sorts GPUs (node name, index)."""

    gpu_id: int
    order: tuple[str, int]
    memory_mib: int
    used_memory_mib: int = 0
    used_thread_percentage: int = 0
    tenants: frozenset[int] = frozenset()
    # Tenants holding a share here that asked never to share a GPU with another tenant.
    exclusive_tenants: frozenset[int] = frozenset()

    @property
    def free_memory_mib(self) -> int:
        return self.memory_mib - self.used_memory_mib


@dataclass(frozen=True, slots=True)
class ShareRequest:
    tenant_id: int
    memory_mib: int
    count: int
    thread_percentage: int | None = None  # MPS only
    avoid_co_tenants: bool = False


@dataclass(frozen=True, slots=True)
class ShareSlot:
    gpu_id: int
    memory_mib: int
    thread_percentage: int | None = None


@dataclass(slots=True)
class _State:
    gpu: GpuShares
    used_memory: int
    used_threads: int
    tenants: set[int] = field(default_factory=set)
    exclusive: set[int] = field(default_factory=set)


def _admits(state: _State, request: ShareRequest) -> bool:
    if state.gpu.memory_mib - state.used_memory < request.memory_mib:
        return False
    if request.thread_percentage is not None and state.used_threads + request.thread_percentage > 100:
        return False
    others = state.tenants - {request.tenant_id}
    if others and request.avoid_co_tenants:
        return False
    return not (state.exclusive - {request.tenant_id})


def place_shares(gpus: list[GpuShares], request: ShareRequest) -> list[ShareSlot] | None:
    """The GPU of each of the request's `count` shares, or None when they do not all fit."""
    states = [
        _State(g, g.used_memory_mib, g.used_thread_percentage, set(g.tenants), set(g.exclusive_tenants))
        for g in sorted(gpus, key=lambda g: (g.order, g.gpu_id))
    ]
    slots: list[ShareSlot] = []
    for _ in range(request.count):
        fitting = [s for s in states if _admits(s, request)]
        if not fitting:
            return None
        shared = [s for s in fitting if s.used_memory > 0 or s.used_threads > 0]
        if shared:
            chosen = min(shared, key=lambda s: s.gpu.memory_mib - s.used_memory - request.memory_mib)
        else:
            chosen = fitting[0]
        chosen.used_memory += request.memory_mib
        chosen.used_threads += request.thread_percentage or 0
        chosen.tenants.add(request.tenant_id)
        if request.avoid_co_tenants:
            chosen.exclusive.add(request.tenant_id)
        slots.append(ShareSlot(chosen.gpu.gpu_id, request.memory_mib, request.thread_percentage))
    return slots


def whole_gpus_free(gpus: list[GpuShares]) -> int:
    """GPUs with no share at all: what a whole-GPU request can still get."""
    return sum(1 for g in gpus if g.used_memory_mib == 0 and g.used_thread_percentage == 0)


def shares_that_fit(gpus: list[GpuShares], *, memory_mib: int, thread_percentage: int | None = None) -> int:
    """How many shares of `memory_mib` (any tenant, no anti-affinity) fit in the pool now: capacity for pages."""
    total = 0
    for g in gpus:
        by_memory = g.free_memory_mib // memory_mib if memory_mib > 0 else 0
        if thread_percentage:
            by_memory = min(by_memory, (100 - g.used_thread_percentage) // thread_percentage)
        total += max(by_memory, 0)
    return total
