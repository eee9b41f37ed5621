"""Namespaces a tenant owns (issue 17) on the real control plane: the claim admission policy refuses a member's
own NVIDIA claim and accepts the portal's; a request into an admin-assigned namespace gets its claim there,
allocated by kube-scheduler; the namespace cannot leave while the claim lives, and leaving removes the bindings;
members may apply every workload Fatia generates in their tenant's namespaces and in no other.

The policy is deploy/control-plane/claim-admission-policy.yaml (the chart renders the same rules), applied by the
cluster admin for this module and removed after it: the plane is shared with tests that make claims by hand.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from allocations import services
from allocations.cluster import kube, namespace_discovery, namespace_sync
from allocations.cluster import sync as kube_sync
from allocations.models import Allocation
from allocations.services.tenant_namespaces import NamespaceInUse, assign_namespace, remove_namespace
from allocations.workloads.attach import attach_claims
from allocations.workloads.documents import dump_documents
from allocations.workloads.manifests import KINDS, build_manifests, parse_options
from allocations.workloads.target import ClaimTarget
from tenants.models import TenantNamespace
from tests.kube.conftest import ROOT, ControlPlane, KubeWorld, wait_for
from tests.kube.test_workloads import user_manifest

POLICY = ROOT / "deploy" / "control-plane" / "claim-admission-policy.yaml"
REFUSAL = "Only the Fatia portal may claim NVIDIA GPUs and MIG devices in this namespace"
Status = Allocation.Status


@pytest.fixture(scope="module")
def claim_policy(control_plane: ControlPlane) -> Iterator[None]:
    api = control_plane.api_client(control_plane.admin_kubeconfig)
    admission = client.AdmissionregistrationV1Api(api)
    policy, binding = [d for d in yaml.safe_load_all(POLICY.read_text()) if d]
    admission.create_validating_admission_policy(body=policy)
    admission.create_validating_admission_policy_binding(body=binding)
    yield
    admission.delete_validating_admission_policy_binding(binding["metadata"]["name"])
    admission.delete_validating_admission_policy(policy["metadata"]["name"])


def as_member(control_plane: ControlPlane, tenant_slug: str) -> client.ApiClient:
    """A tenant member, as the admin impersonating them (the member group the portal binds)."""
    api = control_plane.api_client(control_plane.admin_kubeconfig)
    api.set_default_header("Impersonate-User", "bob@example.test")
    api.set_default_header("Impersonate-Group", f"fatia:tenant:{tenant_slug}")
    return api


def let_member_create_claims(admin: client.ApiClient, ns: str, tenant_slug: str) -> None:
    """What a team may well hold in a namespace it owns: the right to make claims (RBAC lets it; the policy must
    not)."""
    rbac = client.RbacAuthorizationV1Api(admin)
    rules = [
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims", "resourceclaimtemplates"],
            "verbs": ["create"],
        }
    ]
    rbac.create_namespaced_role(ns, body={"metadata": {"name": "own-claims"}, "rules": rules})
    rbac.create_namespaced_role_binding(
        ns,
        body={
            "metadata": {"name": "own-claims"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "own-claims"},
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": f"fatia:tenant:{tenant_slug}"}
            ],
        },
    )


def claim(name: str, device_class: str) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": device_class}}
    return {"metadata": {"name": name}, "spec": {"devices": {"requests": [request]}}}


def create_claim(api: client.ApiClient, ns: str, device_class: str) -> str:
    """Creates a claim (server-side dry run: nothing is kept) and returns "" or the API server's refusal."""
    try:
        client.ResourceV1Api(api).create_namespaced_resource_claim(
            ns, body=claim(f"own-{uuid.uuid4().hex[:6]}", device_class), dry_run="All"
        )
    except ApiException as exc:
        return f"{exc.status} {exc.body}"
    return ""


def create_template(api: client.ApiClient, ns: str, device_class: str) -> str:
    body = {"metadata": {"name": f"own-{uuid.uuid4().hex[:6]}"}, "spec": {"spec": claim("x", device_class)["spec"]}}
    try:
        client.ResourceV1Api(api).create_namespaced_resource_claim_template(ns, body=body, dry_run="All")
    except ApiException as exc:
        return f"{exc.status} {exc.body}"
    return ""


def refused(api: client.ApiClient, ns: str) -> str | None:
    """The member's MIG claim's refusal once the API server enforces the new policy (it loads it in a moment)."""
    answer = create_claim(api, ns, kube.MIG_DEVICE_CLASS)
    return answer if REFUSAL in answer else None


