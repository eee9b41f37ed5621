"""Pre-shaping a static pool in a quiet period: which GPUs, which operations, and the apply callable."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from allocations import services
from allocations.mig.catalog import load_catalog
from allocations.mig.layout import is_valid_layout
from allocations.mig.preshape_fleet import MAX_GPUS
from allocations.mig.reconfig import Operation
from allocations.models import Allocation, Gpu, MigReconfiguration, SlicePlacement
from allocations.nodeagent import services as agent_services
from allocations.services.preshape import list_preshape_plans, preshape_pool
from tests.conftest import H100, World
from tests.dashboard.test_dashboard import active_slices
from tests.nodeagent.payloads import FakeNode

pytestmark = pytest.mark.django_db


@pytest.fixture
def static_pool(world: World, settings: Any) -> dict[str, Any]:
    """Alice holds a 3g.40gb; node 0's agent reports it, a free 7g.80gb on another GPU and a free 1g.10gb next to
    Alice's instance; node 1 runs no agent."""
    settings.FATIA_PRESHAPE_QUIET_S = 600
    allocation = active_slices(world, world.alice, world.tenant_a, profile="3g.40gb")
    held = SlicePlacement.objects.select_related("gpu__node").get(allocation=allocation)
    node = held.gpu.node
    other = 1 if held.gpu.index == 0 else 0
    gpus: list[dict[str, Any]] = [{"product": H100, "minor": i, "instances": []} for i in range(8)]
    gpus[held.gpu.index]["instances"] = [
        {"profile": "3g.40gb", "start": held.start},
        {"profile": "1g.10gb", "start": 0 if held.start == 4 else 4},
    ]
    gpus[other]["instances"] = [{"profile": "7g.80gb", "start": 0}]
    credential = agent_services.issue_agent_credential(node_id=node.pk, actor=world.root)[0]
    agent_services.record_inventory(credential=credential, payload=FakeNode(node.name, {"gpus": gpus}).inventory())
    return {
        "held": held,
        "node": node,
        "other": other,
        "reported": {i: [(x["profile"], x["start"]) for x in g["instances"]] for i, g in enumerate(gpus)},
        "later": timezone.now() + timedelta(seconds=601),
    }


def test_a_quiet_static_pool_reshapes_the_free_instances_the_agent_reports(
    world: World, static_pool: dict[str, Any]
) -> None:
    # when
    plans = list_preshape_plans(pool_id=world.pool.pk, now=static_pool["later"], mode="static-agent")

    # then: only GPUs of the node whose agent reported, each named by its Gpu row; at most two a run (the
    # pool-wide scorer changes the GPUs that raise the pool's coverage of the expected requests most)
    node = static_pool["node"]
    assert {p.node for p in plans} == {node.name}
    assert 1 <= len(plans) <= MAX_GPUS
    rows = dict(Gpu.objects.filter(node=node).values_list("index", "pk"))
    assert [p.gpu_id for p in plans] == [rows[p.gpu_index] for p in plans]
    assert all(p.reason.startswith(f"pre-shaping {node.name}/gpu-{p.gpu_index} for the demand mix") for p in plans)
    assert all("more of the next 16 expected requests" in p.reason for p in plans)
    # and in agent mode GPUs that hold nothing stay whole: only Alice's GPU's free half is reshaped
    assert {p.gpu_index for p in plans} == {static_pool["held"].gpu.index}
    # and Alice's instance is never touched, every step of every plan is a valid layout
    held = static_pool["held"]
    model = load_catalog().model(H100)
    for plan in plans:
        layout = set(static_pool["reported"][plan.gpu_index])
        for op in plan.operations:
            assert (plan.gpu_index, op.profile, op.start) != (held.gpu.index, held.profile, held.start)
            layout = layout - {(op.profile, op.start)} if op.action == "destroy" else layout | {(op.profile, op.start)}
            assert is_valid_layout(model, sorted(layout))


def test_a_gpu_being_reconfigured_is_never_preshaped(world: World, static_pool: dict[str, Any]) -> None:
    # given: the GPUs pre-shaping would change now are being reconfigured (for someone else)
    later = static_pool["later"]
    first = list_preshape_plans(pool_id=world.pool.pk, now=later, mode="static-agent")
    assert first
    for plan in first:
        MigReconfiguration.objects.create(gpu_id=plan.gpu_id, reason="busy", plan=[], targets=[])
    # when
    plans = list_preshape_plans(pool_id=world.pool.pk, now=later, mode="static-agent")
    # then: none of them is planned again
    assert not {p.gpu_id for p in plans} & {p.gpu_id for p in first}


def test_a_pool_that_is_not_quiet_or_not_static_is_left_alone(
    world: World, static_pool: dict[str, Any], settings: Any
) -> None:
    later = static_pool["later"]
    # a request in the last ten minutes
    assert list_preshape_plans(pool_id=world.pool.pk, now=later - timedelta(seconds=2), mode="static-agent") == []
    # a dynamic pool (today's pools have no static mode)
    assert list_preshape_plans(pool_id=world.pool.pk, now=later) == []
    # pre-shaping turned off
    settings.FATIA_PRESHAPE_QUIET_S = 0
    assert list_preshape_plans(pool_id=world.pool.pk, now=later, mode="static-agent") == []


def test_a_request_waiting_for_its_slices_keeps_the_pool_busy(world: World, static_pool: dict[str, Any]) -> None:
    # given an approved request not provisioned yet
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_b.pk, pool_id=world.pool.pk, profile="1g.10gb", count=1, lease_hours=8,
        purpose="waits", actor=world.charlie,
    )  # fmt: skip
    assert allocation.status == Allocation.Status.APPROVED
    # when / then
    assert list_preshape_plans(pool_id=world.pool.pk, now=static_pool["later"], mode="static-agent") == []


def test_in_mig_manager_mode_only_gpus_that_hold_nothing_are_reshaped(
    world: World, static_pool: dict[str, Any]
) -> None:
    # when
    plans = list_preshape_plans(pool_id=world.pool.pk, now=static_pool["later"], mode="static-manager")
    # then: Alice's GPU is left out (the manager rewrites whole GPUs), GPUs that hold nothing are reshaped
    assert plans
    assert static_pool["held"].gpu.index not in {p.gpu_index for p in plans}


def test_preshape_pool_hands_each_plan_to_the_apply_callable(world: World, static_pool: dict[str, Any]) -> None:
    # given a real callable that records what it is asked to do
    calls: list[tuple[int, tuple[Operation, ...], str]] = []

    def apply(gpu_id: int, operations: Sequence[Operation], reason: str) -> None:
        calls.append((gpu_id, tuple(operations), reason))

    # when
    count = preshape_pool(world.pool.pk, apply, now=static_pool["later"], mode="static-agent")

    # then: one call per planned GPU, with that plan's operations and reason
    plans = list_preshape_plans(pool_id=world.pool.pk, now=static_pool["later"], mode="static-agent")
    assert count == len(calls) == len(plans) >= 1
    assert calls == [(p.gpu_id, p.operations, p.reason) for p in plans]
