"""Claims and holder pods that a real cluster accepts (issue 10), against the real control plane.

- the holder pod: a fully qualified image (FATIA_HOLDER_IMAGE), the pool's tolerations, tiny resources, a
  securityContext that Pod Security `restricted` admits, an optional PriorityClass; tenant namespaces carry the Pod
  Security labels, and the API server's PodSecurity admission (on, deploy/control-plane.sh) enforces them;
- a holder pod that ends (evicted: Failed) is replaced by reconcile and its claim allocated again;
- a request of more than 32 slices is split over several claims (a claim holds at most 32 requests), allocated
  together through one holder pod, released together.
"""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from allocations import services
from allocations.cluster import fake_fleet, kube
from allocations.cluster import sync as kube_sync
from allocations.cluster.reconcile import reconcile_cluster
from allocations.mig.catalog import load_catalog
from allocations.models import Allocation
from tenants.models import AuditEvent
from tests.conftest import H100
from tests.kube.conftest import KubeWorld, as_json, wait_for
from tests.kube.test_provisioning import claim_json, objects_of, placements, provision_and_wait, request, settled
from tests.kube.test_reconcile import outside_claim, reconcile_verbs

Status = Allocation.Status
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/audit": "restricted",
    "pod-security.kubernetes.io/warn": "restricted",
}


def pod_json(admin: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    return as_json(admin, client.CoreV1Api(admin).read_namespaced_pod(name, ns))


# --- the pod ------------------------------------------------------------------------------------------------


def test_the_holder_pod_leaves_the_uid_to_the_platform_when_told_to(settings: Any) -> None:
    # given: OpenShift, whose restricted-v2 SCC assigns a UID from the namespace's range and refuses 65535
    settings.FATIA_HOLDER_RUN_AS_USER = None
    spec = kube.HolderPodSpec(
        namespace="fatia-team-a", name="p", claim_names=("c",), node_name="", allocation_uuid="u", tenant_slug="t"
    )
    # then: no UID or GID, still non-root and restricted
    assert kube.holder_pod_body(spec)["spec"]["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    # and: another UID is used as given
    settings.FATIA_HOLDER_RUN_AS_USER = 1000
    assert kube.holder_pod_body(spec)["spec"]["securityContext"]["runAsUser"] == 1000


def test_the_holder_pod_references_every_claim_with_the_configured_image_priority_and_tolerations(
    settings: Any,
) -> None:
    # given
    settings.FATIA_HOLDER_IMAGE = "mirror.example.internal/k8s/pause:3.10"
    settings.FATIA_HOLDER_PRIORITY_CLASS = "fatia-holder"
    spec = kube.HolderPodSpec(
        namespace="fatia-team-a",
        name="mig-alloc-u",
        claim_names=("mig-alloc-u-0", "mig-alloc-u-1"),
        node_name="node-1",
        allocation_uuid="u",
        tenant_slug="team-a",
        tolerations=(
            kube.Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),
            kube.Toleration(key="k", operator="Equal", value="v", effect="NoExecute", toleration_seconds=30),
        ),
    )
    # when
    body = kube.holder_pod_body(spec)
    # then
    assert body["spec"] == {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {"kubernetes.io/hostname": "node-1"},
        "priorityClassName": "fatia-holder",
        "tolerations": [
            {"operator": "Exists", "key": "nvidia.com/gpu", "effect": "NoSchedule"},
            {"operator": "Equal", "key": "k", "value": "v", "effect": "NoExecute", "tolerationSeconds": 30},
        ],
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65535,
            "runAsGroup": 65535,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "hold",
                "image": "mirror.example.internal/k8s/pause:3.10",
                "resources": {
                    "requests": {"cpu": "10m", "memory": "32Mi"},
                    "limits": {"cpu": "10m", "memory": "32Mi"},
                    "claims": [{"name": "gpu-0"}, {"name": "gpu-1"}],
                },
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                    "readOnlyRootFilesystem": True,
                },
            }
        ],
        "resourceClaims": [
            {"name": "gpu-0", "resourceClaimName": "mig-alloc-u-0"},
            {"name": "gpu-1", "resourceClaimName": "mig-alloc-u-1"},
        ],
    }


