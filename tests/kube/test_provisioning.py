"""The portal on a real control plane: request -> approve -> claim allocated by kube-scheduler -> active;
release -> gone. The services are called as the tasks call them; the scheduler's allocation is real.

Each test gets a pool of its own whose nodes are fake GPU nodes in the cluster (gpu_node: two H100 80GB each,
NVIDIA's DynamicMIG slices) registered in the database with the same GPU UUIDs, and a namespace prefix of its
own, so tenants' namespaces and quotas do not carry over between tests.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from allocations import services
from allocations.cluster import kube
from allocations.cluster import placements as cluster_placements
from allocations.cluster import sync as kube_sync
from allocations.models import Allocation
from tenants.models import AuditEvent
from tests.kube.conftest import ControlPlane, KubeWorld, as_json, wait_for

Status = Allocation.Status


def request(kw: KubeWorld, profile: str, *, count: int = 1, tenant_b: bool = False) -> Allocation:
    """Team A's request approved by mallory (or Team B's, by charlie, approved by a platform admin unless
    small enough to be approved automatically)."""
    allocation, _ = services.request_allocation(
        tenant_id=(kw.world.tenant_b if tenant_b else kw.world.tenant_a).pk,
        pool_id=kw.pool.pk,
        profile=profile,
        count=count,
        lease_hours=2,
        purpose="kube",
        actor=kw.world.charlie if tenant_b else kw.world.alice,
    )
    if allocation.status == Status.PENDING:
        approver = kw.world.root if tenant_b else kw.world.mallory  # root: a platform admin
        services.approve_allocation(allocation_id=allocation.pk, actor=approver)
    return Allocation.objects.get(pk=allocation.pk)


def settled(allocation_id: int) -> bool:
    """One look at the claim, as await_claim_allocation_task takes it."""
    return kube_sync.sync_claim_allocation(allocation_id=allocation_id) == kube_sync.ClaimProgress.SETTLED


def provision_and_wait(allocation_id: int) -> Allocation:
    """What provision_allocation_task and await_claim_allocation_task do, in this process."""
    services.provision_allocation(allocation_id=allocation_id)
    wait_for("the claim to be allocated", lambda: settled(allocation_id))
    return Allocation.objects.get(pk=allocation_id)


def claim_json(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    return as_json(api, client.ResourceV1Api(api).read_namespaced_resource_claim(name, ns))


def objects_of(api: client.ApiClient, ns: str, allocation: Allocation) -> tuple[list[str], list[str]]:
    """The names of the claims and pods labelled with the allocation, in its tenant's namespace."""
    selector = f"{kube.LABEL_ALLOCATION}={allocation.uuid}"
    claims = client.ResourceV1Api(api).list_namespaced_resource_claim(ns, label_selector=selector).items
    pods = client.CoreV1Api(api).list_namespaced_pod(ns, label_selector=selector).items
    return sorted(c.metadata.name for c in claims), sorted(p.metadata.name for p in pods)


def placements(allocation: Allocation) -> list[tuple[str, int, int, str]]:
    return [
        (p.gpu.node.name, p.gpu.index, p.start, p.device_name)
        for p in allocation.placements.select_related("gpu__node").order_by("pk")
    ]


