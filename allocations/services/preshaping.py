"""Pre-shaping, carried out: each static pool's plan (services/preshape.py decides) becomes reconfigurations.

Run by the beat (tasks.preshape_static_pools_task). A GPU with a reconfiguration already live is skipped (the
next run plans it again from what its node then publishes); a plan the reconfiguration service refuses (the
agent's inventory and the published layout disagree for a moment, the node is not ready) is logged and skipped
the same way. Reconfigurations made here wait for no request (allocation_id None).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from allocations.mig.reconfig import Operation
from allocations.models import MigReconfiguration, NodePool
from allocations.services.preshape import STATIC_MODES, preshape_pool
from allocations.services.reconfiguration import request_reconfiguration
from tenants.errors import InvalidInput

logger = logging.getLogger(__name__)


def _reconfigure(gpu_id: int, operations: Sequence[Operation], reason: str) -> MigReconfiguration | None:
    if MigReconfiguration.objects.filter(gpu_id=gpu_id, status__in=MigReconfiguration.LIVE).exists():
        return None
    try:
        return request_reconfiguration(gpu_id=gpu_id, operations=operations, reason=reason, allocation_id=None)
    except InvalidInput as exc:
        logger.info("Pre-shaping skips GPU %d: %s", gpu_id, exc)
        return None


def preshape_static_pools(*, now: datetime | None = None) -> int:
    """Pre-shape every quiet static pool; returns how many GPUs were planned (skipped ones included)."""
    planned = 0
    for pool_id in NodePool.objects.filter(mig_mode__in=STATIC_MODES).order_by("pk").values_list("pk", flat=True):
        planned += preshape_pool(pool_id, _reconfigure, now=now)
    return planned
