"""The pre-shaping beat task: each quiet static pool's plans become reconfigurations; busy GPUs and pools wait."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from allocations import services, tasks
from allocations.models import Allocation, Gpu, MigReconfiguration, Node, NodePool
from allocations.services.preshape import list_preshape_plans
from allocations.services.reconfiguration import operations_json, request_reconfiguration
from tests.allocations.test_preshape_service import static_pool  # noqa: F401
from tests.conftest import World

pytestmark = pytest.mark.django_db


@pytest.fixture
def quiet_static_pool(world: World, static_pool: dict[str, Any]) -> dict[str, Any]:  # noqa: F811
    """The pre-shaping fixture's pool in static-agent mode, its node publishing what its agent reports, and its
    requests old enough for the pool to be quiet now."""
    NodePool.objects.filter(pk=world.pool.pk).update(mig_mode=NodePool.MigMode.STATIC_AGENT)
    node = static_pool["node"]
    for index, layout in static_pool["reported"].items():
        Gpu.objects.filter(node=node, index=index).update(
            static_instances=[
                {"profile": p, "start": s, "uuid": f"MIG-{node.name}-{index}-{s}", "device": f"gpu-{index}-{p}-{s}"}
                for p, s in layout
            ]
        )
    Allocation.objects.update(created_at=timezone.now() - timedelta(seconds=601))
    return static_pool


def test_a_quiet_static_pool_gets_a_reconfiguration_per_planned_gpu(
    world: World, quiet_static_pool: dict[str, Any]
) -> None:
    # given
    plans = list_preshape_plans(pool_id=world.pool.pk)
    assert plans
    # when
    tasks.preshape_static_pools_task()
    # then: one reconfiguration per planned GPU, with the plan's operations, waiting for no request
    made = MigReconfiguration.objects.all()
    assert {r.gpu_id: r.plan for r in made} == {p.gpu_id: operations_json(p.operations) for p in plans}
    assert all(r.allocation_id is None and r.reason.startswith("pre-shaping ") for r in made)
    assert Node.objects.get(pk=quiet_static_pool["node"].pk).state == Node.State.RECONFIGURING
    # and a second run while they are live adds nothing
    tasks.preshape_static_pools_task()
    assert MigReconfiguration.objects.count() == len(plans)


def test_a_gpu_being_reconfigured_is_skipped(world: World, quiet_static_pool: dict[str, Any]) -> None:
    # given: a GPU pre-shaping would change is already being changed (its plan's first step, by hand)
    node = quiet_static_pool["node"]
    plans = list_preshape_plans(pool_id=world.pool.pk)
    assert plans
    target = Gpu.objects.get(pk=plans[0].gpu_id)
    running = request_reconfiguration(
        gpu_id=target.pk, operations=plans[0].operations[:1], reason="by hand", allocation_id=None
    )
    # when
    tasks.preshape_static_pools_task()
    # then: its node is reconfiguring, so none of its GPUs is planned
    assert list(MigReconfiguration.objects.all()) == [running]
    # when: the node reads ready while the change is still live (the guard of the GPU itself)
    Node.objects.filter(pk=node.pk).update(state=Node.State.READY)
    expected = list_preshape_plans(pool_id=world.pool.pk)
    tasks.preshape_static_pools_task()
    # then: that GPU keeps its one reconfiguration and is planned no more; the pool's other choices get theirs
    assert target.pk not in {p.gpu_id for p in expected}
    assert list(MigReconfiguration.objects.filter(gpu=target)) == [running]
    made = MigReconfiguration.objects.exclude(pk=running.pk)
    assert sorted(made.values_list("gpu_id", flat=True)) == sorted(p.gpu_id for p in expected)


def test_a_busy_or_dynamic_pool_gets_no_reconfiguration(world: World, quiet_static_pool: dict[str, Any]) -> None:
    # given: a request waiting for its slices keeps the pool busy
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_b.pk, pool_id=world.pool.pk, profile="1g.10gb", count=1, lease_hours=8,
        purpose="waits", actor=world.charlie,
    )  # fmt: skip
    assert allocation.status == Allocation.Status.APPROVED
    # when
    tasks.preshape_static_pools_task()
    # then
    assert not MigReconfiguration.objects.exists()
    # and a dynamic pool, quiet or not, is never pre-shaped
    Allocation.objects.filter(pk=allocation.pk).delete()
    NodePool.objects.filter(pk=world.pool.pk).update(mig_mode=NodePool.MigMode.DYNAMIC)
    tasks.preshape_static_pools_task()
    assert not MigReconfiguration.objects.exists()
