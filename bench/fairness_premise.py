"""Does a cohort's set of guarantees fit its pool, slot-aware? (issue 15, for bench/fairness.py)

The target "a tenant within its guarantee waits at most grace + one provisioning time" assumes that whatever the
tenants run within their guarantees can be placed at once. Counting slices is not enough: a GPU full of 1g.10gb
holds 7 of its 8 memory slots, two 3g.40gb leave a compute slice idle, a 4g.40gb only goes at start 0. So:

- `overcommit`: random ways for every tenant to use its whole guarantee at once (its own profile mix, drawn until
  the next one would pass its compute or memory quota), each placed largest first on the empty pool with the
  placement engine; the share that cannot be placed, and one example. Non-zero: the guarantees over-commit the
  pool, and a tenant within its guarantee can wait on others' guaranteed use, however reclaim is done.
- `fitted_guarantees`: guarantees that do fit, by construction: each tenant gets a share of whole GPUs and the
  largest guarantee (memory in the pool's 8:7 proportion to compute) such that EVERY combination of its profiles
  within it fits its share (exhaustive). Shares that each fit make a set that fits the pool (a sufficient
  condition: tenants may still share GPUs when they run).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence

from allocations.mig.catalog import GpuModel
from allocations.mig.demand import DemandMix
from allocations.mig.engine import PlacementEngine, empty_fleet
from allocations.mig.fleet import PlacementRequest


def _fits(model: GpuModel, gpus: int, profiles: Sequence[str]) -> bool:
    engine = PlacementEngine(empty_fleet(model, gpus, 1), "ours", DemandMix())
    order = sorted(profiles, key=lambda p: (-model.profile(p).memory_slices, -model.profile(p).compute_slices))
    return all(engine.place(PlacementRequest(p), str(n)) is not None for n, p in enumerate(order))


def _draw(rng: random.Random, model: GpuModel, mix: dict[str, float], compute: int, memory: int) -> list[str]:
    profiles, weights = zip(*mix.items(), strict=True)
    held: list[str] = []
    c = m = 0
    while True:
        p = rng.choices(profiles, weights)[0]
        spec = model.profile(p)
        if c + spec.compute_slices > compute or m + spec.memory_slices > memory:
            return held
        held.append(p)
        c, m = c + spec.compute_slices, m + spec.memory_slices


def overcommit(
    model: GpuModel, gpus: int, tenants: Sequence[tuple[dict[str, float], int, int]], samples: int = 400, seed: int = 0
) -> tuple[float, list[list[str]] | None]:
    """Share of sampled full-guarantee holdings (mix, compute, memory per tenant) the pool cannot hold; an example."""
    rng = random.Random(seed)
    failed, example = 0, None
    for _ in range(samples):
        held = [_draw(rng, model, mix, c, m) for mix, c, m in tenants]
        if not _fits(model, gpus, [p for h in held for p in h]):
            failed += 1
            example = example or held
    return failed / samples, example


def _combinations(model: GpuModel, profiles: Sequence[str], compute: int, memory: int) -> Iterator[list[str]]:
    """Every multiset of `profiles` within (compute, memory) that no further profile can join (maximal ones)."""

    def walk(i: int, c: int, m: int, held: list[str]) -> Iterator[list[str]]:
        if i == len(profiles):
            if all(
                c + model.profile(p).compute_slices > compute or m + model.profile(p).memory_slices > memory
                for p in profiles
            ):
                yield list(held)
            return
        spec = model.profile(profiles[i])
        n = 0
        while c + n * spec.compute_slices <= compute and m + n * spec.memory_slices <= memory:
            yield from walk(i + 1, c + n * spec.compute_slices, m + n * spec.memory_slices, held + [profiles[i]] * n)
            n += 1

    yield from walk(0, 0, 0, [])


def fitted_guarantees(model: GpuModel, mix: dict[str, float], gpus: int) -> tuple[int, int]:
    """The largest (compute, memory) guarantee, memory = ceil(compute x 8 / 7), every use of which fits `gpus`."""
    per_gpu_c, per_gpu_m = 7, 8
    for compute in range(per_gpu_c * gpus, 0, -1):
        memory = min(per_gpu_m * gpus, math.ceil(compute * per_gpu_m / per_gpu_c))
        if all(_fits(model, gpus, held) for held in _combinations(model, list(mix), compute, memory)):
            return compute, memory
    return 0, 0
