"""Compaction moves keep out of a lender's room (issue 15, allocations/cohorts/fence.py; issue 14's moves): the
admin's and the beat's plans, the rescue of a refused request, and a plan made before the room was held
(PostgreSQL, simulated fleet)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from allocations import services
from allocations.costs import gpu_model_for
from allocations.models import Allocation, Gpu, MovePlan, SlicePlacement
from allocations.placement import dra_device_name
from allocations.services.compaction import compact_pools, preview_compaction, start_compaction
from allocations.services.moves import advance_move_plan, step_move_plan
from tenants.errors import InvalidInput
from tests.cohorts.helpers import ask_c, lender_waits
from tests.compaction.fake_kube import FakeKube, install
from tests.compaction.kube_world import on_cluster
from tests.compaction.world import Small, small_pool, where
from tests.conftest import World
from tests.queue.helpers import H100, ask

Status = Allocation.Status


def put(allocation: Allocation, node: str, start: int, *, movable: bool) -> Allocation:
    """Given, not a rule under test: the request's one slice sits at `node`'s GPU 0, `start`."""
    spec = gpu_model_for(H100).profile(allocation.profile)
    SlicePlacement.objects.filter(allocation=allocation).update(
        gpu=Gpu.objects.get(node__name=node, index=0),
        start=start,
        device_name=dra_device_name(gpu_index=0, profile=allocation.profile, profile_id=spec.profile_id, start=start),
    )
    Allocation.objects.filter(pk=allocation.pk).update(movable=movable)
    allocation.refresh_from_db()
    return allocation


def third_node(world: World, lender: Allocation) -> Allocation:
    """Given (lender_waits: node 0 full, node 1 free at 2-3 and held for the lender at 0-3): a third node whose
    only slice, a movable 1g.10gb of Team A, could go next to the borrowed ones on node 1 to free the GPU."""
    services.register_node(pool_id=lender.pool_id, name="q1-node-2", gpu_count=1, actor=world.root)
    lone = ask(world, lender.pool, "1g.10gb")
    assert lone.status == Status.ACTIVE
    return put(lone, "q1-node-2", 0, movable=True)


def moves_of(plan: MovePlan) -> list[tuple[int, str, int]]:
    return [(m.allocation_id, m.to_gpu.node.name, m.to_start) for m in plan.moves.order_by("position")]


def test_a_compaction_that_would_move_a_slice_into_a_lender_s_room_is_refused_saying_for_whom(world: World):
    lender, _, _ = lender_waits(world)
    lone = third_node(world, lender)
    # when: the admin previews and starts a compaction; the beat passes
    preview = preview_compaction(pool=lender.pool)
    with pytest.raises(InvalidInput) as refused:
        start_compaction(pool_id=lender.pool_id, actor=world.root)
    # then: the only plan that frees a GPU moves the slice into the held slots: refused, saying for whom
    assert f"held for request #{lender.pk}" in preview.refusal and preview.moves == []
    assert f"held for request #{lender.pk}" in refused.value.errors["pool"][0]
    assert compact_pools() == []
    assert not MovePlan.objects.exists()
    # when: the lender withdraws, so the room is no longer held
    services.release_allocation(allocation_id=lender.pk, actor=world.alice)
    # then: the same compaction moves the slice there (what the fence kept it from)
    plan = start_compaction(pool_id=lender.pool_id, actor=world.root)
    assert moves_of(plan) == [(lone.pk, "q1-node-1", 2)]


def test_a_compaction_is_made_again_without_the_held_gpu_when_another_frees_one(world: World):
    lender, _, _ = lender_waits(world)
    lone = third_node(world, lender)
    # given: a fourth node with one busy 1g.10gb: the slice may go there instead of into the held room
    services.register_node(pool_id=lender.pool_id, name="q1-node-3", gpu_count=1, actor=world.root)
    busy = put(ask(world, lender.pool, "1g.10gb"), "q1-node-3", 0, movable=False)
    assert busy.status == Status.ACTIVE
    # when
    plan = start_compaction(pool_id=lender.pool_id, actor=world.root)
    # then: the plan frees node 2 by moving its slice to node 3, never to node 1
    assert [(a, node) for a, node, _ in moves_of(plan)] == [(lone.pk, "q1-node-3")]


def test_a_rescue_that_would_land_in_a_lender_s_room_is_refused_and_the_request_waits_saying_why(world: World):
    lender, _, team_c = lender_waits(world)
    lone = third_node(world, lender)
    # given: node 2 also runs a 3g.40gb at start 4 that may not move: Team C's 4g.40gb (start 0 only) fits there
    # only once the 1g.10gb moves away, and the one place it could go is node 1's held slots
    fixed = ask(world, lender.pool, "3g.40gb")
    put(fixed, "q1-node-2", 4, movable=False)
    # when: Team C asks for a 4g.40gb (refused for fragmentation alone: a rescue is sought)
    refused = ask_c(world, team_c, "4g.40gb")
    # then: no plan is started; the request waits in the queue, told for whom the room is held
    assert refused.status == Status.QUEUED
    assert f"held for request #{lender.pk}" in refused.status_message
    assert not MovePlan.objects.exists()
    assert list(SlicePlacement.objects.filter(allocation=lone).values_list("gpu__node__name", "start")) == [
        ("q1-node-2", 0)
    ]


def test_a_plan_made_before_the_room_was_held_fails_at_the_move_that_would_land_in_it(world: World):
    lender, borrowed, _ = lender_waits(world)
    lone = third_node(world, lender)
    # given: the plan was made while the notices were not standing (called off, given again after)
    notices = list(Allocation.objects.filter(reclaimed_for=lender).values_list("pk", "reclaim_at"))
    Allocation.objects.filter(reclaimed_for=lender).update(reclaim_at=None)
    plan = start_compaction(pool_id=lender.pool_id, actor=world.root)
    assert moves_of(plan) == [(lone.pk, "q1-node-1", 2)]
    for pk, reclaim_at in notices:
        Allocation.objects.filter(pk=pk).update(reclaim_at=reclaim_at)
    # when: the plan is applied
    for _ in range(5):
        plan = advance_move_plan(plan_id=plan.pk)
    # then: it fails at placing the slice there, saying why; the slice stays where it was
    assert plan.status == MovePlan.Status.FAILED
    assert f"held for request #{lender.pk}" in plan.status_message
    assert list(SlicePlacement.objects.filter(allocation=lone).values_list("gpu__node__name", "start")) == [
        ("q1-node-2", 0)
    ]


@pytest.fixture
def small(world: World) -> Small:
    return small_pool(world)


@pytest.fixture
def cluster(small: Small, monkeypatch: pytest.MonkeyPatch) -> FakeKube:
    """As tests/compaction/test_kube_moves.py's: the pool's GPUs with UUIDs, the fake adapter installed."""
    for gpu in Gpu.objects.filter(node__pool=small.pool):
        Gpu.objects.filter(pk=gpu.pk).update(uuid=f"GPU-{gpu.index}")
    fake = install(monkeypatch)
    fake.nodes = ("small-node-0",)
    return fake


def test_on_kubernetes_a_move_into_a_room_held_since_the_plan_was_made_fails_before_any_claim(
    small: Small, cluster: FakeKube, settings
):
    # given (tests/compaction/test_kube_moves.py): GPU 0's movable 1g.10gb is planned next to GPU 1's busy one
    lone = small.active("1g.10gb", gpu=0, start=0, movable=True)
    busy = small.active("1g.10gb", gpu=1, start=0)
    lender = small.active("3g.40gb", gpu=2, start=0)  # made a lender below
    on_cluster(cluster, settings, lone, busy)
    plan = start_compaction(pool_id=small.pool.pk, actor=small.world.root)
    move = plan.moves.get()
    assert move.to_gpu.index == 1
    # and then: a cohort reclaim gave notice to the busy one for a waiting lender, whose room is GPU 1 whole
    room = [{"gpu": move.to_gpu_id, "node": "small-node-0", "index": 1, "start": 0, "size": 8}]
    Allocation.objects.filter(pk=lender.pk).update(status=Status.QUEUED, reclaim_room=room)
    SlicePlacement.objects.filter(allocation=lender).delete()  # a queued request holds no slot
    Allocation.objects.filter(pk=busy.pk).update(reclaimed_for=lender, reclaim_at=timezone.now() + timedelta(hours=1))
    # when: the plan is applied (the owner told, then the new claim would be made)
    for _ in range(3):
        step_move_plan(plan_id=plan.pk)
    # then: the move fails, saying for whom the room is held; no claim was made at the destination
    plan.refresh_from_db()
    move.refresh_from_db()
    assert plan.status == MovePlan.Status.FAILED
    assert f"held for request #{lender.pk}" in plan.status_message
    assert cluster.calls["apply_resource_claim"] == 0
    assert where(lone) == [(0, 0)]