def test_by_default_the_holder_pod_runs_the_upstream_pause_image_with_no_priority_class() -> None:
    body = kube.holder_pod_body(kube.HolderPodSpec("ns", "p", ("p",), "", "u", "t"))
    assert body["spec"]["containers"][0]["image"] == "registry.k8s.io/pause:3.10"
    assert "priorityClassName" not in body["spec"]
    assert "tolerations" not in body["spec"]
    assert body["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "p"}]


def test_a_restricted_tenant_namespace_admits_the_holder_pod_and_refuses_a_pod_without_its_security_context(
    kube_world: KubeWorld, admin: client.ApiClient, settings: Any
) -> None:
    # given: a PriorityClass for the holder pods
    kw = kube_world
    ns = kw.namespace("team-a")
    priority = f"fatia-holder-{uuid.uuid4().hex[:6]}"
    client.SchedulingV1Api(admin).create_priority_class(
        body={
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": priority},
            "value": 1000,
        }
    )
    settings.FATIA_HOLDER_PRIORITY_CLASS = priority

    # then: onboarding labelled the tenant's namespace for Pod Security `restricted`
    labels = client.CoreV1Api(admin).read_namespace(ns).metadata.labels
    assert {k: v for k, v in labels.items() if k.startswith("pod-security.")} == RESTRICTED

    # when: a request is provisioned there
    active = provision_and_wait(request(kw, "1g.10gb").pk)

    # then: its holder pod was admitted, bound and has the PriorityClass's priority
    assert active.status == Status.ACTIVE
    pod = pod_json(admin, ns, active.kube_name)
    assert (pod["spec"]["nodeName"], pod["spec"]["priorityClassName"], pod["spec"]["priority"]) == (
        kw.nodes[0].name,
        priority,
        1000,
    )
    assert pod["spec"]["containers"][0]["image"] == "registry.k8s.io/pause:3.10"

    # when: the same pod without the securityContexts (what holder pods looked like before) is created there
    bare = copy.deepcopy(kube.holder_pod_body(kube.HolderPodSpec(ns, "bare", ("bare",), "", "", "team-a")))
    del bare["spec"]["securityContext"], bare["spec"]["containers"][0]["securityContext"]
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(admin).create_namespaced_pod(ns, body=bare)

    # then: the API server's PodSecurity admission refuses it, naming what is missing
    assert refused.value.status == 403
    message = json.loads(refused.value.body)["message"]
    assert message == (
        'pods "bare" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false '
        '(container "hold" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities '
        '(container "hold" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or '
        'container "hold" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "hold" '
        'must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")'
    )


def test_the_pod_security_level_of_tenant_namespaces_is_a_setting(
    kube_world: KubeWorld, admin: client.ApiClient, settings: Any
) -> None:
    # given
    kw = kube_world
    settings.FATIA_TENANT_POD_SECURITY = "baseline"
    # when: onboarding runs again (it does whenever a quota is set)
    kube_sync.onboard_tenant(tenant_id=kw.world.tenant_b.pk)
    # then
    labels = client.CoreV1Api(admin).read_namespace(kw.namespace("team-b")).metadata.labels
    assert {k: v for k, v in labels.items() if k.startswith("pod-security.")} == {
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/audit": "baseline",
        "pod-security.kubernetes.io/warn": "baseline",
    }


def test_holder_pods_carry_their_pools_tolerations_onto_tainted_gpu_nodes(
    kube_world: KubeWorld, admin: client.ApiClient
) -> None:
    # given: the pool's node is tainted as GPU nodes usually are
    kw = kube_world
    node = kw.nodes[0]
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    client.CoreV1Api(admin).patch_node(node.name, body={"spec": {"taints": [taint]}})
    ns = kw.namespace("team-a")

    # when: a request with the default tolerations
    active = provision_and_wait(request(kw, "1g.10gb").pk)

    # then: its pod tolerates the taint and holds the slice
    assert active.status == Status.ACTIVE
    assert pod_json(admin, ns, active.kube_name)["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        # added by the API server's DefaultTolerationSeconds admission, as to every pod
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {
            "key": "node.kubernetes.io/unreachable",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        },
    ]

    # when: the pool's holder pods tolerate nothing, and another request comes
    services.update_node_pool(pool_id=kw.pool.pk, tolerations=[], actor=kw.world.root)
    waiting = request(kw, "1g.10gb")
    services.provision_allocation(allocation_id=waiting.pk)

    # then: the scheduler keeps its pod off the node
    def unschedulable() -> str | None:
        for cond in pod_json(admin, ns, waiting.kube_name).get("status", {}).get("conditions", []):
            if cond["type"] == "PodScheduled" and cond["status"] == "False":
                return str(cond["message"])
        return None

    message = wait_for("the scheduler to refuse the pod", unschedulable)
    assert "1 node(s) had untolerated taint(s)" in message, message


# --- an ended holder pod ------------------------------------------------------------------------------------


def test_a_holder_pod_evicted_from_its_node_is_replaced_and_the_claim_allocated_again(
    kube_world: KubeWorld, admin: client.ApiClient
) -> None:
    # given: an active 1g.10gb at the first slot of its GPU
    kw = kube_world
    node = kw.nodes[0]
    active = provision_and_wait(request(kw, "1g.10gb").pk)
    [(_, gpu, start, _)] = placements(active)
    assert start == 0
    ns = kw.namespace("team-a")
    old_uid = pod_json(admin, ns, active.kube_name)["metadata"]["uid"]

    # when: the kubelet evicts the holder pod (node pressure): it ends Failed
    client.CoreV1Api(admin).patch_namespaced_pod_status(
        active.kube_name,
        ns,
        body={"status": {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}},
    )

    # then: kube-controller-manager deallocates the claim, whose only consumer has ended
    wait_for("the claim to be deallocated", lambda: (c := kube.read_claim(ns, active.kube_name)) and not c.allocation)

    # when: a claim made past the portal takes the freed slot, and a reconcile pass runs
    outside_claim(ns, "by-hand", node.name, node.gpu_uuids[gpu], "1g.10gb")
    wait_for("the outside claim to be allocated", lambda: (c := kube.read_claim(ns, "by-hand")) and c.allocation)
    report = reconcile_cluster()

    # then: the ended pod is replaced by a new one, and the allocation stays active
    assert report.pods_replaced == [active.pk]
    assert objects_of(admin, ns, active) == ([active.kube_name], [active.kube_name])
    new_pod = pod_json(admin, ns, active.kube_name)
    assert new_pod["metadata"]["uid"] != old_uid
    assert Allocation.objects.get(pk=active.pk).status == Status.ACTIVE

    # when: the scheduler allocates the claim for the new pod (slot 0 is taken) and a pass runs
    wait_for("the claim to be allocated again", lambda: (c := kube.read_claim(ns, active.kube_name)) and c.allocation)
    report = reconcile_cluster()

    # then: the record follows the cluster, and both passes are in the audit log
    assert report.moved == [active.pk]
    assert placements(Allocation.objects.get(pk=active.pk)) == [(node.name, gpu, 1, f"gpu-{gpu}-mig-1g10gb-19-1")]
    assert reconcile_verbs(active) == [
        {"holder_pod": "replaced: it had ended Failed (Evicted)"},
        {
            "placements": [
                {
                    "planned": f"{node.name}/gpu-{gpu}-mig-1g10gb-19-0",
                    "allocated": f"{node.name}/gpu-{gpu}-mig-1g10gb-19-1",
                }
            ]
        },
    ]
    claim = claim_json(admin, ns, active.kube_name)
    assert [r["name"] for r in claim["status"]["reservedFor"]] == [active.kube_name]

    # when: a further pass
    report = reconcile_cluster()
    # then: nothing to do
    assert (report.pods_replaced, report.moved, report.recreated, report.orphans) == ([], [], [], [])


def test_a_holder_pod_that_ends_while_the_request_provisions_is_replaced_by_the_next_look(
    kube_world: KubeWorld, admin: client.ApiClient
) -> None:
    # given: claim and pod applied, the claim allocated but not yet seen by the portal
    kw = kube_world
    allocation = request(kw, "2g.20gb")
    services.provision_allocation(allocation_id=allocation.pk)
    ns = kw.namespace("team-a")
    wait_for("the claim to be allocated", lambda: (c := kube.read_claim(ns, allocation.kube_name)) and c.allocation)
    old_uid = pod_json(admin, ns, allocation.kube_name)["metadata"]["uid"]

    # when: the pod ends, and its claim is deallocated with it
    client.CoreV1Api(admin).patch_namespaced_pod_status(
        allocation.kube_name, ns, body={"status": {"phase": "Failed", "reason": "Evicted"}}
    )
    wait_for(
        "the claim to be deallocated", lambda: (c := kube.read_claim(ns, allocation.kube_name)) and not c.allocation
    )
    progress = kube_sync.sync_claim_allocation(allocation_id=allocation.pk)

    # then: the look replaced the pod and waits; the scheduler allocates the claim for the new one
    assert progress == kube_sync.ClaimProgress.WAITING
    assert pod_json(admin, ns, allocation.kube_name)["metadata"]["uid"] != old_uid
    wait_for("the request to be active", lambda: settled(allocation.pk))
    assert Allocation.objects.get(pk=allocation.pk).status == Status.ACTIVE


# --- more than 32 slices ------------------------------------------------------------------------------------


def test_the_api_server_refuses_a_claim_of_33_requests(kube_world: KubeWorld) -> None:
    # given
    kw = kube_world
    node = kw.nodes[0]
    requests = tuple(kube.DeviceRequestSpec(f"mig-{i}", "1g.10gb", node.gpu_uuids[0]) for i in range(33))
    # when
    with pytest.raises(kube.KubeRejected) as refused:
        kube.apply_resource_claim(kube.ClaimSpec(kw.namespace("team-a"), "too-big", "", "team-a", requests))
    # then: hence several claims for a request of more than 32 slices
    assert refused.value.status == 422
    assert "spec.devices.requests: Too many: 33: must have at most 32 items" in refused.value.message


def test_a_request_of_40_slices_is_two_claims_allocated_together_and_released_together(
    kube_world: KubeWorld, admin: client.ApiClient
) -> None:
    # given: a pool of one 8-GPU H100 node (56 x 1g.10gb), and quota for 40 there
    kw = kube_world
    node = fake_fleet.publish_node(admin, load_catalog().model(H100), f"fleet-{uuid.uuid4().hex[:8]}", 8)
    pool = services.create_node_pool(name="H100 x8", slug="h100-x8", gpu_model=H100, actor=kw.world.root)
    kube_sync.register_cluster_node(pool_id=pool.pk, name=node.name, gpu_uuids=list(node.gpu_uuids))
    services.set_tenant_quota(
        tenant_id=kw.world.tenant_a.pk,
        pool_id=pool.pk,
        compute_slices_limit=56,
        memory_slices_limit=64,
        actor=kw.world.root,
    )
    kube_sync.onboard_tenant(tenant_id=kw.world.tenant_a.pk)
    ns = kw.namespace("team-a")
    core = client.CoreV1Api(admin)
    wait_for(
        "the device quota to be counted at 96 (16 + 16 in the other pools, 64 here)",
        lambda: (
            (q := core.read_namespaced_resource_quota("fatia-devices", ns).status) is not None
            and (q.hard or {}).get("mig.nvidia.com.deviceclass.resource.k8s.io/devices") == "96"
        ),
    )
    kw.pool = pool

    # when: 40 x 1g.10gb are approved and provisioned
    allocation = request(kw, "1g.10gb", count=40)
    active = provision_and_wait(allocation.pk)

    # then: active, in two claims of 32 and 8 requests, one holder pod referencing both
    base = active.kube_name
    assert active.status == Status.ACTIVE
    assert (active.claim_name, active.claim_names) == (f"{base}-0", [f"{base}-0", f"{base}-1"])
    assert objects_of(admin, ns, active) == ([f"{base}-0", f"{base}-1"], [base])
    first, second = claim_json(admin, ns, f"{base}-0"), claim_json(admin, ns, f"{base}-1")
    assert [r["name"] for r in first["spec"]["devices"]["requests"]] == [f"mig-{i}" for i in range(32)]
    assert [r["name"] for r in second["spec"]["devices"]["requests"]] == [f"mig-{i}" for i in range(32, 40)]
    pod = pod_json(admin, ns, base)
    assert pod["spec"]["resourceClaims"] == [
        {"name": "gpu-0", "resourceClaimName": f"{base}-0"},
        {"name": "gpu-1", "resourceClaimName": f"{base}-1"},
    ]
    assert pod["spec"]["nodeName"] == node.name
    # and: every slice recorded where the scheduler put it, on six of the node's GPUs
    results = [r for c in (first, second) for r in c["status"]["allocation"]["devices"]["results"]]
    assert [r["request"] for r in results] == [f"mig-{i}" for i in range(40)]
    assert [(n, device) for n, _, _, device in placements(active)] == [(node.name, r["device"]) for r in results]
    assert len({gpu for _, gpu, _, _ in placements(active)}) == 6
    events = AuditEvent.objects.filter(object_type="allocation", object_id=str(active.pk))
    assert events.get(verb="provision").after["claims"] == [f"{base}-0", f"{base}-1"]

    # when: a reconcile pass runs
    report = reconcile_cluster()
    # then: it knows both claims as the allocation's
    assert (report.orphans, report.recreated, report.moved, report.pods_replaced) == ([], [], [], [])

    # when: the second claim is deleted behind our back, with the pod, and passes run
    core.delete_namespaced_pod(base, ns, grace_period_seconds=0)
    client.ResourceV1Api(admin).delete_namespaced_resource_claim(f"{base}-1", ns)
    wait_for("the claim to be gone", lambda: kube.read_claim(ns, f"{base}-1") is None)
    report = reconcile_cluster()
    # then: that claim and the pod are back, and both claims are allocated again for the new pod
    assert report.recreated == [active.pk]
    assert reconcile_verbs(active)[-1] == {
        "claim": "re-created: it was deleted outside the portal",
        "claims": [f"{base}-1"],
    }
    wait_for(
        "both claims to be allocated",
        lambda: all((c := kube.read_claim(ns, n)) and c.allocation for n in active.claim_names),
    )

    # when: released
    services.release_allocation(allocation_id=active.pk, actor=kw.world.alice)
    released = services.provisioning.teardown_allocation(allocation_id=active.pk)

    # then: both claims and the pod are deleted, the quota given back
    assert released.status == Status.RELEASED
    wait_for("the claims to be gone", lambda: objects_of(admin, ns, active) == ([], []))
    quota = kw.world.tenant_a.quotas.get(pool=pool)
    assert (quota.compute_slices_used, quota.memory_slices_used) == (0, 0)
