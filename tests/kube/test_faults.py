"""Faults with the real pieces: a Celery worker process killed with SIGKILL between the claim and the pod, and
the real kube-apiserver stopped for 30 s. After recovery the state converges: exactly one claim and one pod
per live request, none for released ones, quota exact."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from allocations import services
from allocations.cluster import kube
from allocations.models import Allocation
from tests.conftest import celery_worker_process, wait_for_status
from tests.kube.conftest import BASH, CONTROL_PLANE_SCRIPT, ControlPlane, KubeWorld, wait_for
from tests.kube.test_provisioning import objects_of, placements, request

pytestmark = pytest.mark.django_db(transaction=True)
Status = Allocation.Status

# A killed worker's unacknowledged task returns to the queue after this long (Redis visibility timeout).
VISIBILITY_S = 5


def worker(kw: KubeWorld) -> Any:
    return celery_worker_process(
        FATIA_CLUSTER_BACKEND="kubernetes",
        FATIA_KUBECONFIG=settings.FATIA_KUBECONFIG,
        FATIA_KUBE_NAMESPACE_PREFIX=kw.prefix,
        FATIA_BROKER_VISIBILITY_TIMEOUT_S=str(VISIBILITY_S),
    )


@pytest.fixture
def pods_refused_as_not_ready(admin: client.ApiClient, kube_world: KubeWorld) -> Iterator[Any]:
    """While active, the API server refuses pods in team A's namespace the way it refuses them in a namespace
    whose default ServiceAccount does not exist yet: a refusal the portal retries. A provisioning task then
    sits in its retry with the claim applied and no pod, the moment a crash is the most awkward."""
    api = client.AdmissionregistrationV1Api(admin)
    name = f"refuse-pods-{kube_world.prefix.rstrip('-')}"
    api.create_validating_admission_policy(
        body={
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
                    ]
                },
                "validations": [
                    {"expression": "false", "reason": "Forbidden", "message": "serviceaccount default not found (test)"}
                ],
            },
        }
    )
    api.create_validating_admission_policy_binding(
        body={
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": kube_world.namespace("team-a")}
                    }
                },
            },
        }
    )

    # The policy takes effect once the API server has compiled it: wait until a dry-run pod is refused.
    core = client.CoreV1Api(admin)
    # A pod that Pod Security `restricted` (the tenant namespace's level) admits, so only the policy refuses it.
    probe = kube.holder_pod_body(kube.HolderPodSpec(kube_world.namespace("team-a"), "probe", ("probe",), "", "", "t"))

    def refused() -> bool:
        try:
            core.create_namespaced_pod(kube_world.namespace("team-a"), body=probe, dry_run="All")
        except ApiException as exc:
            assert exc.status == 403 and "serviceaccount default not found" in str(exc.body), exc.body
            return True
        return False

    wait_for("the policy to refuse pods", refused, timeout=30)

    def lift() -> None:
        for delete in (api.delete_validating_admission_policy_binding, api.delete_validating_admission_policy):
            try:
                delete(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise

    yield lift
    lift()


def test_a_worker_killed_between_claim_and_pod_leaves_one_claim_and_one_pod_after_restart(
    kube_world: KubeWorld, admin: client.ApiClient, pods_refused_as_not_ready: Any
) -> None:
    kw = kube_world
    ns = kw.namespace("team-a")
    with worker(kw) as first:
        # given: a request whose claim is applied while its pod is refused (the task waits to retry)
        allocation = request(kw, "1g.10gb")

        def claim_without_pod() -> bool:
            claims, pods = objects_of(admin, ns, allocation)
            current = Allocation.objects.get(pk=allocation.pk)
            return claims == [allocation.kube_name] and pods == [] and "Waiting for" in current.status_message

        wait_for("the claim without its pod", claim_without_pod, timeout=60)

        # when: the worker dies with SIGKILL mid-task
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    assert Allocation.objects.get(pk=allocation.pk).status == Status.PROVISIONING

    # when: the cluster lets pods in again and a new worker starts
    pods_refused_as_not_ready()
    with worker(kw):
        active = wait_for_status(allocation.pk, Status.ACTIVE, timeout=120)

        # then: active, with exactly one claim and one pod, allocated where recorded
        assert active.status == Status.ACTIVE
        assert objects_of(admin, ns, active) == ([active.kube_name], [active.kube_name])
        [(node, gpu, start, device)] = placements(active)
        claim = client.ResourceV1Api(admin).read_namespaced_resource_claim(active.kube_name, ns)
        assert [(r.pool, r.device) for r in claim.status.allocation.devices.results] == [(node, device)]
        quota = kw.world.tenant_a.quotas.get(pool=kw.pool)
        assert (quota.compute_slices_used, quota.memory_slices_used) == (1, 1)


def control_plane_script(control_plane: ControlPlane, command: str) -> None:
    done = subprocess.run(
        [BASH, str(CONTROL_PLANE_SCRIPT), command, str(control_plane.dir)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, f"control-plane.sh {command}: {done.stdout}{done.stderr}"


def test_an_api_server_stopped_for_30_s_delays_requests_and_releases_and_loses_nothing(
    kube_world: KubeWorld, admin: client.ApiClient, control_plane: ControlPlane
) -> None:
    kw = kube_world
    ns = kw.namespace("team-a")
    with worker(kw):
        # given: one active slice
        released = wait_for_status(request(kw, "2g.20gb").pk, Status.ACTIVE)
        assert released.status == Status.ACTIVE

        # when: the API server stops; meanwhile a new request is approved and the active one released
        control_plane_script(control_plane, "stop-apiserver")
        stopped_at = time.monotonic()
        try:
            waiting = request(kw, "1g.10gb")
            services.release_allocation(allocation_id=released.pk, actor=kw.world.alice)

            # then: both say they wait for the cluster, and hold their quota
            def both_waiting() -> bool:
                rows = {a.pk: a for a in Allocation.objects.filter(pk__in=[waiting.pk, released.pk])}
                return (
                    rows[waiting.pk].status == Status.PROVISIONING
                    and rows[released.pk].status == Status.RELEASING
                    and all(r.status_message.startswith("Waiting for the Kubernetes API") for r in rows.values())
                )

            wait_for("both requests to wait for the API", both_waiting, timeout=25)
            quota = kw.world.tenant_a.quotas.get(pool=kw.pool)
            assert (quota.compute_slices_used, quota.memory_slices_used) == (3, 3)
            time.sleep(max(0.0, 30 - (time.monotonic() - stopped_at)))
        finally:
            control_plane_script(control_plane, "start-apiserver")

        # then: after recovery the new request is active and the released one gone, nothing duplicated
        active = wait_for_status(waiting.pk, Status.ACTIVE, timeout=180)
        assert active.status == Status.ACTIVE
        assert wait_for_status(released.pk, Status.RELEASED, timeout=180).status == Status.RELEASED
        assert objects_of(admin, ns, active) == ([active.kube_name], [active.kube_name])
        wait_for("the released claim to be gone", lambda: objects_of(admin, ns, released) == ([], []), timeout=60)
        quota = kw.world.tenant_a.quotas.get(pool=kw.pool)
        assert (quota.compute_slices_used, quota.memory_slices_used) == (1, 1)