def test_an_approved_request_becomes_a_claim_the_scheduler_allocates_on_the_chosen_gpu(
    kube_world: KubeWorld, admin: client.ApiClient
) -> None:
    # given: an auto-approved request for one 1g.10gb
    kw = kube_world
    node = kw.nodes[0]
    allocation = request(kw, "1g.10gb")
    assert allocation.status == Status.APPROVED

    # when: planned, claim and holder pod applied
    provisioned = services.provision_allocation(allocation_id=allocation.pk)

    # then: it waits for the cluster, with the plan recorded
    assert provisioned.status == Status.PROVISIONING
    assert provisioned.claim_name == f"mig-alloc-{allocation.uuid}"
    plan = placements(provisioned)
    assert len(plan) == 1
    planned_node, planned_gpu, _, _ = plan[0]
    assert planned_node == node.name

    # when: the scheduler allocates the claim
    wait_for("the claim to be allocated", lambda: settled(allocation.pk))

    # then: the device is a 1g.10gb on the GPU the engine chose, recorded as the scheduler made it
    active = Allocation.objects.get(pk=allocation.pk)
    assert active.status == Status.ACTIVE
    ns = kw.namespace("team-a")
    claim = claim_json(admin, ns, active.claim_name)
    results = claim["status"]["allocation"]["devices"]["results"]
    assert [(r["request"], r["driver"], r["pool"]) for r in results] == [("mig-0", "gpu.nvidia.com", node.name)]
    device = results[0]["device"]
    assert cluster_placements.placement_of(device) is not None
    gpu_index, start = cluster_placements.placement_of(device) or (-1, -1)
    assert gpu_index == planned_gpu
    assert device == f"gpu-{planned_gpu}-mig-1g10gb-19-{start}"
    assert placements(active) == [(node.name, planned_gpu, start, device)]
    assert claim["metadata"]["labels"] == {"fatia.io/allocation": str(allocation.uuid), "fatia.io/tenant": "team-a"}
    selectors = claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"]
    assert [s["cel"]["expression"] for s in selectors] == [
        "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'",
        f"device.attributes['gpu.nvidia.com'].parentUUID == '{node.gpu_uuids[planned_gpu]}'",
    ]
    assert objects_of(admin, ns, active) == ([active.claim_name], [active.claim_name])
    verbs = list(AuditEvent.objects.filter(object_id=str(allocation.pk)).order_by("pk").values_list("verb", flat=True))
    assert verbs[-2:] == ["provision", "activate"]

    # when: released
    services.release_allocation(allocation_id=allocation.pk, actor=kw.world.alice)
    released = services.provisioning.teardown_allocation(allocation_id=allocation.pk)

    # then: quota back, placements gone, pod and claim deleted
    assert released.status == Status.RELEASED
    assert released.placements.count() == 0
    wait_for("the claim to be gone", lambda: objects_of(admin, ns, active) == ([], []))
    quota = kw.world.tenant_a.quotas.get(pool=kw.pool)
    assert (quota.compute_slices_used, quota.memory_slices_used) == (0, 0)


def test_the_tenant_namespace_lets_members_use_claims_but_not_create_them(
    kube_world: KubeWorld, admin: client.ApiClient
) -> None:
    # given
    kw = kube_world

    # when
    kube_sync.onboard_tenant(tenant_id=kw.world.tenant_a.pk)

    # then
    ns = kw.namespace("team-a")
    quota = client.CoreV1Api(admin).read_namespaced_resource_quota("fatia-devices", ns)
    # 16 memory slots in this pool and 16 in the world's simulated pool: a device takes at least one slot.
    assert quota.spec.hard == {"mig.nvidia.com.deviceclass.resource.k8s.io/devices": "32"}

    def allowed(verb: str, resource: str) -> bool:
        review = client.AuthorizationV1Api(admin).create_subject_access_review(
            body={
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": "alice@example.test",
                    "groups": ["fatia:tenant:team-a"],
                    "resourceAttributes": {
                        "namespace": ns,
                        "verb": verb,
                        "group": "resource.k8s.io" if resource == "resourceclaims" else "",
                        "resource": resource,
                    },
                },
            }
        )
        return bool(review.status.allowed)

    assert [allowed(v, "resourceclaims") for v in ("get", "list", "create", "delete", "patch")] == [
        True,
        True,
        False,
        False,
        False,
    ]
    assert [allowed(v, "pods") for v in ("create", "delete")] == [True, True]