def test_a_members_own_nvidia_claim_is_refused_and_the_portals_is_accepted(
    kube_world: KubeWorld,
    admin: client.ApiClient,
    portal: client.ApiClient,
    control_plane: ControlPlane,
    claim_policy: None,
) -> None:
    # given: team A's portal-made namespace (labelled managed), where its members could make claims by RBAC
    kw = kube_world
    ns = kw.namespace("team-a")
    labels = client.CoreV1Api(admin).read_namespace(ns).metadata.labels
    assert labels[kube.LABEL_MANAGED] == "true"
    let_member_create_claims(admin, ns, "team-a")
    member = as_member(control_plane, "team-a")

    # when/then: a member's own claim for MIG devices is refused with the policy's message
    answer = wait_for("the policy to refuse the member's claim", lambda: refused(member, ns))
    assert answer.startswith("403 ")
    # and for a whole GPU, and through a claim template, alike
    assert REFUSAL in create_claim(member, ns, "gpu.nvidia.com")
    assert REFUSAL in create_template(member, ns, kube.MIG_DEVICE_CLASS)
    # but a claim for another driver's class is none of the policy's business
    assert create_claim(member, ns, "example.com-fpga") == ""
    # and the portal's own MIG claim and template are accepted
    assert create_claim(portal, ns, kube.MIG_DEVICE_CLASS) == ""


def own_namespace(admin: client.ApiClient) -> str:
    """A namespace the cluster admin made for a team (no fatia labels), with its default ServiceAccount."""
    name = f"own-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(admin)
    core.create_namespace(body={"metadata": {"name": name}})
    wait_for(
        f"ServiceAccount {name}/default",
        lambda: core.list_namespaced_service_account(name, field_selector="metadata.name=default").items or None,
    )
    return name


def bindings(admin: client.ApiClient, ns: str) -> list[str]:
    return sorted(b.metadata.name for b in client.RbacAuthorizationV1Api(admin).list_namespaced_role_binding(ns).items)


def test_a_request_into_an_assigned_namespace_gets_its_claim_there_and_leaving_removes_the_bindings(
    kube_world: KubeWorld, admin: client.ApiClient, control_plane: ControlPlane, claim_policy: None
) -> None:
    # given: a namespace the admin made, assigned to team A, and what bind_tenant_namespace_task does
    kw = kube_world
    name = own_namespace(admin)
    ns = assign_namespace(tenant_id=kw.world.tenant_a.pk, name=name, actor=kw.world.root)
    namespace_sync.bind_tenant_namespace(namespace_id=ns.pk)

    # then: labelled managed and the tenant's, the portal bound to its namespace role, the members to theirs
    labels = client.CoreV1Api(admin).read_namespace(name).metadata.labels
    assert (labels[kube.LABEL_MANAGED], labels[kube.LABEL_TENANT]) == ("true", "team-a")
    assert bindings(admin, name) == ["fatia-member", "fatia-member-workloads", "fatia-portal"]
    portal_binding = client.RbacAuthorizationV1Api(admin).read_namespaced_role_binding("fatia-portal", name)
    assert (portal_binding.role_ref.kind, portal_binding.role_ref.name) == ("ClusterRole", "fatia-portal-namespace")
    # and a member's own NVIDIA claim is refused there too
    let_member_create_claims(admin, name, "team-a")
    wait_for("the policy to refuse the member's claim", lambda: refused(as_member(control_plane, "team-a"), name))

    # when: alice asks for a slice in that namespace, and it is provisioned
    allocation, _ = services.request_allocation(
        tenant_id=kw.world.tenant_a.pk,
        pool_id=kw.pool.pk,
        profile="1g.10gb",
        count=1,
        lease_hours=2,
        purpose="own namespace",
        actor=kw.world.alice,
        namespace=name,
    )
    assert allocation.status == Status.APPROVED
    services.provision_allocation(allocation_id=allocation.pk)

    def settled() -> bool:
        return kube_sync.sync_claim_allocation(allocation_id=allocation.pk) == kube_sync.ClaimProgress.SETTLED

    # (kube-scheduler adds its finalizer to the claim, an UPDATE the policy must let through)
    wait_for("the claim to be allocated", settled)

    # then: its claim is in the assigned namespace, allocated by the scheduler on the node
    active = Allocation.objects.get(pk=allocation.pk)
    assert (active.status, active.namespace) == (Status.ACTIVE, name)
    made = client.ResourceV1Api(admin).read_namespaced_resource_claim(active.claim_name, name)
    assert made.status.allocation is not None
    assert [r.pool for r in made.status.allocation.devices.results] == [kw.nodes[0].name]

    # when: the admin tries to take the namespace away while the claim lives
    with pytest.raises(NamespaceInUse):
        remove_namespace(namespace_id=ns.pk, actor=kw.world.root)
    # then: it stays
    assert TenantNamespace.objects.filter(pk=ns.pk).exists()

    # when: released, then removed, and unbind_tenant_namespace_task runs
    services.release_allocation(allocation_id=allocation.pk, actor=kw.world.alice)
    services.provisioning.teardown_allocation(allocation_id=allocation.pk)
    remove_namespace(namespace_id=ns.pk, actor=kw.world.root)
    namespace_sync.unbind_tenant_namespace(name=name)

    # then: the portal's and the members' bindings are gone, the managed label too (the namespace stays the admin's)
    assert bindings(admin, name) == ["own-claims"]
    labels = client.CoreV1Api(admin).read_namespace(name).metadata.labels or {}
    assert kube.LABEL_MANAGED not in labels
    assert kube.LABEL_TENANT not in labels
    # and the member role is gone with them
    roles = client.RbacAuthorizationV1Api(admin).list_namespaced_role(name).items
    assert sorted(r.metadata.name for r in roles) == ["own-claims"]


