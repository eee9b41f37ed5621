"""Do a cohort's guarantees fit its pool? (issue 15) A warning for the cohort page and API, pure but for one read.

The promise to a tenant within its guarantee (a start within the cohort's grace plus one provisioning time) holds
only if everything all members may run within their guarantees can be placed at once. MIG layouts rarely fill a
GPU exactly: a GPU of 1g and 2g instances holds at most 7 of its 8 memory slots, two 3g instances hold 6 of its 7
compute slices (bench/fairness_premise.py measures this on the fairness bench's tenants). So guarantees are taken
to fit surely only within one compute slice and one memory slot less than each GPU's grid: past that, a request
within its guarantee may wait for the others' guaranteed use however reclaim is done. A heuristic, on the safe
side; over the grid itself the cohort is plainly over-committed.
"""

from __future__ import annotations

from dataclasses import dataclass

from allocations.costs import gpu_model_for
from allocations.mig.catalog import UnknownGpuModel
from allocations.models import Gpu, Node, NodePool


@dataclass(frozen=True)
class PoolCapacity:
    gpus: int
    compute: int  # the GPUs' grids
    memory: int
    sure_compute: int  # what MIG layouts surely hold at once (one slice and one memory slot less per GPU)
    sure_memory: int


def pool_capacity(pool: NodePool) -> PoolCapacity | None:
    """None for pools shared whole (no MIG layouts) or whose model the catalog lacks."""
    if pool.is_shared:
        return None
    try:
        model = gpu_model_for(pool.gpu_model)
    except UnknownGpuModel:
        return None
    gpus = Gpu.objects.filter(node__pool=pool, node__state=Node.State.READY).count()
    return PoolCapacity(
        gpus,
        gpus * model.compute_slices,
        gpus * model.memory_slices,
        gpus * (model.compute_slices - 1),
        gpus * (model.memory_slices - 1),
    )


def overcommit_warning(capacity: PoolCapacity | None, compute: int, memory: int) -> str:
    """Why the guarantees (summed over the cohort's members) may not fit the pool; empty when they do."""
    if capacity is None or capacity.gpus == 0:
        return ""
    held = f"guarantees of {compute} compute slices / {memory} memory slots"
    if compute > capacity.compute or memory > capacity.memory:
        return (
            f"The members' {held} exceed the pool's {capacity.compute} / {capacity.memory} on {capacity.gpus} "
            "GPUs: a tenant within its guarantee may wait for the others' guaranteed use. Lower the guarantees."
        )
    if compute > capacity.sure_compute or memory > capacity.sure_memory:
        return (
            f"The members' {held} may not fit the pool at once: MIG layouts surely hold {capacity.sure_compute} / "
            f"{capacity.sure_memory} on its {capacity.gpus} GPUs (a GPU of small instances cannot use every slot), "
            "so a tenant within its guarantee may wait for the others' guaranteed use. Leave that headroom."
        )
    return ""
