"""Admission's rules on PostgreSQL (issue 14): a pool that holds requests keeps one that would strand room in the
queue, says why and until when, places it when a release makes a good place or, forced, once it has waited its
bound; off (the default) nothing changes."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from allocations import services
from allocations.admission.due import admit_due_holds
from allocations.admission.hold import HELD_REASON
from allocations.cluster.sync import start_provisioning
from allocations.models import Allocation, NodePool, OutboxMessage, Quota
from allocations.placement import plan_slices, plan_slices_for_scheduler, pool_policy
from allocations.queue_state import pool_queue
from allocations.services.admission import pools_with_due_holds
from allocations.services.queue import PROVISION_TASK, admit_queued
from tenants.models import AuditEvent
from tests.admission.helpers import hold_on, holding_pool
from tests.conftest import World
from tests.queue.helpers import ask, nodes_of, release

pytestmark = pytest.mark.django_db
Status = Allocation.Status
HELD = re.compile(
    r"^Waiting in Queue pool (\S+)'s queue: held to keep room for larger requests: every placement would strand "
    r"\d+\.\d compute slices; placed at the latest at (\d\d:\d\d) UTC\. "
)


def verbs(allocation: Allocation) -> list[str]:
    return list(
        AuditEvent.objects.filter(object_type="allocation", object_id=str(allocation.pk))
        .order_by("id")
        .values_list("verb", flat=True)
    )


def used(world: World, pool: NodePool, b: bool = False) -> tuple[int, int]:
    quota = Quota.objects.get(tenant=world.tenant_b if b else world.tenant_a, pool=pool)
    return quota.compute_slices_used, quota.memory_slices_used


def test_a_request_that_would_break_the_only_whole_gpu_is_held_with_why_and_until_when(world: World):
    # given: a pool that holds requests, one empty H100, demand mostly whole GPUs
    pool = holding_pool(world)
    before = timezone.now()
    # when: a 1g.10gb is asked for
    held = ask(world, pool, "1g.10gb")
    # then: it waits in the queue, held, with its deadline the pool's bound from now, and nothing placed
    assert held.status == Status.QUEUED
    assert not held.placements.exists()
    assert held.held_until is not None
    assert before + timedelta(minutes=15) <= held.held_until <= timezone.now() + timedelta(minutes=15)
    match = HELD.match(held.status_message)
    assert match is not None, held.status_message
    assert match.groups() == ("hold", f"{held.held_until:%H:%M}")
    # and: its quota stays held, the hold audited once
    assert used(world, pool) == (1, 1)
    assert verbs(held) == ["request", "auto_approve", "hold", "queue"]
    # and: its estimated start is its deadline (it fits now, but waits by choice)
    [entry] = pool_queue(pool)
    assert entry.estimate is not None and entry.estimate.starts_at == held.held_until


def test_admission_is_off_by_default_and_the_same_request_is_placed(world: World):
    # given: the same pool and demand, admission left as it is created
    pool = holding_pool(world, hold=False)
    assert (pool.admission, pool.max_hold_minutes) == (NodePool.Admission.OFF, 15)
    # when
    placed = ask(world, pool, "1g.10gb")
    # then: placed at once, as before admission existed
    assert placed.status == Status.ACTIVE
    assert placed.held_until is None
    assert "hold" not in verbs(placed)


def test_a_request_that_strands_nothing_is_placed_at_once(world: World):
    # given: a 1g.10gb already on the pool's GPU (placed before admission was turned on)
    pool = holding_pool(world, hold=False)
    assert ask(world, pool, "1g.10gb").status == Status.ACTIVE
    pool = hold_on(world, pool)
    # when: another 1g.10gb is asked for
    placed = ask(world, pool, "1g.10gb", b=True)
    # then: it goes next to the first one: the whole GPU is already broken, nothing more is stranded
    assert placed.status == Status.ACTIVE
    assert placed.held_until is None


def test_a_release_that_makes_a_good_place_admits_the_held_request_in_the_pass(world: World):
    # given: one GPU full of seven 1g.10gb and one empty GPU; admission on
    pool = holding_pool(world, nodes=2, hold=False)
    smalls = [ask(world, pool, "1g.10gb") for _ in range(7)]
    assert {nodes_of(a).pop() for a in smalls} == {"hold-node-0"}
    pool = hold_on(world, pool)
    # when: a 1g.10gb is asked for: its only place breaks the empty GPU
    held = ask(world, pool, "1g.10gb", b=True)
    assert held.status == Status.QUEUED and HELD_REASON in held.status_message
    # and: a pass before any release keeps it held, with the same deadline and no new audit
    assert admit_queued(pool_id=pool.pk) == []
    deadline, trail = held.held_until, verbs(held)
    held.refresh_from_db()
    assert (held.status, held.held_until, verbs(held)) == (Status.QUEUED, deadline, trail)
    # when: one of the seven is released and the pass its release asks for runs
    release(world, smalls[3])
    admitted = admit_queued(pool_id=pool.pk)
    # then: the held request takes the freed slot, not the whole GPU, admitted once
    assert [a.pk for a in admitted] == [held.pk]
    held.refresh_from_db()
    assert held.status == Status.ACTIVE and nodes_of(held) == {"hold-node-0"}
    assert verbs(held).count("admit") == 1
    # and: its hold ended placed on a retry (what the pool's next holds are priced by)
    assert held.hold_outcome == Allocation.HoldOutcome.PLACED and held.hold_ended_at is not None


def test_a_request_that_first_waited_for_room_is_held_from_the_pass_that_finds_only_a_stranding_place(world: World):
    # given: both GPUs full (seven 1g.10gb, a 7g.80gb), admission on, and a 1g.10gb queued for room
    pool = holding_pool(world, nodes=2, hold=False)
    for _ in range(7):
        ask(world, pool, "1g.10gb")
    whole = ask(world, pool, "7g.80gb")
    pool = hold_on(world, pool)
    waiting = ask(world, pool, "1g.10gb", b=True)
    assert waiting.status == Status.QUEUED and waiting.held_until is None
    assert HELD_REASON not in waiting.status_message
    # when: the whole GPU is released and the pass runs: its only place now breaks that GPU
    release(world, whole)
    assert admit_queued(pool_id=pool.pk) == []
    # then: held from now, its deadline and reason kept although the pass rolled its try back, audited once
    waiting.refresh_from_db()
    assert waiting.status == Status.QUEUED
    assert waiting.held_until is not None and HELD_REASON in waiting.status_message
    assert verbs(waiting).count("hold") == 1
    # and: the next pass keeps that deadline (a hold is never pushed back)
    deadline = waiting.held_until
    assert admit_queued(pool_id=pool.pk) == []
    waiting.refresh_from_db()
    assert waiting.held_until == deadline and verbs(waiting).count("hold") == 1


def test_past_its_bound_the_minute_step_places_it_forced_and_a_second_run_does_nothing(world: World):
    # given: a held request
    pool = holding_pool(world)
    held = ask(world, pool, "1g.10gb")
    # when: the minute step runs before the bound
    assert pools_with_due_holds() == []
    assert admit_due_holds() == {}
    # then: still held
    held.refresh_from_db()
    assert held.status == Status.QUEUED
    # given: its bound has passed (not a rule under test: the clock)
    Allocation.objects.filter(pk=held.pk).update(held_until=timezone.now() - timedelta(seconds=1))
    # when
    assert admit_due_holds() == {pool.pk: 1}
    # then: placed where it fits (the only GPU), audited once as admitted after its hold
    held.refresh_from_db()
    assert held.status == Status.ACTIVE and nodes_of(held) == {"hold-node-0"}
    assert verbs(held).count("admit") == 1
    assert held.hold_outcome == Allocation.HoldOutcome.FORCED
    # and: a second run finds nothing due
    assert admit_due_holds() == {}


def test_a_held_request_can_be_withdrawn_and_gives_its_quota_back(world: World):
    pool = holding_pool(world)
    held = ask(world, pool, "1g.10gb")
    withdrawn = services.release_allocation(allocation_id=held.pk, actor=world.alice)
    assert withdrawn.status == Status.WITHDRAWN
    assert used(world, pool) == (0, 0)
    assert pools_with_due_holds(now=timezone.now() + timedelta(days=1)) == []


def test_turning_admission_off_places_what_it_held_in_the_next_pass(world: World, django_capture_on_commit_callbacks):
    pool = holding_pool(world)
    held = ask(world, pool, "1g.10gb")
    with django_capture_on_commit_callbacks() as callbacks:
        services.update_node_pool(pool_id=pool.pk, admission=NodePool.Admission.OFF, actor=world.root)
    assert [c.func.__self__.name for c in callbacks if hasattr(c.func, "__self__")] == [
        "allocations.tasks.admit_queued_task"
    ]
    assert [a.pk for a in admit_queued(pool_id=pool.pk)] == [held.pk]


def test_on_kubernetes_dynamic_mig_a_request_is_held_then_planned_forced_after_its_bound(world: World, settings):
    # given: the Kubernetes backend (planning talks to no cluster) and a pool that holds requests
    pool = holding_pool(world)
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    settings.FATIA_KUBECONFIG = "unused: planning talks to no cluster"
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk, pool_id=pool.pk, profile="1g.10gb", count=1, lease_hours=1,
        purpose="kube hold", actor=world.alice,
    )  # fmt: skip
    # when: the placement step runs (our GPU, the scheduler's slot)
    held = start_provisioning(allocation_id=allocation.pk)
    # then: held as on the simulated backend, nothing planned
    assert held.status == Status.QUEUED and HELD_REASON in held.status_message
    assert not held.placements.exists()
    # and: the hold variant of the scheduler policy is what planned it; forced, the slot is the scheduler's first fit
    assert pool_policy(pool, scheduler=True).name == "ours-first-slot-hold"
    [forced] = plan_slices_for_scheduler(pool=pool, profile="1g.10gb", count=1)
    assert (forced.node_name, forced.gpu_index) == ("hold-node-0", 0)
    # when: its bound has passed (given: the clock) and the minute step runs
    Allocation.objects.filter(pk=held.pk).update(held_until=timezone.now() - timedelta(seconds=1))
    provision = OutboxMessage.objects.filter(task_name=PROVISION_TASK, args=[held.pk])
    asked = provision.count()  # the approval's own
    assert admit_due_holds() == {pool.pk: 1}
    # then: planned forced, handed to the provision task (claim and holder pod) as any admission on Kubernetes
    held.refresh_from_db()
    assert held.status == Status.PROVISIONING
    # (a request arriving alone is steered to our slot: adaptive steering, allocations/cluster/steering.py)
    assert list(held.placements.values_list("gpu__node__name", "gpu__index")) == [("hold-node-0", 0)]
    assert provision.count() == asked + 1


def test_other_callers_of_placement_are_never_held(world: World):
    # Compaction, fences and estimates plan forced (the default): holding is the placement steps' decision alone.
    pool = holding_pool(world)
    assert plan_slices(pool=pool, profile="1g.10gb", count=1) is not None
    assert plan_slices(pool=pool, profile="1g.10gb", count=1, force=False) is None
