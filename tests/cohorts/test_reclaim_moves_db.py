"""A lender's room made by a reclaim and a move together (issue 15) on PostgreSQL: when no set of borrowed slices
taken back makes room for it, notice goes to those that do once one movable slice moves, and the move is started
as a rescue of the lender (allocations/cohorts/rescue.py `plan_room`, services/cohort_notices.py)."""

from __future__ import annotations

from datetime import timedelta

from allocations import services
from allocations.cohorts.fence import Fence, HeldSlot, pool_fences
from allocations.models import Allocation, Cohort, MovePlan, Quota
from allocations.services.cohort_reclaim import reclaim_due_borrowed
from allocations.services.moves import advance_move_plan
from allocations.services.queue import admit_queued
from tenants.models import Tenant
from tests.cohorts.helpers import verbs
from tests.cohorts.layout import put
from tests.compaction.world import where
from tests.conftest import H100, World
from tests.queue.helpers import ask

Status = Allocation.Status


def test_a_take_back_and_a_move_make_room_for_a_lender_that_neither_alone_would(world: World):
    # given: one node of two H100s; Team A is guaranteed the pool (14 compute / 16 memory), Team B 1 / 1, in one
    # cohort: what B borrows stays within what A lends, so A's request below is short of room, not of quota
    pool = services.create_node_pool(name="Moves pool", slug="mv", gpu_model=H100, actor=world.root)
    services.register_node(pool_id=pool.pk, name="mv-node-0", gpu_count=2, actor=world.root)
    for tenant, (compute, memory) in ((world.tenant_a, (14, 16)), (world.tenant_b, (1, 1))):
        services.set_tenant_quota(
            tenant_id=tenant.pk, pool_id=pool.pk, compute_slices_limit=compute, memory_slices_limit=memory,
            actor=world.root,
        )  # fmt: skip
    cohort = Cohort.objects.create(pool=pool, name="research", reclaim_grace_minutes=30)
    Quota.objects.filter(pool=pool).update(cohort=cohort)
    Tenant.objects.filter(pk__in=[world.tenant_a.pk, world.tenant_b.pk]).update(auto_approve_max_compute_slices=7)
    # and: GPU 0 holds B's 1g.10gb within its guarantee (movable) at start 0 and a borrowed 2g.20gb at start 2;
    # GPU 1 holds A's own 3g.40gb at start 0 and B's borrowed 2g.20gb at start 4
    lone = put(pool, ask(world, pool, "1g.10gb", b=True), 0, 0, movable=True)
    borrowed = put(pool, ask(world, pool, "2g.20gb", b=True), 0, 2)
    put(pool, ask(world, pool, "3g.40gb"), 1, 0)
    other = put(pool, ask(world, pool, "2g.20gb", b=True), 1, 4)
    assert (lone.borrowed_compute_slices, borrowed.borrowed_compute_slices) == (0, 2)
    # when: A asks for a 4g.40gb within its guarantee: it goes at start 0 only, and taking back B's borrowed
    # slices alone frees no start 0 (the 1g.10gb, not borrowed, stays on GPU 0; A's own 3g.40gb on GPU 1)
    lender = ask(world, pool, "4g.40gb")
    # then: it waits; notice goes to the borrowed 2g.20gb on GPU 0 alone, and a rescue plan moves the 1g.10gb
    assert lender.status == Status.QUEUED
    assert list(Allocation.objects.exclude(reclaim_at=None).values_list("pk", "reclaimed_for_id")) == [
        (borrowed.pk, lender.pk)
    ]
    plan = MovePlan.objects.get(for_allocation=lender)
    assert plan.trigger == MovePlan.Trigger.RESCUE
    assert [(m.allocation_id, m.from_gpu.index, m.to_gpu.index) for m in plan.moves.all()] == [(lone.pk, 0, 1)]
    assert plan.summary["placement"] == ["mv-node-0/gpu-0:0", "4g.40gb"]  # the room the moves make for the lender
    assert "rescue" in verbs(lender)
    # and: that slot is the room held for the lender (allocations/cohorts/fence.py)
    gpu_0 = pool.nodes.get().gpus.get(index=0).pk
    assert pool_fences(pool.pk) == [Fence(lender.pk, (HeldSlot(gpu_0, "mv-node-0", 0, 0, 4),))]
    # when: the move is made, and another admission pass runs meanwhile: no further notice, no second plan
    for _ in range(10):
        plan = advance_move_plan(plan_id=plan.pk)
        if plan.status != MovePlan.Status.APPLYING:
            break
    assert plan.status == MovePlan.Status.DONE
    assert where(lone)[0][0] == 1
    assert admit_queued(pool_id=pool.pk) == []
    assert list(Allocation.objects.exclude(reclaim_at=None).values_list("pk", flat=True)) == [borrowed.pk]
    assert MovePlan.objects.filter(for_allocation=lender).count() == 1
    other.refresh_from_db()
    assert other.reclaim_at is None
    # when: the grace is over and the borrowed 2g.20gb is taken back
    borrowed.refresh_from_db()
    assert reclaim_due_borrowed(now=borrowed.reclaim_at + timedelta(seconds=1)) == {"reclaimed": 1}
    services.provisioning.teardown_allocation(allocation_id=borrowed.pk)
    # then: the lender is admitted first, at GPU 0's start 0 (the copy of the 2g.20gb fits in what is left)
    assert [a.pk for a in admit_queued(pool_id=pool.pk)][0] == lender.pk
    assert where(lender) == [(0, 0)]
