"""The Kubernetes backend through a real Celery worker process, a real Redis broker and the real control
plane: request -> approve -> claim allocated by kube-scheduler -> active; release -> claim and pod gone."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from kubernetes import client

from allocations import services
from allocations.models import Allocation
from tests.conftest import celery_worker_process, wait_for_status
from tests.kube.conftest import wait_for
from tests.kube.test_provisioning import KubeWorld, objects_of, placements, request

pytestmark = pytest.mark.django_db(transaction=True)
Status = Allocation.Status


@pytest.fixture
def kube_worker(kube_world: KubeWorld) -> Iterator[subprocess.Popen[bytes]]:
    """A worker on the test database with the Kubernetes backend on the test control plane."""
    with celery_worker_process(
        FATIA_CLUSTER_BACKEND="kubernetes",
        FATIA_KUBECONFIG=settings.FATIA_KUBECONFIG,
        FATIA_KUBE_NAMESPACE_PREFIX=kube_world.prefix,
    ) as worker:
        yield worker


def test_a_worker_provisions_a_claim_the_scheduler_allocates_and_releases_it(
    kube_world: KubeWorld, kube_worker: Any, admin: client.ApiClient
) -> None:
    # given / when: auto-approved; the task goes through Redis to the worker, which applies the claim
    kw = kube_world
    node = kw.nodes[0]
    allocation = request(kw, "1g.10gb")

    # then
    active = wait_for_status(allocation.pk, Status.ACTIVE)
    assert active.status == Status.ACTIVE
    ns = kw.namespace("team-a")
    assert objects_of(admin, ns, active) == ([active.kube_name], [active.kube_name])
    claim = client.ResourceV1Api(admin).read_namespaced_resource_claim(active.kube_name, ns)
    devices = [(r.pool, r.device) for r in claim.status.allocation.devices.results]
    [(_, gpu_index, start, device)] = placements(active)
    assert devices == [(node.name, device)]
    assert device == f"gpu-{gpu_index}-mig-1g10gb-19-{start}"

    # when
    services.release_allocation(allocation_id=allocation.pk, actor=kw.world.alice)

    # then
    released = wait_for_status(allocation.pk, Status.RELEASED)
    assert released.status == Status.RELEASED
    assert released.placements.count() == 0
    wait_for("the claim and pod to be gone", lambda: objects_of(admin, ns, active) == ([], []))
    quota = kw.world.tenant_a.quotas.get(pool=kw.pool)
    assert (quota.compute_slices_used, quota.memory_slices_used) == (0, 0)
