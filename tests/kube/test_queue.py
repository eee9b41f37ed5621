"""The queue on a real control plane (issue 15): a request with no room waits QUEUED with nothing in the cluster,
and when a release frees a GPU the admission pass places it there and kube-scheduler allocates its claim."""

from __future__ import annotations

from kubernetes import client

from allocations import services
from allocations.models import Allocation
from allocations.services.queue import admit_queued
from tests.kube.conftest import KubeWorld, wait_for
from tests.kube.test_provisioning import objects_of, placements, provision_and_wait, request, settled

Status = Allocation.Status
ADMIT = "allocations.tasks.admit_queued_task"
PROVISION = "allocations.tasks.provision_allocation_task"


def sent(callbacks) -> list[str]:
    return [c.func.__self__.name for c in callbacks if hasattr(c.func, "__self__")]


def test_a_queued_request_is_admitted_on_the_cluster_when_a_release_frees_room(
    kube_world: KubeWorld, admin: client.ApiClient, django_capture_on_commit_callbacks
) -> None:
    # given: both GPUs of the node taken whole by Team A
    kw = kube_world
    whole = [provision_and_wait(request(kw, "7g.80gb").pk) for _ in range(2)]
    assert [a.status for a in whole] == [Status.ACTIVE, Status.ACTIVE]
    # when: Team B asks for a 3g.40gb
    waiting = services.provision_allocation(allocation_id=request(kw, "3g.40gb", tenant_b=True).pk)
    # then: it waits in the queue, with nothing made in the cluster
    assert waiting.status == Status.QUEUED
    ns_b = kw.namespace("team-b")
    assert objects_of(admin, ns_b, waiting) == ([], [])
    # when: Team A releases the whole GPU 1
    freed = next(a for a in whole if placements(a)[0][1] == 1)
    services.release_allocation(allocation_id=freed.pk, actor=kw.world.alice)
    with django_capture_on_commit_callbacks() as callbacks:
        assert services.provisioning.teardown_allocation(allocation_id=freed.pk).status == Status.RELEASED
    # then: the release asked for an admission pass
    assert ADMIT in sent(callbacks)
    wait_for("the released claim to be gone", lambda: objects_of(admin, kw.namespace("team-a"), freed) == ([], []))
    # when: the pass runs (admit_queued_task)
    with django_capture_on_commit_callbacks() as callbacks:
        [admitted] = admit_queued(pool_id=kw.pool.pk)
    # then: planned on the freed GPU, and the provision task queued to apply its claim and holder pod
    assert admitted.pk == waiting.pk and admitted.status == Status.PROVISIONING
    assert [p[1] for p in placements(admitted)] == [1]
    assert PROVISION in sent(callbacks)
    # when: the provision task runs, and its claim is watched
    services.provision_allocation(allocation_id=waiting.pk)
    wait_for("the claim to be allocated", lambda: settled(waiting.pk))
    # then: kube-scheduler allocated it; the request is active, its claim and pod in Team B's namespace
    active = Allocation.objects.get(pk=waiting.pk)
    assert active.status == Status.ACTIVE
    assert objects_of(admin, ns_b, active) == ([active.claim_name], [active.claim_name])
    assert [p[1] for p in placements(active)] == [1]
