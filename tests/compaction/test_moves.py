"""Move plans that run (issue 14): only movable (or idle) requests move, each step once, resumable, audited, the
owner told before and after, quota untouched; the beat compacts fragmented pools; a request refused for
fragmentation alone is rescued by at most two moves."""

from __future__ import annotations

import pytest
from django.core import mail
from django.utils import timezone

from allocations import services
from allocations.models import Allocation, MovePlan, Notification, OutboxMessage, Quota, SliceMove
from allocations.services import outbox
from allocations.services.compaction import compact_pools, preview_compaction, start_compaction
from allocations.services.moves import advance_move_plan
from allocations.tasks import advance_move_plan_task, notify_move_task
from tenants.audit_text import describe_event
from tenants.errors import InvalidInput
from tenants.models import AuditEvent
from tests.compaction.world import Small, small_pool, where
from tests.conftest import World

ADVANCE = "allocations.tasks.advance_move_plan_task"


@pytest.fixture
def small(world: World) -> Small:
    return small_pool(world)


def fragmented(small: Small, *, movable: bool = True) -> Allocation:
    """GPU 0 holds only a 1g.10gb (movable or not), GPU 1 a busy 1g.10gb, GPU 2 nothing: moving the first next
    to the second frees GPU 0."""
    lone = small.active("1g.10gb", gpu=0, start=0, movable=movable)
    small.active("1g.10gb", gpu=1, start=0)
    return lone


def run_plan(plan: MovePlan, limit: int = 20) -> MovePlan:
    for _ in range(limit):
        plan = advance_move_plan(plan_id=plan.pk)
        if plan.status != MovePlan.Status.APPLYING:
            return plan
    raise AssertionError("the plan did not end")


def test_a_movable_slice_moves_and_a_whole_gpu_comes_free(small: Small, world: World) -> None:
    lone = fragmented(small)
    quota_before = Quota.objects.values_list("compute_slices_used", "memory_slices_used").get(pool=small.pool)
    # when
    plan = start_compaction(pool_id=small.pool.pk, actor=world.root)
    # then
    assert plan.summary["whole_gpus_before"] == 1
    assert plan.summary["whole_gpus_after"] == 2
    assert [(m.allocation_id, m.from_gpu.index, m.to_gpu.index) for m in plan.moves.all()] == [(lone.pk, 0, 1)]
    assert run_plan(plan).status == MovePlan.Status.DONE
    assert where(lone)[0][0] == 1
    assert not small.gpu(0).placements.exists()
    # the quota counters are exactly what they were: a moved slice is the same slice
    assert Quota.objects.values_list("compute_slices_used", "memory_slices_used").get(pool=small.pool) == quota_before


def test_a_slice_that_is_not_movable_never_moves(small: Small, world: World) -> None:
    lone = fragmented(small, movable=False)
    assert preview_compaction(pool=small.pool).moves == []
    with pytest.raises(InvalidInput, match="frees no whole GPU"):
        start_compaction(pool_id=small.pool.pk, actor=world.root)
    assert compact_pools() == []
    assert where(lone) == [(0, 0)]


def test_an_idle_slice_counts_as_movable(small: Small) -> None:
    lone = fragmented(small, movable=False)
    Allocation.objects.filter(pk=lone.pk).update(idle_since=timezone.now())
    [plan] = compact_pools()
    assert plan.trigger == MovePlan.Trigger.BEAT
    assert run_plan(plan).status == MovePlan.Status.DONE
    assert where(lone)[0][0] == 1


def test_a_request_made_unmovable_before_its_move_is_skipped(small: Small, world: World) -> None:
    lone = fragmented(small)
    plan = start_compaction(pool_id=small.pool.pk, actor=world.root)
    Allocation.objects.filter(pk=lone.pk).update(movable=False)
    assert run_plan(plan).status == MovePlan.Status.DONE
    assert plan.moves.get().step == SliceMove.Step.SKIPPED
    assert where(lone) == [(0, 0)]


def test_the_owner_is_told_before_and_after(small: Small, world: World) -> None:
    lone = fragmented(small)
    plan = start_compaction(pool_id=small.pool.pk, actor=world.root)
    advance_move_plan(plan_id=plan.pk)
    # before the slice moves: one message in the inbox, one e-mail queued
    [before] = Notification.objects.filter(recipient=world.alice, kind=Notification.Kind.ALLOCATION_MOVE)
    assert "moves from small-node-0/gpu-0:0 to small-node-0/gpu-1" in before.text
    assert where(lone) == [(0, 0)]
    run_plan(plan)
    texts = list(
        Notification.objects.filter(recipient=world.alice, kind=Notification.Kind.ALLOCATION_MOVE)
        .order_by("pk")
        .values_list("text", flat=True)
    )
    assert len(texts) == 2
    assert "now runs at small-node-0/gpu-1" in texts[1]
    queued = [m.args for m in OutboxMessage.objects.filter(task_name="allocations.tasks.notify_move_task")]
    move = plan.moves.get()
    assert queued == [[move.pk, "before"], [move.pk, "after"]]
    for args in queued:
        notify_move_task(*args)
    assert [m.to for m in mail.outbox] == [[world.alice.email]] * 2
    assert "moves to make room" in mail.outbox[0].subject
    assert "moved" in mail.outbox[1].subject


