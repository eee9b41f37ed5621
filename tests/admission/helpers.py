"""A pool that holds requests (issue 14) for the admission tests: H100s, one per node, whose demand is mostly whole
GPUs, so a small slice that would break the pool's only whole GPU is held and one next to others is not."""

from __future__ import annotations

from django.utils import timezone

from allocations import services
from allocations.models import Allocation, NodePool
from tests.conftest import World
from tests.queue.helpers import small_pool

Status = Allocation.Status
# Whole-GPU requests in the pool's history: the learnt demand (placement.recent_demand) then says 7g.80gb.
HISTORY = 20


def whole_gpu_history(world: World, pool: NodePool) -> None:
    """Given, not a rule under test: the pool has served whole GPUs lately (released rows, as the demand reads them)."""
    now = timezone.now()
    Allocation.objects.bulk_create(
        Allocation(
            tenant=world.tenant_b, pool=pool, requested_by=world.charlie, profile="7g.80gb", count=1, lease_hours=1,
            purpose="history", compute_slices=7, memory_slices=8, status=Status.RELEASED, ended_at=now,
        )
        for _ in range(HISTORY)
    )  # fmt: skip


def holding_pool(world: World, *, nodes: int = 1, slug: str = "hold", hold: bool = True) -> NodePool:
    """`nodes` nodes of one H100 each, demand mostly whole GPUs; admission on (`hold`) with the default bound."""
    pool = small_pool(world, nodes=nodes, slug=slug)
    whole_gpu_history(world, pool)
    if hold:
        pool = services.update_node_pool(pool_id=pool.pk, admission=NodePool.Admission.HOLD, actor=world.root)
    return pool


def hold_on(world: World, pool: NodePool) -> NodePool:
    return services.update_node_pool(pool_id=pool.pk, admission=NodePool.Admission.HOLD, actor=world.root)
