"""Static placement per MIG mode: in MIG-manager mode a GPU that holds an instance is never planned for a change
(mig-parted rebuilds the whole GPU); in agent mode it is, when that is cheapest."""

from __future__ import annotations

from typing import Any

import pytest

from allocations.cluster.static_placement import choose_static
from allocations.models import Gpu, NodePool, SlicePlacement
from tests.conftest import World
from tests.dashboard.test_dashboard import active_slices

pytestmark = pytest.mark.django_db


def instance(gpu: Gpu, profile: str, start: int) -> dict[str, Any]:
    return {"profile": profile, "start": start, "uuid": f"MIG-{gpu.pk}-{start}", "device": f"d-{gpu.pk}-{start}"}


@pytest.fixture
def held_gpu(world: World) -> Gpu:
    """Alice holds a 3g.40gb whose GPU has room for more without a destroy; every other GPU holds a free
    7g.80gb (a 1g.10gb there needs a destroy and a create)."""
    held = SlicePlacement.objects.select_related("gpu").get(
        allocation=active_slices(world, world.alice, world.tenant_a, profile="3g.40gb")
    )
    for gpu in Gpu.objects.filter(node__pool=world.pool):
        Gpu.objects.filter(pk=gpu.pk).update(static_instances=[instance(gpu, "7g.80gb", 0)])
    Gpu.objects.filter(pk=held.gpu.pk).update(static_instances=[instance(held.gpu, "3g.40gb", held.start)])
    return held.gpu


@pytest.mark.parametrize(("mode", "on_held"), [("static-agent", True), ("static-manager", False)])
def test_a_gpu_holding_an_instance_is_changed_only_in_agent_mode(
    world: World, held_gpu: Gpu, mode: str, on_held: bool
) -> None:
    # given
    NodePool.objects.filter(pk=world.pool.pk).update(mig_mode=mode)
    pool = NodePool.objects.get(pk=world.pool.pk)
    # when
    choice = choose_static(pool=pool, profile="1g.10gb", count=1)
    # then
    assert choice is not None and choice.plan.operations
    assert (choice.gpu.pk == held_gpu.pk) is on_held
    if not on_held:
        assert [op.action for op in choice.plan.operations] == ["destroy", "create"]
