"""Online replay on a shared pool: tasks arrive AND depart (the trace's creation and deletion times, or
Poisson arrivals with exponential lifetimes), so holes open and close. This is where preferring GPUs that
are already shared should keep whole GPUs free for whole-GPU tasks; fill-until-full never frees a GPU.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from bench.placement_shared import LOAD
from bench.replay_events import replay_events
from bench.shared_policies import Gpu, Policy, commit, release
from bench.shared_workload import WHOLE, Task, to_request

MEAN_LIFETIME_S = 3600


@dataclass(frozen=True)
class OnlineResult:
    whole_offered: int
    whole_placed: int
    shares_offered: int
    shares_placed: int
    offered_gpu_hours: float
    served_gpu_hours: float

    @property
    def served(self) -> float:
        return self.served_gpu_hours / self.offered_gpu_hours


def size_pool(tasks: Sequence[Task]) -> int:
    """GPUs such that the peak offered concurrent GPU is LOAD x the pool's."""
    events = sorted([(t.created, t.milli * t.gpus) for t in tasks] + [(t.deleted, -t.milli * t.gpus) for t in tasks])
    peak = current = 0
    for _, delta in events:
        current += delta
        peak = max(peak, current)
    return max(1, round(peak / (WHOLE * LOAD)))


def synthetic_online(tasks: list[Task], weights: list[float], gpus: int, n: int, seed: int) -> list[Task]:
    """``n`` Poisson arrivals drawn from the mix, exponential lifetimes (mean 1 h), the rate set so that
    the mean offered concurrent GPU is LOAD x the pool's."""
    rng = random.Random(seed)
    mean_milli = sum(t.milli * t.gpus * w for t, w in zip(tasks, weights, strict=True)) / sum(weights)
    rate = LOAD * WHOLE * gpus / (mean_milli * MEAN_LIFETIME_S)
    now = 0.0
    out: list[Task] = []
    for _ in range(n):
        now += rng.expovariate(rate)
        life = rng.expovariate(1 / MEAN_LIFETIME_S)
        out.append(replace(rng.choices(tasks, weights)[0], created=int(now), deleted=int(now + life)))
    return out


def run_online(tasks: Sequence[Task], policy: Policy, gpus: int, gpu_memory_mib: int) -> OnlineResult:
    """Replay arrivals and departures in time order (departures first at equal times: a GPU freed at t is
    usable at t); a task that does not fit when it arrives is dropped."""
    fleet = [Gpu(gpu_memory_mib) for _ in range(gpus)]
    events = replay_events(tasks)
    held: dict[int, list[int]] = {}
    offered = Counter[str]()
    placed = Counter[str]()
    offered_h = served_h = 0.0
    for _, arrival, k in events:
        task = tasks[k]
        request = to_request(task, gpu_memory_mib)
        if not arrival:
            for freed in held.pop(k, []):
                release(fleet[freed], request)
            continue
        kind = "whole" if task.milli >= WHOLE else "share"
        hours = task.milli * task.gpus / WHOLE * (task.deleted - task.created) / 3600
        offered[kind] += 1
        offered_h += hours
        taken: list[int] = []
        for _ in range(task.gpus):
            chosen = policy(fleet, request)
            if chosen is None:
                break
            commit(fleet[chosen], request)
            taken.append(chosen)
        if len(taken) < task.gpus:
            for undone in taken:
                release(fleet[undone], request)
            continue
        held[k] = taken
        placed[kind] += 1
        served_h += hours
    return OnlineResult(offered["whole"], placed["whole"], offered["share"], placed["share"], offered_h, served_h)
