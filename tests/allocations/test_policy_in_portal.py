"""The portal places with the engine's `ours` (issue 14): what the simulated backend records is what the engine
decides for the pool's layout, sized to the pool."""

from __future__ import annotations

from allocations import services
from allocations.mig.engine import PlacementEngine
from allocations.mig.fleet import PlacementRequest
from allocations.mig.policies import FragmentationAware
from allocations.models import Allocation
from allocations.placement import POLICY, read_pool, recent_demand
from tests.conftest import World


def provision(world: World, profile: str) -> Allocation:
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile=profile,
        count=1,
        lease_hours=8,
        purpose="policy check",
        actor=world.alice,
    )
    services.provision_allocation(allocation_id=allocation.pk)
    allocation.refresh_from_db()
    return allocation


def test_the_simulated_backend_places_where_ours_decides(world: World) -> None:
    # given the world's pool of 16 empty H100s
    assert POLICY == "ours"
    # when a 1g.20gb is provisioned, then it takes slots 6-7, which only 1g.2x, 3g or 7g can use (first fit: 0)
    first = provision(world, "1g.20gb")
    assert first.status == Allocation.Status.ACTIVE
    [placed] = first.placements.select_related("gpu__node")
    assert (placed.gpu.node.name, placed.gpu.index, placed.start) == ("h100-node-0", 0, 6)
    # and a 1g.10gb next: the portal's choice is the engine's on the pool's layout, with the pool's 16 GPUs
    layout = read_pool(world.pool)
    engine = PlacementEngine(layout.fleet, POLICY, recent_demand(world.pool))
    assert isinstance(engine.policy, FragmentationAware) and engine.policy.open_cost == 0.1
    expected = engine.choose(PlacementRequest("1g.10gb", pool=world.pool.slug))
    second = provision(world, "1g.10gb")
    [placed] = second.placements.select_related("gpu__node")
    assert expected is not None
    assert (placed.gpu.node.name, placed.gpu.index, placed.start) == (expected.node, expected.gpu_index, expected.start)
    # which fills the GPU already in use rather than opening another
    assert (placed.gpu.node.name, placed.gpu.index) == ("h100-node-0", 0)
