"""A compaction move on the real control plane (issue 14): the new claim, pinned to the destination GPU and steered
to the planned slot, is allocated there by kube-scheduler; the old claim and holder pod go; the allocation points to
the new claim. Every other case (refusals, rollbacks, crashes) is tested with the adapter faked, in
tests/compaction/test_kube_moves.py."""

from __future__ import annotations

from kubernetes import client

from allocations.cluster import kube
from allocations.models import Allocation, Gpu, MovePlan, SliceMove
from allocations.services.moves import step_move_plan
from tests.kube.conftest import KubeWorld, wait_for
from tests.kube.test_provisioning import claim_json, objects_of, placements, provision_and_wait, request
from tests.kube.test_steering import steering_rules


def test_a_one_move_plan_moves_the_claim_to_the_planned_slot(kube_world: KubeWorld, admin: client.ApiClient) -> None:
    # given: an active movable 1g.10gb, and a plan that moves it to slot 3 of the other GPU (first fit there is 0,
    # so the scheduler must be steered)
    kw = kube_world
    node = kw.nodes[0].name
    active = provision_and_wait(request(kw, "1g.10gb").pk)
    Allocation.objects.filter(pk=active.pk).update(movable=True)
    [(_, gpu, start, _)] = placements(active)
    old = active.claim_name
    plan = MovePlan.objects.create(pool=kw.pool, trigger=MovePlan.Trigger.ADMIN, created_by=kw.world.root)
    move = SliceMove.objects.create(
        plan=plan,
        position=0,
        allocation=active,
        profile="1g.10gb",
        from_gpu=Gpu.objects.get(node__name=node, index=gpu),
        from_start=start,
        to_gpu=Gpu.objects.get(node__name=node, index=1 - gpu),
        to_start=3,
    )

    # when: the task's steps run until the plan ends (a step waiting for the scheduler is simply run again)
    def ended() -> bool:
        return step_move_plan(plan_id=plan.pk).plan.status != MovePlan.Status.APPLYING

    wait_for("the plan to end", ended)

    # then: the plan is done, the scheduler allocated the new claim at the planned device
    plan.refresh_from_db()
    move.refresh_from_db()
    assert (plan.status, move.step, move.reason) == (MovePlan.Status.DONE, SliceMove.Step.DONE, "")
    moved = Allocation.objects.get(pk=active.pk)
    new = f"{old}-m1"
    assert moved.claim_name == new
    ns = kw.namespace("team-a")
    device = f"gpu-{1 - gpu}-mig-1g10gb-19-3"
    results = claim_json(admin, ns, new)["status"]["allocation"]["devices"]["results"]
    assert [(r["request"], r["pool"], r["device"]) for r in results] == [("mig-0", node, device)]
    assert placements(moved) == [(node, 1 - gpu, 3, device)]
    # the old claim and holder pod are gone, the steering taints too
    wait_for("the old claim to be gone", lambda: objects_of(admin, ns, moved) == ([new], [new]))
    assert steering_rules(admin, moved) == []
    assert kube.read_claim(ns, old) is None