def test_counters_hold_through_the_portal_and_the_scheduler_refuses_a_slice_on_a_full_gpu(
    kube_world: KubeWorld, admin: client.ApiClient
) -> None:
    # given: both GPUs of the node taken whole through the portal
    kw = kube_world
    node = kw.nodes[0]
    whole = [provision_and_wait(request(kw, "7g.80gb").pk) for _ in range(2)]
    assert [a.status for a in whole] == [Status.ACTIVE, Status.ACTIVE]
    assert sorted(placements(a)[0] for a in whole) == [
        (node.name, 0, 0, "gpu-0-mig-7g80gb-0-0"),
        (node.name, 1, 0, "gpu-1-mig-7g80gb-0-0"),
    ]

    # when: the portal is asked for one more slice (by Team B: Team A's quota is spent)
    small = request(kw, "1g.10gb", tenant_b=True)
    refused = services.provision_allocation(allocation_id=small.pk)

    # then: our placement engine finds no room: it waits in the pool's queue, its quota held (issue 15)
    assert refused.status == Status.QUEUED
    assert refused.status_message.startswith("Waiting in H100 on Kubernetes's queue: no free layout fits 1 x 1g.10gb")
    used = {q.tenant.slug: (q.compute_slices_used, q.memory_slices_used) for q in kw.pool.quotas.all()}
    assert used == {"team-a": (14, 16), "team-b": (1, 1)}
    # (withdrawn, so that what follows sees the quota of a pool without a queue)
    services.release_allocation(allocation_id=small.pk, actor=kw.world.root)
    used = {q.tenant.slug: (q.compute_slices_used, q.memory_slices_used) for q in kw.pool.quotas.all()}
    assert used == {"team-a": (14, 16), "team-b": (0, 0)}

    # when: a claim for a 1g.10gb on GPU 0 goes to the scheduler anyway, past our engine
    ns = kw.namespace("team-a")
    spec = kube.ClaimSpec(
        namespace=ns,
        name="past-the-portal",
        allocation_uuid="none",
        tenant_slug="team-a",
        requests=(kube.DeviceRequestSpec(name="mig-0", profile="1g.10gb", gpu_uuid=node.gpu_uuids[0]),),
    )
    kube.apply_resource_claim(spec)
    kube.apply_holder_pod(
        kube.HolderPodSpec(
            namespace=ns,
            name="past-the-portal",
            claim_names=("past-the-portal",),
            node_name=node.name,
            allocation_uuid="none",
            tenant_slug="team-a",
        )
    )

    # then: the scheduler finds no device whose counters fit, and the claim stays unallocated
    def unschedulable() -> str | None:
        pod = as_json(admin, client.CoreV1Api(admin).read_namespaced_pod("past-the-portal", ns))
        for cond in pod.get("status", {}).get("conditions", []):
            if cond["type"] == "PodScheduled" and cond["status"] == "False" and cond["reason"] == "Unschedulable":
                return str(cond["message"])
        return None

    message = wait_for("the scheduler to refuse the pod", unschedulable)
    assert "cannot allocate all claims" in message, message
    claim = kube.read_claim(ns, "past-the-portal")
    assert claim is not None and claim.allocation is None


def test_a_worker_killed_between_claim_and_pod_converges_to_one_claim_and_one_pod(
    kube_world: KubeWorld, admin: client.ApiClient
) -> None:
    # given: the first run got as far as the claim, then the worker died (no holder pod)
    kw = kube_world
    allocation = request(kw, "2g.20gb")
    kube_sync.start_provisioning(allocation_id=allocation.pk)
    kube_sync.apply_claim(allocation_id=allocation.pk)
    ns = kw.namespace("team-a")
    assert objects_of(admin, ns, allocation) == ([allocation.kube_name], [])

    # when: the task is delivered again and runs to the end
    active = provision_and_wait(allocation.pk)

    # then: exactly one claim, one pod, one set of placements, and the quota charged once
    assert active.status == Status.ACTIVE
    assert objects_of(admin, ns, active) == ([active.kube_name], [active.kube_name])
    assert active.placements.count() == 1
    quota = kw.world.tenant_a.quotas.get(pool=kw.pool)
    assert (quota.compute_slices_used, quota.memory_slices_used) == (2, 2)

    # when: it runs a third time
    again = provision_and_wait(allocation.pk)

    # then: nothing changes
    assert again.status == Status.ACTIVE
    assert objects_of(admin, ns, again) == ([again.kube_name], [again.kube_name])
    assert again.placements.count() == 1


