"""The reconcile pass against the real control plane: drift made by hand in the cluster is found and fixed,
and every fix is in the audit log."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from allocations import services
from allocations.cluster import kube
from allocations.cluster import sync as kube_sync
from allocations.cluster.fake_fleet import create_ready_node
from allocations.cluster.reconcile import reconcile_cluster
from allocations.models import Allocation, Node
from tenants.models import AuditEvent
from tests.kube.conftest import GFD_LABELS, KubeWorld, wait_for
from tests.kube.test_provisioning import objects_of, placements, provision_and_wait, request

Status = Allocation.Status


def claim_gone(admin: client.ApiClient, ns: str, name: str) -> bool:
    try:
        client.ResourceV1Api(admin).read_namespaced_resource_claim(name, ns)
    except ApiException as exc:
        return exc.status == 404
    return False


def delete_by_hand(admin: client.ApiClient, ns: str, name: str) -> None:
    client.CoreV1Api(admin).delete_namespaced_pod(name, ns, grace_period_seconds=0)
    client.ResourceV1Api(admin).delete_namespaced_resource_claim(name, ns)
    wait_for(f"claim {ns}/{name} to be gone", lambda: claim_gone(admin, ns, name))


def outside_claim(ns: str, name: str, node: str, gpu_uuid: str, profile: str) -> None:
    """A claim and pod made past the portal (no portal label): the scheduler allocates it like any other."""
    spec = kube.ClaimSpec(ns, name, "", "team-a", (kube.DeviceRequestSpec("mig-0", profile, gpu_uuid),))
    kube.apply_resource_claim(spec)
    kube.apply_holder_pod(kube.HolderPodSpec(ns, name, (name,), node, "", "team-a"))


def reconcile_verbs(allocation: Allocation) -> list[dict[str, Any]]:
    events = AuditEvent.objects.filter(verb="reconcile", object_type="allocation", object_id=str(allocation.pk))
    return [e.after for e in events.order_by("pk")]


def test_a_claim_deleted_behind_our_back_is_recreated_and_its_new_slot_recorded(
    kube_world: KubeWorld, admin: client.ApiClient
) -> None:
    # given: an active 1g.10gb at the first slot of its GPU
    kw = kube_world
    node = kw.nodes[0]
    active = provision_and_wait(request(kw, "1g.10gb").pk)
    [(_, gpu, start, _)] = placements(active)
    assert start == 0
    ns = kw.namespace("team-a")

    # when: someone deletes its claim and pod, and a claim made past the portal takes the freed slot
    delete_by_hand(admin, ns, active.kube_name)
    outside_claim(ns, "by-hand", node.name, node.gpu_uuids[gpu], "1g.10gb")
    wait_for("the outside claim to be allocated", lambda: (c := kube.read_claim(ns, "by-hand")) and c.allocation)
    report = reconcile_cluster()

    # then: claim and pod are back, and the allocation stays active
    assert report.recreated == [active.pk]
    assert objects_of(admin, ns, active) == ([active.kube_name], [active.kube_name])
    assert Allocation.objects.get(pk=active.pk).status == Status.ACTIVE

    # when: the scheduler allocates the re-created claim (the slot it had is taken) and a pass runs
    wait_for("the claim to be allocated again", lambda: (c := kube.read_claim(ns, active.kube_name)) and c.allocation)
    report = reconcile_cluster()

    # then: the record follows the cluster; the outside claim (not ours) is left alone
    assert report.moved == [active.pk]
    assert placements(Allocation.objects.get(pk=active.pk)) == [
        (node.name, gpu, 1, f"gpu-{gpu}-mig-1g10gb-19-1"),
    ]
    assert reconcile_verbs(active) == [
        {"claim": "re-created: it was deleted outside the portal"},
        {
            "placements": [
                {
                    "planned": f"{node.name}/gpu-{gpu}-mig-1g10gb-19-0",
                    "allocated": f"{node.name}/gpu-{gpu}-mig-1g10gb-19-1",
                }
            ]
        },
    ]
    assert kube.read_claim(ns, "by-hand") is not None

    # when: a further pass finds nothing to do
    report = reconcile_cluster()
    assert (report.recreated, report.moved, report.orphans, report.deleted_changed) == ([], [], [], [])


def test_a_claim_recreated_by_hand_with_another_spec_is_replaced_by_ours(
    kube_world: KubeWorld, admin: client.ApiClient
) -> None:
    # given: an active 2g.20gb whose claim someone replaced by one for a 1g.10gb, with our labels
    kw = kube_world
    node = kw.nodes[0]
    active = provision_and_wait(request(kw, "2g.20gb").pk)
    [(_, gpu, _, _)] = placements(active)
    ns = kw.namespace("team-a")
    delete_by_hand(admin, ns, active.kube_name)
    kube.apply_resource_claim(
        kube.ClaimSpec(
            ns,
            active.kube_name,
            str(active.uuid),
            "team-a",
            (kube.DeviceRequestSpec("mig-0", "1g.10gb", node.gpu_uuids[gpu]),),
        )
    )

    # when: a pass runs, then another once the changed claim is gone
    report = reconcile_cluster()
    assert report.deleted_changed == [active.pk]
    wait_for("the changed claim to be gone", lambda: claim_gone(admin, ns, active.kube_name))
    report = reconcile_cluster()

    # then: our claim again, for a 2g.20gb on the recorded GPU
    assert report.recreated == [active.pk]
    claim = kube.read_claim(ns, active.kube_name)
    assert claim is not None
    assert claim.selectors == kube.claim_selectors(kube_sync.cluster_specs(active)[0][0])
    assert "mig-0: device.attributes['gpu.nvidia.com'].profile == '2g.20gb'" in claim.selectors


def test_a_node_that_leaves_the_cluster_fails_its_slices_and_frees_the_quota(
    kube_world: KubeWorld, admin: client.ApiClient
) -> None:
    # given: an active slice on the pool's node
    kw = kube_world
    node = kw.nodes[0]
    active = provision_and_wait(request(kw, "3g.40gb").pk)
    ns = kw.namespace("team-a")

    # when: the node is deleted from the cluster and a pass runs
    client.CoreV1Api(admin).delete_node(node.name)
    report = reconcile_cluster()

    # then: the allocation failed with the reason, quota back, objects gone, node marked gone
    failed = Allocation.objects.get(pk=active.pk)
    assert failed.status == Status.FAILED
    assert failed.status_message == (
        f"Node {node.name} left the cluster, and the slices with it; the quota was given back."
    )
    quota = kw.world.tenant_a.quotas.get(pool=kw.pool)
    assert (quota.compute_slices_used, quota.memory_slices_used) == (0, 0)
    assert objects_of(admin, ns, active) == ([], [])
    assert report.node_gone == [active.pk]
    assert node.name in report.nodes_gone
    assert Node.objects.get(name=node.name).state == Node.State.GONE
    # and: nothing is planned on it while it is gone
    refused = services.provision_allocation(allocation_id=request(kw, "1g.10gb").pk)
    assert refused.status == Status.QUEUED

    # when: it comes back
    create_ready_node(admin, node.name, GFD_LABELS)
    report = reconcile_cluster()

    # then: ready again
    assert node.name in report.nodes_back
    assert Node.objects.get(name=node.name).state == Node.State.READY


def test_claims_and_pods_of_finished_or_unknown_allocations_are_deleted(
    kube_world: KubeWorld, admin: client.ApiClient, django_capture_on_commit_callbacks: Any
) -> None:
    # given: a released allocation whose claim a late, stray task applied again, and a pod labelled as ours
    # for an allocation that does not exist
    kw = kube_world
    node = kw.nodes[0]
    done = provision_and_wait(request(kw, "1g.10gb").pk)
    [claim], _ = kube_sync.cluster_specs(done)
    services.release_allocation(allocation_id=done.pk, actor=kw.world.alice)
    assert services.provisioning.teardown_allocation(allocation_id=done.pk).status == Status.RELEASED
    ns = kw.namespace("team-a")
    # the late task comes after the teardown's delete has finished: applied to a claim still terminating (its
    # finalizer not yet removed), the apply would vanish with it and leave nothing to reconcile (a flake, seen once)
    wait_for("the released claim to be gone", lambda: claim_gone(admin, ns, done.kube_name))
    kube.apply_resource_claim(claim)
    kube.apply_holder_pod(kube.HolderPodSpec(ns, "stray", ("stray",), node.name, "no-such-allocation", "team-a"))

    # when
    report = reconcile_cluster()

    # then: both deleted, the released one's audit says so (requests whose task was lost are requeued by the outbox
    # sweep, without the cluster: tests/allocations/test_outbox.py)
    assert sorted(report.orphans) == sorted([f"{ns}/{done.kube_name}", f"{ns}/stray"])
    wait_for("the stray claim to be gone", lambda: claim_gone(admin, ns, done.kube_name))
    assert client.CoreV1Api(admin).list_namespaced_pod(ns, label_selector=kube.LABEL_ALLOCATION).items == []
    assert reconcile_verbs(done) == [
        {"deleted": f"claim and holder pod {ns}/{done.kube_name}: the allocation is released"},
    ]
