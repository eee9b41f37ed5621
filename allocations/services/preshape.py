"""Pre-shaping static pools during quiet periods: which GPUs' free instances to reshape, and how.

A static pool (``static-agent`` or ``static-manager``) serves a request at once only when a free instance of its
profile exists; pre-shaping reshapes free instances where the pool's free instances then cover more of the next
requests under the learnt demand mix (:mod:`allocations.mig.preshape_fleet`: pool-wide, by evidence, at most two
GPUs a run, never a GPU being reconfigured, in agent mode never a GPU that holds nothing), so that fewer requests
wait for a reconfiguration. It runs only while
the pool is quiet: no request for ``FATIA_PRESHAPE_QUIET_S`` seconds and none approved or provisioning (a
reconfiguration for someone may be under way). ``FATIA_PRESHAPE_QUIET_S = 0`` turns it off.

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

from allocations.mig.fleet import Gpu, Instance
from allocations.mig.layout import geometry
from allocations.mig.preshape import profile_weights
from allocations.mig.preshape_fleet import HORIZON, OP_COST, plan_fleet_preshape
from allocations.mig.reconfig import Operation
from allocations.models import Allocation, MigReconfiguration, NodePool
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
    changing = set(
        MigReconfiguration.objects.filter(gpu__node__pool=pool, status__in=MigReconfiguration.LIVE).values_list(
            "gpu_id", flat=True
        )
    )
    # The pool's GPUs with an agent inventory, by model: (node, GPU, its instances, busy).
    groups: dict[int, list[tuple[str, Gpu, list[Instance], bool]]] = {}
    for node in layout.fleet.nodes:
        for gpu in node.gpus:
            existing = reported.get((node_ids[node.name], gpu.index))
            if existing is None:
                continue  # no agent inventory: what exists there is unknown
            held = list(gpu.instances)
            taken = {(x.profile, x.start) for x in held}
            free = [Instance(p, s) for p, s in existing if (p, s) not in taken]
            instances = held + free
            if geometry(gpu.model).violations([(x.profile, x.start) for x in instances]):
                logger.warning("Pre-shaping skips %s GPU %d: inventory and records disagree", node.name, gpu.index)
                continue  # leave it for reconcile
            # MIG-manager mode rewrites a whole GPU: one that holds anything stays as it is.
            busy = (mode == "static-manager" and bool(held)) or (layout.by_position[(node.name, gpu.index)] in changing)
            groups.setdefault(id(gpu.model), []).append((node.name, gpu, instances, busy))
    plans: list[GpuPreshape] = []
    for members in groups.values():
        model = members[0][1].model
        weights = dict(zip(model.profile_names(), profile_weights(geometry(model), mix, allowed), strict=True))
        changes = plan_fleet_preshape(
            model,
            [instances for _, _, instances, _ in members],
            weights,
            busy={n for n, member in enumerate(members) if member[3]},
            allowed=allowed,
            # Agent mode keeps GPUs that hold nothing whole (one contiguous run for large requests: measured, it
            # serves as much as no pre-shaping); in MIG-manager mode only those can change at all.
            keep_free_gpus=mode == "static-agent",
        )
        for change in changes:
            node_name, gpu, _, _ = members[change.position]
            reason = (
                f"pre-shaping {node_name}/gpu-{gpu.index} for the demand mix: the pool's free instances then serve "
                f"{change.gain + OP_COST * len(change.operations):.1f} more of the next {HORIZON} expected requests"
            )
            plans.append(
                GpuPreshape(layout.by_position[(node_name, gpu.index)], node_name, gpu.index, change.operations, reason)
            )
    return plans


def preshape_pool(pool_id: int, apply: Apply, *, now: datetime | None = None, mode: str | None = None) -> int:
    """Calls ``apply(gpu_id, operations, reason)`` for each GPU :func:`list_preshape_plans` names; returns how
    many. ``apply`` does the work (and its own locking and auditing): request_reconfiguration in the portal."""
    plans = list_preshape_plans(pool_id=pool_id, now=now, mode=mode)
    for plan in plans:
        apply(plan.gpu_id, plan.operations, plan.reason)
    return len(plans)