def test_a_claim_deleted_by_hand_while_provisioning_is_applied_again(
    kube_world: KubeWorld, admin: client.ApiClient
) -> None:
    # given: claim and pod applied, then someone deletes both before the scheduler's result is read
    kw = kube_world
    allocation = request(kw, "1g.10gb")
    services.provision_allocation(allocation_id=allocation.pk)
    ns = kw.namespace("team-a")
    client.CoreV1Api(admin).delete_namespaced_pod(allocation.kube_name, ns, grace_period_seconds=0)
    client.ResourceV1Api(admin).delete_namespaced_resource_claim(allocation.kube_name, ns)
    wait_for("the claim to be gone", lambda: objects_of(admin, ns, allocation) == ([], []))

    # when
    wait_for("the claim to be allocated", lambda: settled(allocation.pk))

    # then
    active = Allocation.objects.get(pk=allocation.pk)
    assert active.status == Status.ACTIVE
    assert objects_of(admin, ns, active) == ([active.kube_name], [active.kube_name])


def test_an_unreachable_api_server_keeps_the_request_waiting_with_its_quota_until_it_is_back(
    kube_world: KubeWorld, admin: client.ApiClient, settings: Any, tmp_path: Any, control_plane: ControlPlane
) -> None:
    # given: the portal's kubeconfig points at a port where nothing listens
    kw = kube_world
    allocation = request(kw, "1g.10gb")
    dead = tmp_path / "dead.kubeconfig"
    text = control_plane.portal_kubeconfig.read_text().replace(control_plane.server, "https://127.0.0.1:9")
    dead.write_text(text)
    settings.FATIA_KUBECONFIG = str(dead)

    # when
    with pytest.raises(kube.KubeUnavailable) as raised:
        services.provision_allocation(allocation_id=allocation.pk)

    # then: retryable, the request says so, and its quota and plan are kept
    assert raised.value.status == 0
    waiting = Allocation.objects.get(pk=allocation.pk)
    assert waiting.status == Status.PROVISIONING
    assert waiting.status_message.startswith("Waiting for the Kubernetes API (resourceclaim ")
    assert waiting.status_message.endswith(": the Kubernetes API is unreachable (MaxRetryError)); retrying.")
    quota = kw.world.tenant_a.quotas.get(pool=kw.pool)
    assert (quota.compute_slices_used, quota.memory_slices_used) == (1, 1)

    # when: the API server is back and the task runs again
    settings.FATIA_KUBECONFIG = str(control_plane.portal_kubeconfig)
    active = provision_and_wait(allocation.pk)

    # then
    assert active.status == Status.ACTIVE
    ns = kw.namespace("team-a")
    assert objects_of(admin, ns, active) == ([active.kube_name], [active.kube_name])


def test_a_request_the_api_server_rejects_fails_with_its_message_and_frees_the_quota(
    kube_world: KubeWorld, admin: client.ApiClient
) -> None:
    # given: a claim of that name exists already with another spec (claim specs are immutable)
    kw = kube_world
    allocation = request(kw, "1g.10gb")
    kube_sync.start_provisioning(allocation_id=allocation.pk)
    ns = kw.namespace("team-a")
    kube_sync.onboard_tenant(tenant_id=kw.world.tenant_a.pk)
    kube.apply_resource_claim(
        kube.ClaimSpec(
            namespace=ns,
            name=allocation.kube_name,
            allocation_uuid=str(allocation.uuid),
            tenant_slug="team-a",
            requests=(kube.DeviceRequestSpec(name="mig-0", profile="3g.40gb", gpu_uuid="GPU-elsewhere"),),
        )
    )

    # when
    failed = services.provision_allocation(allocation_id=allocation.pk)

    # then
    assert failed.status == Status.FAILED
    assert failed.status_message.startswith(
        f"The cluster refused the request: resourceclaim {ns}/{allocation.kube_name}: "
    )
    assert "field is immutable" in failed.status_message, failed.status_message
    quota = kw.world.tenant_a.quotas.get(pool=kw.pool)
    assert (quota.compute_slices_used, quota.memory_slices_used) == (0, 0)
    assert failed.placements.count() == 0
    wait_for("the claim to be gone", lambda: objects_of(admin, ns, allocation) == ([], []))
