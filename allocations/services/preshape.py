"""Pre-shaping static pools during quiet periods: which GPUs' free instances to reshape, and how.

A static pool (``static-agent`` or ``static-manager``) serves a request at once only when a free instance of its
profile exists; pre-shaping keeps the free instances shaped for the learnt demand mix
(:mod:`allocations.mig.preshape`) so that most requests need no reconfiguration. It runs only while the pool is
quiet: no request for ``FATIA_PRESHAPE_QUIET_S`` seconds and none approved or provisioning (a reconfiguration for
someone may be under way). ``FATIA_PRESHAPE_QUIET_S = 0`` turns it off.

This module decides; it changes nothing. :func:`preshape_pool` hands each GPU's operations to the ``apply``
callable it is given (the reconfiguration service, ``request_reconfiguration``, once wired), so the decision is
testable with any real callable. What exists on a GPU comes from its node's agent inventory; instances that
allocations hold (and claims made outside the portal) are never touched. In ``static-manager`` mode the MIG
manager rewrites a whole GPU, so only GPUs that hold nothing are reshaped there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from allocations.mig.fleet import Instance
from allocations.mig.preshape import plan_preshape
from allocations.mig.reconfig import Operation
from allocations.models import Allocation, NodePool
from allocations.nodeagent.selectors import reported_instances
from allocations.placement import offered_profiles, read_pool, recent_demand

logger = logging.getLogger(__name__)

STATIC_MODES = ("static-agent", "static-manager")
# Someone is waiting on these: a reconfiguration for them may be running on the pool's GPUs.
BUSY = (Allocation.Status.APPROVED, Allocation.Status.PROVISIONING)

Apply = Callable[[int, Sequence[Operation], str], object]


@dataclass(frozen=True, slots=True)
class GpuPreshape:
    """One GPU's pre-shaping: the Gpu row, where it is, the operations (destroys first) and why."""

    gpu_id: int
    node: str
    gpu_index: int
    operations: tuple[Operation, ...]
    reason: str


def pool_mig_mode(pool: NodePool) -> str:
    # NodePool.mig_mode comes with the static-MIG package (migration 0009); a pool without it is dynamic.
    return str(getattr(pool, "mig_mode", "dynamic"))


def pool_is_quiet(pool: NodePool, now: datetime) -> bool:
    """No request in the pool for FATIA_PRESHAPE_QUIET_S, and none approved or provisioning."""
    quiet = settings.FATIA_PRESHAPE_QUIET_S
    if quiet <= 0:
        return False
    requests = Allocation.objects.filter(pool=pool)
    if requests.filter(status__in=BUSY).exists():
        return False
    return not requests.filter(created_at__gt=now - timedelta(seconds=quiet)).exists()


def list_preshape_plans(*, pool_id: int, now: datetime | None = None, mode: str | None = None) -> list[GpuPreshape]:
    """Per GPU of a quiet static pool, the operations that reshape its free instances (GPUs that need none are
    left out); empty for a dynamic or busy pool. ``mode`` stands in for the pool's MIG mode when given."""
    pool = NodePool.objects.get(pk=pool_id)
    mode = mode or pool_mig_mode(pool)
    if mode not in STATIC_MODES or not pool_is_quiet(pool, now or timezone.now()):
        return []
    layout = read_pool(pool)
    node_ids = dict(pool.nodes.values_list("name", "pk"))
    reported = reported_instances(node_ids.values())
    mix = recent_demand(pool)
    allowed = set(offered_profiles(pool))
    plans: list[GpuPreshape] = []
    for node in layout.fleet.nodes:
        for gpu in node.gpus:
            existing = reported.get((node_ids[node.name], gpu.index))
            if existing is None:
                continue  # no agent inventory: what exists there is unknown
            held = list(gpu.instances)
            if mode == "static-manager" and held:
                continue
            taken = {(x.profile, x.start) for x in held}
            free = [Instance(p, s) for p, s in existing if (p, s) not in taken]
            try:
                plan = plan_preshape(gpu.model, held + free, mix, allowed=allowed)
            except ValueError as exc:  # the inventory and the portal's records disagree: leave it for reconcile
                logger.warning("Pre-shaping skips %s GPU %d: %s", node.name, gpu.index, exc)
                continue
            if plan is None:
                continue
            reason = (
                f"pre-shaping {node.name}/gpu-{gpu.index} for the demand mix: expected requests served from free "
                f"instances {plan.served_before:.2f} -> {plan.served_after:.2f}"
            )
            plans.append(
                GpuPreshape(layout.by_position[(node.name, gpu.index)], node.name, gpu.index, plan.operations, reason)
            )
    return plans


def preshape_pool(pool_id: int, apply: Apply, *, now: datetime | None = None, mode: str | None = None) -> int:
    """Calls ``apply(gpu_id, operations, reason)`` for each GPU :func:`list_preshape_plans` names; returns how
    many. ``apply`` does the work (and its own locking and auditing): request_reconfiguration in the portal."""
    plans = list_preshape_plans(pool_id=pool_id, now=now, mode=mode)
    for plan in plans:
        apply(plan.gpu_id, plan.operations, plan.reason)
    return len(plans)