def test_each_step_runs_once_and_is_audited_once(small: Small, world: World) -> None:
    lone = fragmented(small)
    plan = start_compaction(pool_id=small.pool.pk, actor=world.root)
    for _ in range(3):
        advance_move_plan(plan_id=plan.pk)
    assert plan.moves.get().step == SliceMove.Step.DONE
    # redelivered and resent copies of the task: the plan ends once, nothing is done twice
    again = [advance_move_plan(plan_id=plan.pk) for _ in range(3)]
    assert again[-1].status == MovePlan.Status.DONE
    events = AuditEvent.objects.filter(object_id=str(lone.pk), verb__startswith="move")
    verbs = list(events.values_list("verb", flat=True))
    assert sorted(verbs) == ["move", "move_announced", "move_placed"]
    assert AuditEvent.objects.filter(verb="compaction_finished").count() == 1
    assert Notification.objects.filter(kind=Notification.Kind.ALLOCATION_MOVE).count() == 2
    assert where(lone)[0][0] == 1


def test_a_plan_resumes_after_a_worker_died_between_steps(small: Small, world: World) -> None:
    lone = fragmented(small)
    plan = start_compaction(pool_id=small.pool.pk, actor=world.root)
    advance_move_plan(plan_id=plan.pk)
    advance_move_plan(plan_id=plan.pk)  # placed at the destination; the worker dies before running the next step
    assert plan.moves.get().step == SliceMove.Step.PLACED
    assert sorted(g for g, _ in where(lone)) == [0, 1]  # both slots held meanwhile: every layout stays valid
    # the next step's message is committed and not done: the outbox's sweep sends it again ...
    due = OutboxMessage.objects.filter(task_name=ADVANCE, done_at__isnull=True)
    assert due.exists()
    assert set(outbox.open_message_ids(ADVANCE, [plan.pk])) == set(due.values_list("pk", flat=True))
    # ... and the task, run again by name, finishes the plan
    for _ in range(3):
        advance_move_plan_task(plan.pk)
    plan.refresh_from_db()
    assert plan.status == MovePlan.Status.DONE
    assert where(lone)[0][0] == 1 and len(where(lone)) == 1


def test_a_destination_taken_meanwhile_ends_the_plan_failed(small: Small, world: World) -> None:
    lone = fragmented(small)
    plan = start_compaction(pool_id=small.pool.pk, actor=world.root)
    move = plan.moves.get()
    # someone takes the destination slot before the move is placed
    small.active("1g.10gb", gpu=1, start=move.to_start)
    assert run_plan(plan).status == MovePlan.Status.FAILED
    plan.refresh_from_db()
    assert "is taken now" in plan.status_message
    assert where(lone) == [(0, 0)]


def test_one_plan_at_a_time_per_pool(small: Small, world: World) -> None:
    fragmented(small)
    start_compaction(pool_id=small.pool.pk, actor=world.root)
    with pytest.raises(InvalidInput, match="being applied"):
        start_compaction(pool_id=small.pool.pk, actor=world.root)
    assert compact_pools() == []


def test_a_request_refused_for_fragmentation_is_rescued_by_moves(small: Small, world: World) -> None:
    # GPU 0: a busy 3g.40gb at 0 and a movable 1g.10gb at 4 (a 3g.40gb would fit at 4 without it);
    # GPU 1 full; GPU 2: a busy 1g.10gb, room for the movable one.
    small.active("3g.40gb", gpu=0, start=0)
    blocker = small.active("1g.10gb", gpu=0, start=4, movable=True)
    small.active("4g.40gb", gpu=1, start=0)
    small.active("3g.40gb", gpu=1, start=4)
    small.active("1g.10gb", gpu=2, start=0)
    small.active("3g.40gb", gpu=2, start=4)
    # when
    refused = small.approved("3g.40gb")
    waiting = services.provision_allocation(allocation_id=refused.pk)
    # then it waits for a plan of one move instead of failing
    assert waiting.status == Allocation.Status.APPROVED
    assert "move to make room" in waiting.status_message
    plan = MovePlan.objects.get(for_allocation=refused)
    assert plan.trigger == MovePlan.Trigger.RESCUE
    assert [m.allocation_id for m in plan.moves.all()] == [blocker.pk]
    # provisioning again while the plan applies changes nothing
    assert services.provision_allocation(allocation_id=refused.pk).status == Allocation.Status.APPROVED
    assert run_plan(plan).status == MovePlan.Status.DONE
    assert OutboxMessage.objects.filter(task_name="allocations.tasks.provision_allocation_task", args=[refused.pk])
    # the plan's end provisions it again: now it fits
    assert services.provision_allocation(allocation_id=refused.pk).status == Allocation.Status.ACTIVE
    assert where(refused) == [(0, 4)]
    assert where(blocker)[0][0] == 2


def test_without_movable_slices_a_refused_request_waits_in_the_queue(small: Small, world: World) -> None:
    small.active("3g.40gb", gpu=0, start=0)
    small.active("1g.10gb", gpu=0, start=4)
    small.active("7g.80gb", gpu=1, start=0)
    small.active("1g.10gb", gpu=2, start=0)
    small.active("3g.40gb", gpu=2, start=4)
    refused = small.approved("3g.40gb")
    assert services.provision_allocation(allocation_id=refused.pk).status == Allocation.Status.QUEUED
    assert not MovePlan.objects.exists()


def test_the_timeline_says_what_compaction_did(small: Small, world: World) -> None:
    lone = fragmented(small)
    plan = run_plan(start_compaction(pool_id=small.pool.pk, actor=world.root))
    moved = AuditEvent.objects.get(object_id=str(lone.pk), verb="move")
    assert describe_event(moved).startswith("A slice moved from small-node-0/gpu-0:0 to small-node-0/gpu-1:")
    started = AuditEvent.objects.get(object_type="moveplan", object_id=str(plan.pk), verb="compaction_started")
    assert describe_event(started) == "Compaction of small started (admin): 1 move(s), whole GPUs free 1 -> 2"
