"""A namespace joining or leaving a tenant on the cluster (issue 17): labels and RoleBindings, nothing else.

Joining labels the namespace `fatia.io/managed=true` (which puts it under the claim admission policy,
deploy/chart/templates/claim-admission-policy.yaml) and `fatia.io/tenant=<slug>`, and binds in it: the portal's
ServiceAccount to the ClusterRole FATIA_KUBE_NAMESPACE_ROLE (claim and pod verbs only), and the tenant's member
group, as in the portal-made namespace, to a `fatia-member` Role (read the claims, run pods) and to the ClusterRole
FATIA_KUBE_MEMBER_ROLE (apply the workloads allocations/workloads/ makes; permissions.py MEMBER_WORKLOAD_RULES).
Leaving removes the bindings and the Role and drops the managed label; the namespace itself is the admin's and
stays.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubernetes import client

from allocations.cluster import kube
from allocations.cluster.kube import LABEL_MANAGED, LABEL_TENANT

PORTAL_BINDING = "fatia-portal"
MEMBER_NAME = "fatia-member"


@dataclass(frozen=True, slots=True)
class NamespaceBinding:
    namespace: str
    tenant_slug: str
    member_group: str
    # `<namespace>:<name>` of the portal's ServiceAccount, and the ClusterRole bound to it here.
    portal_service_account: str
    portal_role: str
    # The ClusterRole of the members' workload rights (FATIA_KUBE_MEMBER_ROLE); "" binds none.
    member_role: str = ""


def member_role_rules() -> list[dict[str, object]]:
    """The member Role's rules: the same as in the portal-made namespace (kube.ensure_tenant_namespace)."""
    return [
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "create", "delete"]},
    ]


def bind_namespace(spec: NamespaceBinding) -> None:
    """Label the namespace and create the portal's and the members' bindings in it. Idempotent; the namespace
    must exist (KubeRejected when it does not: the admin names an existing one)."""
    api = kube.api_client()
    core = client.CoreV1Api(api)
    rbac = client.RbacAuthorizationV1Api(api)
    ns = spec.namespace
    # A merge patch, not an apply: the namespace and its other labels are the admin's.
    kube._call(
        f"namespace {ns}",
        core.patch_namespace,
        ns,
        {"metadata": {"labels": {LABEL_MANAGED: "true", LABEL_TENANT: spec.tenant_slug}}},
    )
    labels = {LABEL_TENANT: spec.tenant_slug, LABEL_MANAGED: "true"}
    sa_namespace, _, sa_name = spec.portal_service_account.partition(":")
    kube._apply(
        f"rolebinding {ns}/{PORTAL_BINDING}",
        rbac.patch_namespaced_role_binding,
        PORTAL_BINDING,
        ns,
        body={
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": PORTAL_BINDING, "namespace": ns, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": spec.portal_role},
            "subjects": [{"kind": "ServiceAccount", "name": sa_name, "namespace": sa_namespace}],
        },
    )
    meta = {"name": MEMBER_NAME, "namespace": ns, "labels": labels}
    kube._apply(
        f"role {ns}/{MEMBER_NAME}",
        rbac.patch_namespaced_role,
        MEMBER_NAME,
        ns,
        body={
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": member_role_rules(),
        },
    )
    kube._apply(
        f"rolebinding {ns}/{MEMBER_NAME}",
        rbac.patch_namespaced_role_binding,
        MEMBER_NAME,
        ns,
        body={
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": MEMBER_NAME},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": spec.member_group}],
        },
    )
    if spec.member_role:
        kube.apply_member_workloads_binding(ns, labels, spec.member_group, spec.member_role)


def unbind_namespace(namespace: str) -> None:
    """Remove the portal's and the members' bindings and the member Role, and the managed and tenant labels.
    Idempotent (a namespace already gone or unbound is fine)."""
    api = kube.api_client()
    core = client.CoreV1Api(api)
    rbac = client.RbacAuthorizationV1Api(api)
    for name in (PORTAL_BINDING, MEMBER_NAME, kube.MEMBER_WORKLOADS_BINDING):
        kube._delete(f"rolebinding {namespace}/{name}", rbac.delete_namespaced_role_binding, name, namespace)
    kube._delete(f"role {namespace}/{MEMBER_NAME}", rbac.delete_namespaced_role, MEMBER_NAME, namespace)
    try:
        kube._call(
            f"namespace {namespace}",
            core.patch_namespace,
            namespace,
            {"metadata": {"labels": {LABEL_MANAGED: None, LABEL_TENANT: None}}},
        )
    except kube.KubeRejected as exc:
        if exc.status != 404:
            raise


def labelled_namespaces() -> dict[str, str]:
    """Every namespace labelled `fatia.io/tenant`, with the label's value (a tenant slug)."""
    core = client.CoreV1Api(kube.api_client())
    listed = kube._call("namespaces", core.list_namespace, label_selector=LABEL_TENANT)
    return {
        n.metadata.name: n.metadata.labels[LABEL_TENANT]
        for n in listed.items
        if n.metadata is not None and n.metadata.name and n.metadata.labels
    }