def test_a_namespace_the_admin_labels_for_a_tenant_joins_it_on_the_reconcile_pass(
    kube_world: KubeWorld, admin: client.ApiClient
) -> None:
    # given: a namespace the cluster admin made and labelled for team A
    kw = kube_world
    name = own_namespace(admin)
    client.CoreV1Api(admin).patch_namespace(name, {"metadata": {"labels": {kube.LABEL_TENANT: "team-a"}}})
    # when: the reconcile pass looks for labelled namespaces (as the portal)
    report = namespace_discovery.discover_labelled_namespaces()
    # then: it is team A's, found by its label; the portal-made namespaces (labelled too) are not rows
    assert name in report.joined
    assert TenantNamespace.objects.get(name=name).tenant == kw.world.tenant_a
    assert TenantNamespace.objects.get(name=name).source == TenantNamespace.Source.LABELLED
    assert not TenantNamespace.objects.filter(name=kw.namespace("team-a")).exists()


def member_apply(control_plane: ControlPlane, tenant_slug: str, objects: list[dict[str, Any]], path: Path) -> str:
    """`kubectl apply --server-side --dry-run=server` as a member of the tenant (the admin impersonating them):
    "" when the API server accepts every object, else its refusal."""
    path.write_text(dump_documents(objects))
    done = subprocess.run(
        [
            str(control_plane.bin_dir / "kubectl"),
            f"--kubeconfig={control_plane.admin_kubeconfig}",
            "--as=bob@example.test",
            f"--as-group=fatia:tenant:{tenant_slug}",
            "apply",
            "--server-side",
            "--dry-run=server",
            "-f",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return "" if done.returncode == 0 else done.stderr


def workloads(namespace: str) -> list[dict[str, Any]]:
    """Every kind Fatia generates (Pod, Job, Deployment, notebook: StatefulSet + Service, vLLM: Deployment +
    Service) and a team's own CronJob with the claim attached, for a claim in `namespace`."""
    target = ClaimTarget(request_id=1, namespace=namespace, claim_names=("mig-alloc-x",))
    objects = [o for kind in KINDS for o in build_manifests(target, parse_options({"kind": kind}, target))]
    cronjob, _ = attach_claims([user_manifest("CronJob")], target, containers=("trainer",))
    return objects + [{**o, "metadata": {**o["metadata"], "namespace": namespace}} for o in cronjob]


def test_members_may_apply_every_generated_workload_in_their_namespaces_and_nowhere_else(
    kube_world: KubeWorld, admin: client.ApiClient, control_plane: ControlPlane, tmp_path: Path
) -> None:
    # given: team A's portal-made namespace and one the admin gave it (bound as bind_tenant_namespace_task does),
    # both set up by the portal's own identity, which may bind the member ClusterRole but holds none of its verbs
    kw = kube_world
    made = kw.namespace("team-a")
    owned = own_namespace(admin)
    namespace_sync.bind_tenant_namespace(
        namespace_id=assign_namespace(tenant_id=kw.world.tenant_a.pk, name=owned, actor=kw.world.root).pk
    )
    assert "fatia-member-workloads" in bindings(admin, made)
    assert "fatia-member-workloads" in bindings(admin, owned)
    kinds = {o["kind"] for o in workloads(made)}
    assert kinds == {"Pod", "Job", "Deployment", "StatefulSet", "Service", "CronJob"}

    # when/then: a member of team A applies every kind in both of its namespaces
    assert member_apply(control_plane, "team-a", workloads(made), tmp_path / "made.yaml") == ""
    assert member_apply(control_plane, "team-a", workloads(owned), tmp_path / "owned.yaml") == ""
    # but not in team B's namespace
    refused_there = member_apply(control_plane, "team-a", workloads(kw.namespace("team-b")), tmp_path / "b.yaml")
    assert "is forbidden" in refused_there
    # and still may not make a claim of its own for an NVIDIA class in either of its namespaces
    member = as_member(control_plane, "team-a")
    for ns in (made, owned):
        assert create_claim(member, ns, kube.MIG_DEVICE_CLASS).startswith("403 ")

    # when: the namespace leaves the tenant
    remove_namespace(namespace_id=TenantNamespace.objects.get(name=owned).pk, actor=kw.world.root)
    namespace_sync.unbind_tenant_namespace(name=owned)
    # then: the workload binding went with the others, and the member may apply nothing there
    assert bindings(admin, owned) == []
    assert "is forbidden" in member_apply(control_plane, "team-a", workloads(owned), tmp_path / "gone.yaml")
