"""What the portal's Kubernetes identity must be allowed to do, in one place.

`PORTAL_PERMISSIONS` is derived from the calls in `kube.py` (plus the reads fleet discovery makes), and it is
what `deploy/control-plane/portal-rbac.yaml` grants, rule for rule (tests/kube/test_check_cluster_units.py
compares the two). `manage.py check_cluster` asks the API server about each verb (SelfSubjectAccessReview) and
reports anything granted beyond this list and `BASELINE` (SelfSubjectRulesReview).

Rules of thumb behind the list:
- Server-Side Apply is a PATCH; when the object does not exist yet the API server also asks for `create`, so
  every applied kind needs both.
- Every kind the portal reads or writes gets get/list/watch together: reconcile lists, discovery watches, and
  the tenant Role (`kube.ensure_tenant_namespace`) hands members get/list/watch on claims and pods, which RBAC
  lets the portal grant only when it holds them itself (escalation check).
- Writes are exactly those `kube.py` makes; nothing "just in case".
"""

from __future__ import annotations

from dataclasses import dataclass

READ = ("get", "list", "watch")


@dataclass(frozen=True, slots=True)
class Permission:
    """Verbs on one resource of one API group ("" is the core group)."""

    group: str
    resource: str
    verbs: tuple[str, ...]
    why: str
    # The setting naming the one object the verbs are granted on (RBAC resourceNames), or "" for every object.
    named_by: str = ""


def display_resource(group: str, resource: str) -> str:
    """kubectl's spelling: `pods`, `resourceclaims.resource.k8s.io`, `resourceclaims.resource.k8s.io/status`."""
    name, slash, subresource = resource.partition("/")
    return f"{name}.{group}{slash}{subresource}" if group else resource


PORTAL_PERMISSIONS: tuple[Permission, ...] = (
    Permission("resource.k8s.io", "resourceslices", READ, "discovery and check_cluster read the driver's devices"),
    Permission("resource.k8s.io", "deviceclasses", READ, "check_cluster confirms NVIDIA's classes"),
    Permission("", "nodes", READ, "reconcile and discovery see nodes come and go"),
    Permission(
        "resource.k8s.io",
        "resourceclaims",
        (*READ, "create", "patch", "delete"),
        "apply_resource_claim, read_claim, list_claims, delete_resource_claim; discovery watches every namespace's; "
        "the tenant Role grants the reads",
    ),
    Permission(
        "resource.k8s.io",
        "devicetaintrules",
        (*READ, "create", "patch", "deletecollection"),
        "apply_steering, list_steering, delete_steering (FATIA_KUBE_STEER_SLOTS)",
    ),
    Permission(
        "",
        "pods",
        (*READ, "create", "patch", "delete"),
        "apply_holder_pod, read_holder_pod, list_holder_pods, delete_holder_pod; restart_dra_plugin (static MIG: "
        "list and delete the driver's kubelet plugin pod on a node); the tenant Role grants "
        "get/list/watch/create/delete",
    ),
    Permission("", "namespaces", (*READ, "create", "patch"), "ensure_tenant_namespace (apply); check_cluster lists"),
    Permission("", "resourcequotas", (*READ, "create", "patch"), "ensure_tenant_namespace (apply)"),
    Permission(
        "rbac.authorization.k8s.io",
        "roles",
        (*READ, "create", "patch", "delete"),
        "ensure_tenant_namespace, bind_namespace (apply); unbind_namespace (a namespace leaves its tenant)",
    ),
    Permission(
        "rbac.authorization.k8s.io",
        "rolebindings",
        (*READ, "create", "patch", "delete"),
        "ensure_tenant_namespace, bind_namespace (apply); unbind_namespace (a namespace leaves its tenant)",
    ),
    Permission(
        "rbac.authorization.k8s.io",
        "clusterroles",
        ("bind",),
        "ensure_tenant_namespace, bind_namespace: bind the member group to the member ClusterRole in a tenant's "
        "namespaces; only that ClusterRole (resourceNames), so the portal never needs the workload verbs itself",
        named_by="FATIA_KUBE_MEMBER_ROLE",
    ),
    Permission(
        "authentication.k8s.io",
        "tokenreviews",
        ("create",),
        "review_token: node agents bootstrap their credential with a ServiceAccount token (the pod check reads pods)",
    ),
)

