"""What fits in a static-MIG pool (issue 12): the capacity API, the dashboard's "fits now" and the metrics.

On DynamicMIG the driver creates an instance wherever the layout rules allow, so "fits now" counts slots. In a
static pool only the MIG devices that exist can be claimed; a request that finds none waits for a layout change.
So a static pool has two figures per profile, each profile alone:

- ``free``: free pre-created instances of the profile on ready GPUs (served at once, no reconfiguration);
- ``after_reconfiguration``: what the reconfiguration planner can reach by destroying free instances and
  creating new ones, held instances untouched (allocations/mig/reconfig.py never moves them), which is the
  layout rules' fit of the held instances alone. In MIG-manager mode a GPU that holds anything is never changed
  (mig-parted rebuilds a whole GPU), so such a GPU counts only its free instances; and since mig-parted has no
  placement field, these are counts the manager can make, not slots Fatia chooses.

Held: instances with a live request's placement, and devices claimed outside the portal (a whole GPU claimed
outside holds everything on it). Nodes that are not ready (reconfiguring, cordoned...) count nothing.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from allocations.costs import gpu_model_for
from allocations.mig.catalog import GpuModel
from allocations.mig.counters import full_profile
from allocations.mig.layout import geometry
from allocations.models import Allocation, ClaimedDevice, Gpu, Node, NodePool, SlicePlacement
from allocations.placement import gpu_model_of, outside_instance

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StaticFits:
    free: dict[str, int]
    after_reconfiguration: dict[str, int]


def gpu_static_fits(
    model: GpuModel,
    instances: Sequence[tuple[str, int]],
    held: Iterable[tuple[str, int]],
    *,
    whole_gpu_only: bool,
) -> tuple[Counter[str], Counter[str]]:
    """(free, after reconfiguration) per profile on one GPU holding the pre-created `instances` of which `held`
    are taken. `whole_gpu_only`: MIG-manager mode (a GPU holding anything keeps its layout). ValueError when the
    held instances break the layout rules."""
    taken = set(held)
    taken_starts = {start for _, start in taken}
    free = Counter(profile for profile, start in instances if start not in taken_starts)
    if taken and whole_gpu_only:
        return free, Counter(free)
    geom = geometry(model)
    key = geom.named_key(tuple(sorted((profile, start, False) for profile, start in taken)))
    after = Counter({p.name: n for p, n in zip(geom.profiles, geom.fit(key), strict=True) if n})
    return free, after


def static_pool_fits(pools: Iterable[NodePool]) -> dict[int, StaticFits]:
    """StaticFits of each static pool among `pools`, by pool id (dynamic pools are left out). Three queries in
    all, none when no pool is static."""
    static = {pool.pk: pool for pool in pools if pool.is_static}
    if not static:
        return {}
    held: dict[int, set[tuple[str, int]]] = {}
    rows = SlicePlacement.objects.filter(
        gpu__node__pool__in=static, allocation__status__in=Allocation.QUOTA_HOLDING
    ).values_list("gpu_id", "profile", "start")
    for gpu_id, profile, start in rows:
        held.setdefault(gpu_id, set()).add((profile, start))
    outside: dict[int, list[tuple[str, int]]] = {}
    claimed = ClaimedDevice.objects.outside_fatia().filter(gpu__node__pool__in=static)
    for gpu_id, profile, start in claimed.values_list("gpu_id", "profile", "start"):
        if gpu_id is not None:
            outside.setdefault(gpu_id, []).append((profile, start))
    free: dict[int, Counter[str]] = {pk: Counter() for pk in static}
    after: dict[int, Counter[str]] = {pk: Counter() for pk in static}
    gpus = Gpu.objects.filter(node__pool__in=static, node__state=Node.State.READY).order_by("node__name", "index")
    for gpu_id, pool_id, figures_id, instances in gpus.values_list(
        "pk", "node__pool_id", "figures_id", "static_instances"
    ):
        pool = static[pool_id]
        pool_model = gpu_model_for(pool.gpu_model)
        model = gpu_model_of(pool_model, figures_id) or pool_model
        taken = set(held.get(gpu_id, set()))
        claimed_outside = [outside_instance(model, p, s, "outside") for p, s in outside.get(gpu_id, [])]
        if any(i.profile == full_profile(model).name for i in claimed_outside):
            continue  # the whole GPU (or a device its model does not know) is claimed outside the portal
        taken.update((i.profile, i.start) for i in claimed_outside)
        try:
            gpu_free, gpu_after = gpu_static_fits(
                model,
                [(str(i["profile"]), int(i["start"])) for i in instances],
                taken,
                whole_gpu_only=pool.mig_mode == NodePool.MigMode.STATIC_MANAGER,
            )
        except ValueError as exc:  # what is held breaks the MIG rules: count nothing there, as placement does
            logger.error("Left out of static capacity: GPU %d holds an invalid layout (%s)", gpu_id, exc)
            continue
        free[pool_id].update(gpu_free)
        after[pool_id].update(gpu_after)
    return {
        pk: StaticFits(
            free={name: free[pk].get(name, 0) for name in pool.profiles},
            after_reconfiguration={name: after[pk].get(name, 0) for name in pool.profiles},
        )
        for pk, pool in static.items()
    }
