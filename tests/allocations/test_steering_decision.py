"""Adaptive steering (issue 14, "Steering that pays"; allocations/cluster/steering.py): a single slice is steered to
our policy's slot only while arrivals in its pool are sparse and on a GPU with no claim in flight; in a burst it
takes the scheduler's first fit and holds no GPU. Kubernetes backend, no API server: planning makes no cluster call
(tests/kube/test_steering.py has the control-plane end)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from allocations import services
from allocations.cluster.steering import Steering, decide_steering, steer_mode
from allocations.cluster.sync import start_provisioning
from allocations.models import Allocation, NodePool
from tenants.models import AuditEvent
from tests.conftest import H100, World
from tests.test_settings import boot

Status = Allocation.Status


@pytest.fixture
def pool(world: World, settings: Any) -> NodePool:
    """The Kubernetes backend (default steering: adaptive) and a pool of one node with `gpus` H100s (2)."""
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    settings.FATIA_KUBECONFIG = "unused: planning talks to no cluster"
    assert settings.FATIA_KUBE_STEER_SLOTS == "adaptive"
    return make_pool(world, gpus=2)


def make_pool(world: World, gpus: int) -> NodePool:
    pool = services.create_node_pool(name="steer", slug="steer", gpu_model=H100, actor=world.root)
    services.register_node(pool_id=pool.pk, name="steer-0", gpu_count=gpus, actor=world.root)
    for tenant in (world.tenant_a, world.tenant_b):
        services.set_tenant_quota(
            tenant_id=tenant.pk, pool_id=pool.pk, compute_slices_limit=28, memory_slices_limit=32, actor=world.root
        )
    return pool


def approved(world: World, pool: NodePool, profile: str) -> Allocation:
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=pool.pk,
        profile=profile,
        count=1,
        lease_hours=2,
        purpose="steer",
        actor=world.alice,
    )
    if allocation.status == Status.PENDING:
        services.approve_allocation(allocation_id=allocation.pk, actor=world.mallory)
    return Allocation.objects.get(pk=allocation.pk)


def where(allocation: Allocation) -> list[tuple[int, int, list[int]]]:
    """(GPU index, start, starts of the devices tainted to steer there) of each planned slice."""
    return [(p.gpu.index, p.start, p.blocked_starts) for p in allocation.placements.select_related("gpu")]


def test_a_request_that_arrives_alone_is_steered_to_our_slot(world: World, pool: NodePool) -> None:
    # given: nothing else in flight in the pool; our policy puts a 3g.40gb at slot 4 (at 0 it strands slot 7)
    three = approved(world, pool, "3g.40gb")
    # when
    planned = start_provisioning(allocation_id=three.pk)
    # then: slot 4, the device at 0 (first fit) to be tainted
    assert planned.status == Status.PROVISIONING
    assert where(planned) == [(0, 4, [0])]


def test_in_a_burst_the_scheduler_takes_first_fit_and_no_gpu_is_held(world: World, pool: NodePool) -> None:
    # given: two requests approved together (both in flight)
    first, second = approved(world, pool, "3g.40gb"), approved(world, pool, "3g.40gb")
    # when
    first = start_provisioning(allocation_id=first.pk)
    second = start_provisioning(allocation_id=second.pk)
    # then: neither is steered; the second goes next to the first's waiting claim, so one GPU stays whole
    assert where(first) == [(0, 0, [])]
    assert where(second) == [(0, 4, [])]
    audit = AuditEvent.objects.get(verb="provision", object_id=str(first.pk))
    assert audit.after["steering"] == "first fit: a burst, 1 other requests of the pool in flight"


def test_always_steers_in_a_burst_too_and_the_steered_gpu_is_held(world: World, pool: NodePool, settings: Any) -> None:
    # given: the same burst, steering always
    settings.FATIA_KUBE_STEER_SLOTS = "always"
    first, second = approved(world, pool, "3g.40gb"), approved(world, pool, "3g.40gb")
    # when
    first = start_provisioning(allocation_id=first.pk)
    second = start_provisioning(allocation_id=second.pk)
    # then: the first is steered and holds its GPU, so the second breaks the other one (what spread bursts)
    assert where(first) == [(0, 4, [0])]
    assert where(second)[0][0] == 1


@pytest.mark.parametrize("in_flight", [True, False])
def test_a_gpu_with_a_claim_in_flight_is_not_steered_to(world: World, settings: Any, in_flight: bool) -> None:
    # given: one GPU holding a 2g.20gb at slot 0, its claim waiting (or allocated); one other request in flight
    # counts as sparse here
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    settings.FATIA_KUBE_STEER_MAX_IN_FLIGHT = 1
    pool = make_pool(world, gpus=1)
    two = start_provisioning(allocation_id=approved(world, pool, "2g.20gb").pk)
    assert where(two) == [(0, 0, [])]
    if not in_flight:
        Allocation.objects.filter(pk=two.pk).update(status=Status.ACTIVE)  # as the scheduler's allocation makes it
    # when: a 1g.20gb, which our policy puts at slot 6 (first fit: 2)
    one = start_provisioning(allocation_id=approved(world, pool, "1g.20gb").pk)
    # then: steered only where the GPU has no claim in flight
    assert where(one) == ([(0, 2, [])] if in_flight else [(0, 6, [2, 4])])


def test_the_decision_counts_other_requests_in_flight_up_to_the_limit(
    world: World, pool: NodePool, settings: Any
) -> None:
    # given: three approved requests
    a, b, c = (approved(world, pool, "1g.10gb") for _ in range(3))
    # then: each sees the two others: sparse with a limit of 2, a burst with 1 (counted up to the limit + 1)
    settings.FATIA_KUBE_STEER_MAX_IN_FLIGHT = 2
    assert decide_steering(allocation=a) == Steering(steer=True, others_in_flight=2)
    settings.FATIA_KUBE_STEER_MAX_IN_FLIGHT = 1
    assert decide_steering(allocation=c) == Steering(steer=False, others_in_flight=2)
    # and: a queued request is not in flight
    Allocation.objects.filter(pk=b.pk).update(status=Status.QUEUED)
    assert decide_steering(allocation=c) == Steering(steer=True, others_in_flight=1)
    # and: a multi-slice request is never steered, even with "always"
    many, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=pool.pk,
        profile="1g.10gb",
        count=2,
        lease_hours=2,
        purpose="x",
        actor=world.alice,
    )
    settings.FATIA_KUBE_STEER_SLOTS = "always"
    assert not decide_steering(allocation=many).steer


def test_the_old_boolean_values_still_mean_always_and_off(settings: Any) -> None:
    settings.FATIA_KUBE_STEER_SLOTS = True
    assert steer_mode() == "always"
    settings.FATIA_KUBE_STEER_SLOTS = False
    assert steer_mode() == "off"


def test_a_bad_steering_mode_stops_start_up_naming_the_setting() -> None:
    result = boot(DEBUG="True", FATIA_KUBE_STEER_SLOTS="sometimes")
    assert result.returncode == 1
    assert "FATIA_KUBE_STEER_SLOTS must be 'off', 'adaptive' or 'always'" in result.stderr
    assert "not 'sometimes'" in result.stderr


def test_in_a_burst_adaptive_plans_as_off_does_for_one_query_more(world: World, pool: NodePool, settings: Any) -> None:
    # given: three requests approved together (a burst: the others are in flight when the first is planned)
    first, *_ = (approved(world, pool, "3g.40gb") for _ in range(3))

    def plan(mode: str) -> tuple[list[str], list[tuple[int, int, list[int]]]]:
        """The queries of planning `first` with steering `mode`, and the plan; rolled back, so every mode plans
        from the same state."""
        settings.FATIA_KUBE_STEER_SLOTS = mode
        with transaction.atomic(), CaptureQueriesContext(connection) as queries:
            planned = where(start_provisioning(allocation_id=first.pk))
            transaction.set_rollback(True)
        return [q["sql"] for q in queries.captured_queries], planned

    plan("off")  # whatever a first plan caches
    # when
    off_sql, off_plan = plan("off")
    adaptive_sql, adaptive_plan = plan("adaptive")
    # then: the burst's fallback is off's plan (first fit, nothing steered) for the in-flight count alone: a
    # worker draining a burst does no more than with steering off (bench/steering.py measured the burst's time)
    assert adaptive_plan == off_plan == [(0, 0, [])]
    extra = Counter(map(shape, adaptive_sql)) - Counter(map(shape, off_sql))
    assert len(adaptive_sql) == len(off_sql) + 1
    [in_flight] = extra.elements()
    assert 'FROM "allocations_allocation" WHERE' in in_flight and "LIMIT N" in in_flight


def shape(sql: str) -> str:
    """A query without its values (times, ids), to compare two plans' queries."""
    return re.sub(r"\d+", "N", re.sub(r"'[^']*'", "?", sql))
