"""Fill-until-full on a pool of whole GPUs shared without MIG: the shared-pool experiment of
``bench/placement.py --shared`` (issue 13).

As for MIG (docs/benchmarks.md, "Placement (MIG)"): tasks arrive in a seeded random order until the GPU
they ask for reaches 130 % of the pool's; none departs; a task that does not fit is dropped. A task on
several GPUs takes whole GPUs and is placed all or nothing.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from bench.shared_policies import POLICIES, Gpu, Policy, best_fit, commit, release
from bench.shared_workload import WHOLE, ShareRequest, Task, sample_until, to_request

LOAD = 1.3
# Not an online policy: best-fit on the same tasks sorted largest first, as a scheduler that saw them all
# could place them. Neither an optimum nor a bound (with fixed GPUs and more demand than room, largest
# first can strand more): it shows how much the arrival order, which no online policy controls, moves.
REFERENCE = "offline largest-first"


@dataclass(frozen=True)
class FillResult:
    offered_milli: int
    placed_milli: int
    capacity_milli: int
    placed_memory_mib: int
    capacity_memory_mib: int
    whole_offered: int  # tasks asking for one or more whole GPUs
    whole_placed: int
    shares_offered: int  # tasks asking for part of one GPU
    shares_placed: int
    first_reject: float  # share of the pool's GPU allocated when the first task was dropped (1.0: none was)

    @property
    def of_requested(self) -> float:
        return self.placed_milli / self.offered_milli

    @property
    def of_capacity(self) -> float:
        return self.placed_milli / self.capacity_milli

    @property
    def memory_of_capacity(self) -> float:
        return self.placed_memory_mib / self.capacity_memory_mib


def workload_mix(tasks: Sequence[Task], gpu_memory_mib: int, granularity_mib: int) -> Counter[ShareRequest]:
    """How often each per-GPU request occurs in ``tasks`` (what FGD calls the target workload)."""
    return Counter(to_request(t, gpu_memory_mib, granularity_mib) for t in tasks)


def run_fill(
    tasks: Sequence[Task], policy: Policy, gpus: int, gpu_memory_mib: int, granularity_mib: int = 1
) -> FillResult:
    """Place ``tasks`` in order on ``gpus`` empty GPUs of ``gpu_memory_mib`` each with ``policy``."""
    fleet = [Gpu(gpu_memory_mib) for _ in range(gpus)]
    placed_milli = placed_memory = 0
    offered = Counter[str]()
    placed = Counter[str]()
    first_reject = 1.0
    for task in tasks:
        kind = "whole" if task.milli >= WHOLE else "share"
        offered[kind] += 1
        request = to_request(task, gpu_memory_mib, granularity_mib)
        taken: list[int] = []
        for _ in range(task.gpus):
            index = policy(fleet, request)
            if index is None:
                break
            commit(fleet[index], request)  # raises OverCommit if the policy chose a GPU that cannot hold it
            taken.append(index)
        if len(taken) < task.gpus:
            for index in taken:
                release(fleet[index], request)
            if first_reject == 1.0:
                first_reject = placed_milli / (WHOLE * gpus)
            continue
        placed[kind] += 1
        placed_milli += request.milli * task.gpus
        placed_memory += request.memory_mib * task.gpus
    return FillResult(
        offered_milli=sum(t.milli * t.gpus for t in tasks),
        placed_milli=placed_milli,
        capacity_milli=WHOLE * gpus,
        placed_memory_mib=placed_memory,
        capacity_memory_mib=gpu_memory_mib * gpus,
        whole_offered=offered["whole"],
        whole_placed=placed["whole"],
        shares_offered=offered["share"],
        shares_placed=placed["share"],
        first_reject=first_reject,
    )


@dataclass(frozen=True)
class Row:
    workload: str
    policy: str
    runs: list[FillResult]

    def mean(self, attr: str) -> float:
        return statistics.fmean(float(getattr(r, attr)) for r in self.runs)

    def worst(self, attr: str) -> float:
        return min(float(getattr(r, attr)) for r in self.runs)

    def admitted(self, kind: str) -> float:
        offered = sum(getattr(r, f"{kind}_offered") for r in self.runs)
        return sum(getattr(r, f"{kind}_placed") for r in self.runs) / offered if offered else float("nan")


def fill_experiment(
    workload: str,
    tasks: list[Task],
    weights: list[float] | None,
    gpus: int,
    gpu_memory_mib: int,
    granularity_mib: int,
    seeds: int,
) -> list[Row]:
    """Every policy on the same ``seeds`` samples of the workload (seed k: the k-th sampling order)."""
    runs: dict[str, list[FillResult]] = {p: [] for p in (*POLICIES, REFERENCE)}
    for seed in range(seeds):
        sample = sample_until(tasks, weights, WHOLE * gpus, LOAD, seed)
        mix = workload_mix(sample, gpu_memory_mib, granularity_mib)
        for name, make in POLICIES.items():
            runs[name].append(run_fill(sample, make(mix), gpus, gpu_memory_mib, granularity_mib))
        largest_first = sorted(sample, key=lambda t: (t.gpus, t.milli, t.memory_share or 0.0), reverse=True)
        runs[REFERENCE].append(run_fill(largest_first, best_fit, gpus, gpu_memory_mib, granularity_mib))
    return [Row(workload, name, results) for name, results in runs.items()]
