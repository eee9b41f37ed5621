"""Borrowing within a cohort on PostgreSQL (issue 15): admission above the guarantee, the borrowed part recorded,
shown and freed, and what a queued request holds."""

from __future__ import annotations

from allocations import services
from allocations.cluster.sync import tenant_spec
from allocations.cohorts.accounting import MemberState
from allocations.cohorts.members import member_states
from allocations.models import Allocation, Cohort, Quota
from allocations.services.queue import admit_queued
from tests.cohorts.helpers import cohort_pool, used
from tests.conftest import World
from tests.queue.helpers import ask, release, small_pool

Status = Allocation.Status


def test_a_member_borrows_what_its_cohort_lends_and_the_borrowed_part_is_recorded_shown_and_freed(world: World):
    # given: Team B has no guarantee, Team A lends its 7 compute / 8 memory
    pool, cohort = cohort_pool(world)
    # when: Team B asks for a 4g.40gb
    first = ask(world, pool, "4g.40gb", b=True)
    # then: admitted on borrowed slices, the whole usage counted, the borrowed part recorded
    assert first.status == Status.ACTIVE
    assert (first.borrowed_compute_slices, first.borrowed_memory_slices) == (4, 4)
    assert first.is_borrowed
    assert used(world, pool, b=True) == (4, 4)
    # and: everyone who sees it through the API sees it marked borrowed
    row = world.client(world.charlie).get(f"/api/v1/allocations/{first.pk}/").json()
    assert (row["is_borrowed"], row["borrowed_compute_slices"], row["reclaim_at"]) == (True, 4, None)
    listed = world.client(world.charlie).get("/api/v1/allocations/").json()["results"]
    assert [r["is_borrowed"] for r in listed if r["id"] == first.pk] == [True]
    # when: a second 4g.40gb would borrow more than the 3 compute slices A still lends
    second, _ = services.request_allocation(
        tenant_id=world.tenant_b.pk,
        pool_id=pool.pk,
        profile="4g.40gb",
        count=1,
        lease_hours=8,
        purpose="too much",
        actor=world.charlie,
    )
    # then: it waits for a manager, told how much guarantee and borrowable room is left
    assert second.status == Status.PENDING
    assert "0 of 0 are free, and 3 more can be borrowed from the cohort" in second.status_message
    # when: a 3g.40gb fits what A still lends (3 compute, 4 memory)
    third = ask(world, pool, "3g.40gb", b=True)
    assert (third.status, third.borrowed_compute_slices, third.borrowed_memory_slices) == (Status.ACTIVE, 3, 4)
    # when: the first is released
    release(world, first)
    # then: its usage is given back and the cohort lends it again
    assert used(world, pool, b=True) == (3, 4)
    states = {m.tenant_id: m for m in member_states(cohort.pk)}
    assert (states[world.tenant_b.pk].borrowed_compute, states[world.tenant_a.pk].lent_compute) == (3, 7)
    first.refresh_from_db()
    assert not first.is_borrowed


def test_without_a_cohort_nothing_is_borrowed(world: World):
    pool, _ = cohort_pool(world)
    Quota.objects.filter(pool=pool).update(cohort=None)
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_b.pk, pool_id=pool.pk, profile="1g.10gb", count=1, lease_hours=8,
        purpose="no cohort", actor=world.charlie,
    )  # fmt: skip
    assert allocation.status == Status.PENDING
    assert used(world, pool, b=True) == (0, 0)


def test_a_queued_request_holds_its_guarantee_part_only_and_borrows_again_when_admitted(world: World):
    # given: one GPU, both tenants guaranteed 7 / 8 in one cohort, Team B's 7g.80gb filling it
    pool = small_pool(world, nodes=1)
    group = Cohort.objects.create(pool=pool, name="pair", reclaim_grace_minutes=30)
    Quota.objects.filter(pool=pool).update(cohort=group, compute_slices_limit=7, memory_slices_limit=8)
    whole = ask(world, pool, "7g.80gb", b=True)
    assert (whole.status, whole.borrowed_compute_slices) == (Status.ACTIVE, 0)
    # when: Team B asks for one more slice, which borrows from Team A, and the pool has no room
    extra = ask(world, pool, "1g.10gb", b=True)
    # then: it waits, holding only its part within the guarantee (none): its borrowed part goes back to A meanwhile
    assert extra.status == Status.QUEUED
    assert (extra.borrowed_compute_slices, extra.borrowed_memory_slices) == (1, 1)
    assert not extra.is_borrowed
    assert used(world, pool, b=True) == (7, 8)
    assert "borrowed again" in extra.status_message
    # when: the whole GPU is released and the queue admitted
    release(world, whole)
    [admitted] = admit_queued(pool_id=pool.pk)
    # then: B is back within its guarantee, so the admitted request borrows nothing and holds it all
    assert admitted.pk == extra.pk and admitted.status == Status.ACTIVE
    admitted.refresh_from_db()
    assert (admitted.borrowed_compute_slices, admitted.borrowed_memory_slices) == (0, 0)
    assert used(world, pool, b=True) == (1, 1)


def test_withdrawing_a_queued_borrower_gives_back_exactly_what_it_held(world: World):
    pool = small_pool(world, nodes=1)
    group = Cohort.objects.create(pool=pool, name="pair", reclaim_grace_minutes=30)
    Quota.objects.filter(pool=pool).update(cohort=group, compute_slices_limit=7, memory_slices_limit=8)
    ask(world, pool, "7g.80gb", b=True)
    extra = ask(world, pool, "1g.10gb", b=True)
    assert extra.status == Status.QUEUED
    services.release_allocation(allocation_id=extra.pk, actor=world.charlie)
    assert used(world, pool, b=True) == (7, 8)


def test_member_state_reads_the_quota_rows(world: World):
    pool, cohort = cohort_pool(world, b_guarantee=2)
    Quota.objects.filter(pool=pool, tenant=world.tenant_a).update(lending_compute_limit=3)
    states = member_states(cohort.pk)
    assert states == [
        MemberState(world.tenant_a.pk, 7, 8, 0, 0, None, None, 3, None),
        MemberState(world.tenant_b.pk, 2, 2, 0, 0, None, None, None, None),
    ]


def test_the_kubernetes_device_quota_leaves_room_for_what_the_cohort_could_lend(world: World):
    # given: in the cohort's pool B has no guarantee and A lends 8 memory slots; elsewhere (world.pool) 16 each
    pool, _ = cohort_pool(world)
    assert tenant_spec(world.tenant_b).max_devices == 16 + 8
    # when: A lends at most 2 memory slots
    Quota.objects.filter(pool=pool, tenant=world.tenant_a).update(lending_memory_limit=2)
    assert tenant_spec(world.tenant_b).max_devices == 16 + 2
    assert tenant_spec(world.tenant_a).max_devices == 16 + 8
