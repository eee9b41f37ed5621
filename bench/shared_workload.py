"""Requests for the shared-pool placement benchmark: the Alibaba trace's GPU tasks, or a synthetic stand-in.

The trace (cluster-trace-gpu-v2023, ``openb_pod_list_*.csv``) is research/study-use data: it is read from
the folder given on the command line, never copied into the project. Its per-task GPU columns are
``num_gpu`` and ``gpu_milli`` (thousandths of one GPU, meaningful when ``num_gpu`` is 1); its
``memory_mib`` column is the pod's HOST memory, so the trace has no GPU memory per task. A task's GPU
memory is therefore derived from its GPU share on the pool's GPU model (``to_request``).
"""

from __future__ import annotations

import csv
import math
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

WHOLE = 1000  # milli of one whole GPU


@dataclass(frozen=True)
class Task:
    """One GPU task of a workload, independent of the GPU model: ``milli`` of one GPU per GPU, on ``gpus``
    GPUs (more than one only for whole-GPU tasks). ``memory_share``: the task's GPU memory as a share of
    the GPU's; None means "the same as the compute share" (the trace carries no GPU memory)."""

    milli: int
    gpus: int = 1
    memory_share: float | None = None
    # Seconds from the trace's start; used by the online replay only, and no part of a task's identity.
    created: int = field(default=0, compare=False)
    deleted: int = field(default=0, compare=False)


@dataclass(frozen=True)
class ShareRequest:
    """What a policy places on ONE GPU: ``milli`` of its compute and ``memory_mib`` of its memory.
    A whole-GPU request (milli 1000) needs a GPU nobody shares and takes all of it."""

    milli: int
    memory_mib: int

    @property
    def whole(self) -> bool:
        return self.milli >= WHOLE


def read_trace(path: Path) -> tuple[list[Task], Counter[str]]:
    """The GPU tasks of one trace file, and counts of the rows left out (CPU-only pods)."""
    tasks: list[Task] = []
    skipped: Counter[str] = Counter()
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            gpus = int(row["num_gpu"])
            if gpus == 0:
                skipped["cpu-only"] += 1
                continue
            # gpu_milli is per GPU; a multi-GPU task takes whole GPUs (all such rows in the trace say 1000).
            milli = WHOLE if gpus > 1 else min(WHOLE, int(row["gpu_milli"]))
            if milli <= 0:
                skipped["no gpu_milli"] += 1
                continue
            created = int(row.get("creation_time") or 0)
            deleted = int(row.get("deletion_time") or created)
            tasks.append(Task(milli=milli, gpus=gpus, created=created, deleted=deleted))
    return tasks, skipped


# Synthetic stand-in, our own mix (not drawn from the trace): inference-style shares whose memory and
# compute are NOT proportional, so packing on both dimensions matters, plus whole and multi-GPU tasks.
# (milli, memory share of the GPU, GPUs): weight
SYNTHETIC_MIX: dict[tuple[int, float, int], float] = {
    (100, 0.10, 1): 0.08,
    (250, 0.125, 1): 0.10,
    (250, 0.33, 1): 0.10,
    (500, 0.25, 1): 0.08,
    (500, 0.50, 1): 0.10,
    (330, 0.66, 1): 0.06,
    (750, 0.50, 1): 0.06,
    (1000, 1.0, 1): 0.38,
    (1000, 1.0, 2): 0.02,
    (1000, 1.0, 4): 0.01,
    (1000, 1.0, 8): 0.01,
}


def synthetic_tasks() -> tuple[list[Task], list[float]]:
    keys = list(SYNTHETIC_MIX)
    return [Task(milli=m, gpus=g, memory_share=s) for m, s, g in keys], [SYNTHETIC_MIX[k] for k in keys]


def to_request(task: Task, gpu_memory_mib: int, granularity_mib: int = 1) -> ShareRequest:
    """The per-GPU request of ``task`` on a GPU with ``gpu_memory_mib``: memory is the task's memory share
    of the GPU. With ``granularity_mib`` 1 (exact MiB) it is rounded down, so shares whose compute adds up
    to a whole GPU also fit its memory; with a coarser unit (1024: sold in whole GiB) it is rounded up to
    that unit, as a user asks for enough; never more than the GPU has. A whole-GPU task takes the GPU's
    memory."""
    if task.milli >= WHOLE:
        return ShareRequest(WHOLE, gpu_memory_mib)
    share = task.milli / WHOLE if task.memory_share is None else task.memory_share
    if granularity_mib == 1:
        memory = math.floor(share * gpu_memory_mib + 1e-9)
    else:
        memory = math.ceil(share * gpu_memory_mib / granularity_mib - 1e-9) * granularity_mib
    return ShareRequest(task.milli, min(gpu_memory_mib, max(granularity_mib, memory)))


def sample_until(
    tasks: list[Task], weights: list[float] | None, capacity_milli: int, load: float, seed: int
) -> list[Task]:
    """Tasks drawn with replacement (seeded) until the GPU they ask for reaches ``load`` x capacity
    (the FGD paper's workload "tuning" to 130 %)."""
    rng = random.Random(seed)
    out: list[Task] = []
    offered = 0
    while offered < load * capacity_milli:
        task = rng.choices(tasks, weights)[0] if weights is not None else rng.choice(tasks)
        out.append(task)
        offered += task.milli * task.gpus
    return out