# What Kubernetes' bootstrap policy grants every authenticated user (system:basic-user: the self reviews) and
# every service account (system:cluster-trust-bundle-discovery); not the portal's doing, so never "extra".
BASELINE: frozenset[tuple[str, str, str]] = frozenset(
    {
        ("authorization.k8s.io", "selfsubjectaccessreviews", "create"),
        ("authorization.k8s.io", "selfsubjectrulesreviews", "create"),
        ("authentication.k8s.io", "selfsubjectreviews", "create"),
        ("certificates.k8s.io", "clustertrustbundles", "get"),
        ("certificates.k8s.io", "clustertrustbundles", "list"),
        ("certificates.k8s.io", "clustertrustbundles", "watch"),
    }
)


# What a tenant member may do in each of the tenant's namespaces besides using the portal's claims (the `fatia-member`
# Role): apply and remove the workloads allocations/workloads/ generates or attaches a claim to (Pod, Job, CronJob,
# Deployment, StatefulSet, Service; `kubectl apply --server-side` is a PATCH, with create when new). The ClusterRole
# FATIA_KUBE_MEMBER_ROLE (deploy/control-plane/portal-rbac.yaml, the chart) holds exactly these rules; it is bound
# per namespace only. No claims: only the portal makes NVIDIA claims (the claim admission policy), and RBAC keeps
# members to reading them.
WORKLOAD_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
MEMBER_WORKLOAD_RULES: tuple[dict[str, list[str]], ...] = (
    {"apiGroups": [""], "resources": ["pods", "services"], "verbs": list(WORKLOAD_VERBS)},
    {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets"], "verbs": list(WORKLOAD_VERBS)},
    {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": list(WORKLOAD_VERBS)},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": list(READ)},
)


def required_verbs() -> list[tuple[str, str, str]]:
    """Every (group, resource, verb) the portal needs, in the order of PORTAL_PERMISSIONS."""
    return [(p.group, p.resource, verb) for p in PORTAL_PERMISSIONS for verb in p.verbs]


@dataclass(frozen=True, slots=True)
class NamespacedPermission:
    """Verbs on one resource, granted in one namespace by a Role, or cluster-wide (`namespace` "*") by a ClusterRole
    of their own. `namespace` "" stands for the MIG manager's namespace (FATIA_MIG_MANAGER_NAMESPACE), known only at
    install time."""

    group: str
    resource: str
    verbs: tuple[str, ...]
    namespace: str
    why: str


# MIG-manager mode only (pool mode static-manager; allocations/cluster/migmanager.py): what it adds to
# PORTAL_PERMISSIONS, granted by deploy/control-plane/mig-manager-rbac.yaml and, with migManager.enabled, the chart.
# Not part of required_verbs(): a cluster without NVIDIA's MIG manager does not grant them.
MIG_MANAGER_PERMISSIONS: tuple[NamespacedPermission, ...] = (
    NamespacedPermission(
        "", "configmaps", ("get", "create", "patch"), "", "read_config_map_key, write_config_map_key (mig-parted)"
    ),
    NamespacedPermission("", "nodes", ("patch",), "*", "patch_node_metadata: nvidia.com/mig.config on the node"),
    NamespacedPermission("", "events", ("list",), "default", "list_node_events: the manager's reason for a failure"),
)


def mig_manager_verbs(namespace: str, manager_namespace: str) -> set[tuple[str, str, str]]:
    """The (group, resource, verb) of MIG_MANAGER_PERMISSIONS a rules review in `namespace` may show without them
    being extra: the cluster-wide ones everywhere, the namespaced ones only in their own namespace."""
    return {
        (p.group, p.resource, verb)
        for p in MIG_MANAGER_PERMISSIONS
        if p.namespace == "*" or (p.namespace or manager_namespace) == namespace
        for verb in p.verbs
    }
