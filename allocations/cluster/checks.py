"""Is this cluster ready for the portal? `check_cluster()` answers with one result per check: OK, WARN or FAIL,
what was found and what to do. `manage.py check_cluster` prints it (exit 1 on any FAIL) and the admin page
/manage/cluster-check/ shows what the last `check_cluster_task` found.

Every question goes to the API server through `kube.py`; nothing here writes to the cluster or the database.
FAIL means the portal cannot work as it is (no API, no resource.k8s.io/v1, no MIG DeviceClass, no GPU node
with MIG devices, a verb it needs refused, a MIG layout without counters, a holder image the kubelet refuses).
WARN means it works, but less than it should: a GPU node the portal cannot use, a verb granted that it does
not need, a tenant namespace without the Pod Security level or its RoleBindings, a namespace that left its tenant
with the portal's bindings, a system namespace a tenant owns, a stray claim, a holder image that only works by
luck. The tenant-namespaces check also reads the database (the namespaces tenants own, the live requests).
"""

from __future__ import annotations

import enum
import re
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError
from django.utils import timezone

from allocations.cluster import kube, namespace_rbac
from allocations.cluster.permissions import (
    BASELINE,
    PORTAL_PERMISSIONS,
    display_resource,
    mig_manager_verbs,
    required_verbs,
)
from allocations.cluster.reconcile import CLAIM_WANTED
from allocations.models import Allocation
from tenants.models import TenantNamespace
from tenants.services import holds_credentials

# resource.k8s.io/v1 went GA, served by default, in Kubernetes 1.34.
MIN_MINOR = 34
RESOURCE_GROUP = "resource.k8s.io"
NEEDED_RESOURCES = ("resourceclaims", "resourceslices", "deviceclasses", "devicetaintrules")
# The DeviceClasses NVIDIA's chart installs (allocations/cluster/fake_fleet.py publishes the same); the portal's
# claims name the MIG one, and gpu.nvidia.com in shared and MPS pools (allocations/cluster/shared_claims.py).
NVIDIA_DEVICE_CLASSES = ("gpu.nvidia.com", kube.MIG_DEVICE_CLASS, "vfio.gpu.nvidia.com")
# A GPU node is one that any of these label: the GPU Operator, GPU Feature Discovery, Node Feature Discovery (NVIDIA's
# PCI vendor id). Pools select nodes by GFD's labels (nvidia.com/gpu.product).
GPU_NODE_SELECTORS = (
    "nvidia.com/gpu.present=true",
    "nvidia.com/gpu.count",
    "feature.node.kubernetes.io/pci-10de.present=true",
)
ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
POD_SECURITY_LEVELS = ("privileged", "baseline", "restricted")
# The defaults of the holder package's settings, read with getattr so this check runs before they exist.
DEFAULT_POD_SECURITY = "restricted"
DEFAULT_HOLDER_IMAGE = "registry.k8s.io/pause:3.10"
SKIPPED = "The other cluster checks did not run."
# Names listed in a finding before "and N more".
LISTED = 8
# SelfSubjectRulesReviews in one run: the portal's own namespace and up to this many tenant namespaces.
MAX_RULES_REVIEWS = 50


class Level(enum.StrEnum):
    OK = "OK"
    WARN = "WARN"
    FAIL = "FAIL"


_RANK = {Level.OK: 0, Level.WARN: 1, Level.FAIL: 2}


@dataclass(frozen=True, slots=True)
class CheckResult:
    key: str
    title: str
    level: Level
    found: str
    action: str = ""
    details: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ClusterReport:
    server: str
    identity: str
    checked_at: datetime
    results: tuple[CheckResult, ...] = field(default_factory=tuple)

    @property
    def level(self) -> Level:
        return max((r.level for r in self.results), key=_RANK.__getitem__, default=Level.OK)

    def count(self, level: Level) -> int:
        return sum(1 for r in self.results if r.level == level)

    @property
    def exit_code(self) -> int:
        """1 when anything blocks the portal (a FAIL), 0 otherwise (warnings included)."""
        return 1 if self.level == Level.FAIL else 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "level": str(self.level),
            "server": self.server,
            "identity": self.identity,
            "checked_at": self.checked_at.isoformat(),
            "checks": [
                {
                    "key": r.key,
                    "title": r.title,
                    "level": str(r.level),
                    "found": r.found,
                    "action": r.action,
                    "details": list(r.details),
                }
                for r in self.results
            ],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClusterReport:
        return cls(
            server=str(data["server"]),
            identity=str(data["identity"]),
            checked_at=datetime.fromisoformat(str(data["checked_at"])),
            results=tuple(
                CheckResult(
                    key=str(c["key"]),
                    title=str(c["title"]),
                    level=Level(c["level"]),
                    found=str(c["found"]),
                    action=str(c["action"]),
                    details=tuple(str(d) for d in c["details"]),
                )
                for c in data["checks"]
            ),
        )


def listed(names: Iterable[str]) -> str:
    """'a, b, c', or the first LISTED names and 'and 7 more'."""
    names = list(names)
    shown = ", ".join(names[:LISTED])
    return f"{shown} and {len(names) - LISTED} more" if len(names) > LISTED else shown


def plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word if n == 1 else (words or word + 's')}"


# --- the run ------------------------------------------------------------------------------------------------


def check_cluster(*, now: datetime | None = None) -> ClusterReport:
    """Every check, in the order a person fixes them. The cluster checks run only when the API answers."""
    checked_at = now or timezone.now()
    results = [check_backend()]
    try:
        server = kube.api_server_url()
    except ImproperlyConfigured as exc:
        results.append(
            CheckResult(
                "api",
                "API server",
                Level.FAIL,
                str(exc),
                "Set FATIA_KUBECONFIG to a readable kubeconfig for the portal.",
            )
        )
        results.append(check_holder_image())
        return ClusterReport(server="", identity="", checked_at=checked_at, results=tuple(results))
    api, reachable = check_api(server)
    results.append(api)
    identity = ""
    if reachable:
        identity = _guarded_identity()
        results.append(_guard("resource-api", "resource.k8s.io/v1", check_resource_api))
        results.append(_guard("device-classes", "NVIDIA DeviceClasses", check_device_classes))
        results.extend(_guard_gpu_nodes())
        results.append(_guard("permissions", "Portal permissions", lambda: check_permissions(identity)))
        namespaces: list[kube.NamespaceLabels] = []
        unlisted: kube.KubeError | None = None
        try:
            namespaces = kube.list_tenant_namespaces(settings.FATIA_KUBE_NAMESPACE_PREFIX)
        except kube.KubeError as exc:
            unlisted = exc
        results.append(
            _guard("extra-permissions", "Extra permissions", lambda: check_extra_permissions(identity, namespaces))
        )
        results.append(
            check_pod_security(namespaces) if unlisted is None else _failed("pod-security", "Pod Security", unlisted)
        )
        results.append(_guard("tenant-namespaces", "Tenant namespaces", _tenant_namespaces_from_the_database))
    results.append(check_holder_image())
    return ClusterReport(server=server, identity=identity, checked_at=checked_at, results=tuple(results))


def _failed(key: str, title: str, exc: kube.KubeError) -> CheckResult:
    if exc.status == 403:
        action = "The portal's account may not ask this: grant what 'Portal permissions' lists, then check again."
    elif isinstance(exc, kube.KubeUnavailable):
        action = "The API server stopped answering during the check; check again once it is back."
    else:
        action = "The API server refused the question; see its message."
    return CheckResult(key, title, Level.FAIL, f"The API server answered: {exc.message}", action)


def _guard(key: str, title: str, check: Callable[[], CheckResult]) -> CheckResult:
    try:
        return check()
    except kube.KubeError as exc:
        return _failed(key, title, exc)


def _guard_gpu_nodes() -> list[CheckResult]:
    """The slices and MIG checks share one listing of nodes and slices."""
    try:
        return list(check_gpu_nodes())
    except kube.KubeError as exc:
        return [_failed("driver-slices", "Driver ResourceSlices", exc), _failed("mig", "MIG mode", exc)]


def _guarded_identity() -> str:
    try:
        return kube.who_am_i()
    except kube.KubeError:
        return ""


# --- each check ---------------------------------------------------------------------------------------------


def check_backend() -> CheckResult:
    if settings.FATIA_CLUSTER_BACKEND == "kubernetes":
        return CheckResult("backend", "Backend", Level.OK, "FATIA_CLUSTER_BACKEND is kubernetes.")
    return CheckResult(
        "backend",
        "Backend",
        Level.WARN,
        f"FATIA_CLUSTER_BACKEND is {settings.FATIA_CLUSTER_BACKEND}: the portal does not use this cluster yet.",
        "Set FATIA_CLUSTER_BACKEND=kubernetes once the other checks pass.",
    )


def check_api(server: str) -> tuple[CheckResult, bool]:
    """Reachable, with credentials the server takes, and a version that serves resource.k8s.io/v1. The flag says
    whether the other cluster checks can run."""
    title = "API server"
    try:
        version = kube.read_server_version()
    except kube.KubeError as exc:
        if exc.status == 401:
            found = f"{server} refused the portal's credentials: {exc.message}"
            action = "Renew the token or certificate in FATIA_KUBECONFIG."
        elif exc.status == 0:
            found = exc.message
            action = (
                f"Check FATIA_KUBECONFIG (server {server}), that the API server runs, and that this host reaches it."
            )
        else:
            found = f"{server} answered /version with: {exc.message}"
            action = "Check that FATIA_KUBECONFIG names a Kubernetes API server."
        return CheckResult("api", title, Level.FAIL, found, action, (SKIPPED,)), False
    if (version.major, version.minor) < (1, MIN_MINOR):
        return CheckResult(
            "api",
            title,
            Level.FAIL,
            f"{server} runs Kubernetes {version.git_version or '(no version)'}; the portal needs 1.{MIN_MINOR} or "
            "later (resource.k8s.io/v1).",
            f"Upgrade the cluster to Kubernetes 1.{MIN_MINOR} or later (docs/kubernetes.md, Cluster prerequisites).",
        ), True
    return CheckResult(
        "api", title, Level.OK, f"{server} runs Kubernetes {version.git_version} (1.{MIN_MINOR} or later needed)."
    ), True


def check_resource_api() -> CheckResult:
    versions = kube.served_group_versions(RESOURCE_GROUP)
    if "v1" not in versions:
        served = ", ".join(versions) if versions else "no version"
        return CheckResult(
            "resource-api",
            "resource.k8s.io/v1",
            Level.FAIL,
            f"The API server serves {served} of resource.k8s.io, not v1.",
            "Kubernetes 1.34 and later serve resource.k8s.io/v1 by default; an older cluster must be upgraded, a "
            "newer one has it switched off (--runtime-config).",
        )
    resources = set(kube.served_resource_v1_resources())
    missing = [r for r in NEEDED_RESOURCES if r not in resources]
    if missing:
        return CheckResult(
            "resource-api",
            "resource.k8s.io/v1",
            Level.FAIL,
            f"resource.k8s.io/v1 is served without {listed(missing)}.",
            "DeviceTaintRules are in resource.k8s.io/v1 from Kubernetes 1.37 (gate DRADeviceTaintRules); the "
            "reconcile pass lists them every 30 s (steering cleanup), so it fails without them.",
        )
    return CheckResult(
        "resource-api",
        "resource.k8s.io/v1",
        Level.OK,
        f"resource.k8s.io/v1 is served with {', '.join(NEEDED_RESOURCES)}.",
    )


def check_device_classes() -> CheckResult:
    present = set(kube.list_device_class_names())
    missing = [name for name in NVIDIA_DEVICE_CLASSES if name not in present]
    if kube.MIG_DEVICE_CLASS in missing:
        return CheckResult(
            "device-classes",
            "NVIDIA DeviceClasses",
            Level.FAIL,
            f"Missing: {listed(missing)}. The portal's claims name {kube.MIG_DEVICE_CLASS}.",
            "Install NVIDIA's DRA driver for GPUs (its Helm chart installs the DeviceClasses).",
        )
    if missing:
        return CheckResult(
            "device-classes",
            "NVIDIA DeviceClasses",
            Level.WARN,
            f"{kube.MIG_DEVICE_CLASS} is there; missing: {listed(missing)} (MIG pools do not use them; the claims "
            "of shared and MPS pools name gpu.nvidia.com).",
            "The driver's chart installs them all; an older or partial install lacks some. Reinstall the chart.",
        )
    return CheckResult(
        "device-classes", "NVIDIA DeviceClasses", Level.OK, f"Present: {', '.join(NVIDIA_DEVICE_CLASSES)}."
    )


# --- GPU nodes: the driver's slices and the MIG mode per node ------------------------------------------------


class NodeMode(enum.StrEnum):
    NO_SLICES = "no slices"
    INCOMPLETE = "incomplete slices"
    NO_MIG = "no MIG devices"
    DYNAMIC = "DynamicMIG"
    STATIC = "static MIG"
    NO_COUNTERS = "MIG specs without counters"


@dataclass(frozen=True, slots=True)
class GpuNodeState:
    name: str
    labelled: bool  # by the GPU Operator, GFD or NFD as a node with an NVIDIA GPU
    mode: NodeMode
    driver_versions: tuple[str, ...] = ()


def gpu_node_states() -> list[GpuNodeState]:
    """Every node that GFD labels as a GPU node or that the driver publishes slices for, with what its slices
    say: only the highest generation of each pool counts, and only when all of its slices are there."""
    labelled = {name for selector in GPU_NODE_SELECTORS for name in kube.list_node_names_with_label(selector)}
    pools: dict[str, list[kube.SliceSummary]] = defaultdict(list)
    for summary in kube.list_driver_slices(kube.DRIVER):
        pools[summary.node_name or summary.pool].append(summary)
    states = []
    for name in sorted(labelled | set(pools)):
        slices = pools.get(name, [])
        if not slices:
            states.append(GpuNodeState(name, name in labelled, NodeMode.NO_SLICES))
            continue
        generation = max(s.generation for s in slices)
        current = [s for s in slices if s.generation == generation]
        devices = [d for s in current for d in s.devices]
        versions = tuple(sorted({d.driver_version for d in devices if d.driver_version}))
        if len(current) < max(s.pool_slice_count for s in current):
            mode = NodeMode.INCOMPLETE
        else:
            mode = _mig_mode([d for d in devices if d.type == "mig"])
        states.append(GpuNodeState(name, name in labelled, mode, versions))
    return states


def _mig_mode(mig: list[kube.SliceDevice]) -> NodeMode:
    if not mig:
        return NodeMode.NO_MIG
    if any(d.consumes_counters for d in mig):
        return NodeMode.DYNAMIC
    # Existing (static) MIG devices carry their uuid; DynamicMIG specs have none. Specs without counters mean
    # the API server dropped them (DRAPartitionableDevices off): the scheduler would then hand out overlapping
    # MIG devices of one GPU.
    if all(d.has_uuid for d in mig):
        return NodeMode.STATIC
    return NodeMode.NO_COUNTERS


def check_gpu_nodes() -> tuple[CheckResult, CheckResult]:
    states = gpu_node_states()
    return check_driver_slices(states), check_mig(states)


def check_driver_slices(states: list[GpuNodeState]) -> CheckResult:
    """A GPU node without slices is a WARN, not a FAIL: the portal only places where the driver publishes
    devices, so that node is merely unused, and a driver restart or upgrade leaves a node without slices for a
    while on a healthy cluster. No node with slices at all is a FAIL: nothing can be handed out."""
    title = "Driver ResourceSlices"
    if not states:
        return CheckResult(
            "driver-slices",
            title,
            Level.FAIL,
            f"No GPU node: no node has a GPU label ({', '.join(GPU_NODE_SELECTORS)}) and {kube.DRIVER} publishes no "
            "ResourceSlices.",
            "Install the GPU Operator (or NFD and GPU Feature Discovery) and NVIDIA's DRA driver with its GPU kubelet "
            "plugin (docs/kubernetes.md, Cluster prerequisites).",
        )
    without = [s.name for s in states if s.mode == NodeMode.NO_SLICES]
    incomplete = [s.name for s in states if s.mode == NodeMode.INCOMPLETE]
    unlabelled = [s.name for s in states if not s.labelled and s.mode != NodeMode.NO_SLICES]
    publishing = [s for s in states if s.mode not in (NodeMode.NO_SLICES, NodeMode.INCOMPLETE)]
    versions = sorted({v for s in publishing for v in s.driver_versions})
    driver = f" (GPU driver {', '.join(versions)})" if versions else ""
    found = f"{len(publishing)} of {plural(len(states), 'GPU node')} publish the driver's ResourceSlices{driver}."
    details = []
    if without:
        details.append(f"No slices: {listed(without)}.")
    if incomplete:
        details.append(f"Slices still being published (fewer than resourceSliceCount): {listed(incomplete)}.")
    if unlabelled:
        details.append(f"Slices but no GPU labels (pools select nodes by GFD's labels): {listed(unlabelled)}.")
    if not publishing:
        return CheckResult(
            "driver-slices",
            title,
            Level.FAIL,
            found,
            f"Run NVIDIA's DRA driver with its GPU kubelet plugin on the GPU nodes; {kube.DRIVER} publishes no "
            "complete ResourceSlices anywhere.",
            tuple(details),
        )
    if details:
        return CheckResult(
            "driver-slices",
            title,
            Level.WARN,
            found,
            "The portal places nothing on the nodes named: check the driver's kubelet plugin pod there (and GPU "
            "Feature Discovery for the label).",
            tuple(details),
        )
    return CheckResult("driver-slices", title, Level.OK, found)


def check_mig(states: list[GpuNodeState]) -> CheckResult:
    title = "MIG mode"
    ready = [s for s in states if s.mode not in (NodeMode.NO_SLICES, NodeMode.INCOMPLETE)]
    by_mode: dict[NodeMode, list[str]] = defaultdict(list)
    for state in ready:
        by_mode[state.mode].append(state.name)
    counts = [
        f"{plural(len(by_mode[m]), 'node')} {m}"
        for m in (NodeMode.DYNAMIC, NodeMode.STATIC, NodeMode.NO_COUNTERS, NodeMode.NO_MIG)
        if by_mode[m]
    ]
    found = f"{', '.join(counts)}." if counts else "No GPU node publishes complete slices."
    if by_mode[NodeMode.NO_COUNTERS]:
        return CheckResult(
            "mig",
            title,
            Level.FAIL,
            found,
            "DynamicMIG devices arrived without their counters: the API server drops consumesCounters and "
            "sharedCounters when DRAPartitionableDevices is off (needed on kube-apiserver and kube-scheduler, on by "
            "default from 1.36), and the scheduler would hand out overlapping MIG devices.",
            (f"Without counters: {listed(by_mode[NodeMode.NO_COUNTERS])}.",),
        )
    if not by_mode[NodeMode.DYNAMIC] and not by_mode[NodeMode.STATIC]:
        return CheckResult(
            "mig",
            title,
            Level.FAIL,
            found,
            "Turn on the driver's DynamicMIG feature gate (Helm featureGates.DynamicMIG=true), or partition the GPUs "
            "with mig-parted (nvidia.com/mig.config) and restart the driver's kubelet plugin.",
        )
    details = []
    if by_mode[NodeMode.STATIC]:
        details.append(
            f"Static MIG (only the MIG devices mig-parted made can be handed out): {listed(by_mode[NodeMode.STATIC])}."
        )
    if by_mode[NodeMode.NO_MIG]:
        details.append(f"No MIG devices (MIG off): {listed(by_mode[NodeMode.NO_MIG])}.")
        return CheckResult(
            "mig",
            title,
            Level.WARN,
            found,
            "The portal hands out MIG devices only: turn on DynamicMIG (or static MIG) on the nodes named, or keep "
            "them out of the portal's pools.",
            tuple(details),
        )
    return CheckResult("mig", title, Level.OK, found, details=tuple(details))


# --- permissions ----------------------------------------------------------------------------------------------


def _by_resource(triples: Iterable[tuple[str, str, str]]) -> list[str]:
    """'pods: create, delete' per resource, in first-seen order."""
    verbs: dict[str, list[str]] = defaultdict(list)
    for group, resource, verb in triples:
        verbs[display_resource(group, resource)].append(verb)
    return [f"{resource}: {', '.join(vs)}" for resource, vs in verbs.items()]


def _who(identity: str) -> str:
    return identity or "the portal's account"


def check_permissions(identity: str) -> CheckResult:
    """A SelfSubjectAccessReview per verb the portal uses, in all namespaces (it makes tenant namespaces as it
    goes, so it needs its verbs cluster-wide: a ClusterRole and a ClusterRoleBinding)."""
    needed = required_verbs()
    missing = [
        (p.group, p.resource, verb)
        for p in PORTAL_PERMISSIONS
        for verb in p.verbs
        # A verb granted on one object only (resourceNames) is asked about that object.
        if not kube.may_i(p.group, p.resource, verb, name=str(getattr(settings, p.named_by)) if p.named_by else "")
    ]
    if missing:
        return CheckResult(
            "permissions",
            "Portal permissions",
            Level.FAIL,
            f"{_who(identity)} may not: {'; '.join(_by_resource(missing))}.",
            "Grant them cluster-wide in the portal's ClusterRole; deploy/control-plane/portal-rbac.yaml lists exactly "
            "what it needs.",
        )
    return CheckResult(
        "permissions",
        "Portal permissions",
        Level.OK,
        f"{_who(identity)} may use all {len(needed)} verbs the portal uses on {len(PORTAL_PERMISSIONS)} resources, "
        "in every namespace.",
    )


def _own_namespace(identity: str) -> str:
    """A service account's namespace (system:serviceaccount:<ns>:<name>), else "default"."""
    parts = identity.split(":")
    if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]:
        return parts[2]
    return "default"


def check_extra_permissions(identity: str, tenant_namespaces: list[kube.NamespaceLabels]) -> CheckResult:
    """SelfSubjectRulesReviews in the portal's own namespace (what it holds cluster-wide, plus that namespace's
    Roles) and in each tenant namespace: anything beyond PORTAL_PERMISSIONS and Kubernetes' baseline (and, where
    they belong, the optional MIG-manager mode's MIG_MANAGER_PERMISSIONS)."""
    needed = set(required_verbs()) | BASELINE
    namespaces = [_own_namespace(identity)]
    namespaces += [n.name for n in tenant_namespaces if n.name not in namespaces][:MAX_RULES_REVIEWS]
    extra: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    incomplete: list[str] = []
    for namespace in namespaces:
        review = kube.review_rules(namespace)
        if review.incomplete:
            incomplete.append(f"{namespace}: {review.evaluation_error or 'incomplete'}")
        seen: set[tuple[str, str, str]] = set()
        allowed = needed | mig_manager_verbs(namespace, settings.FATIA_MIG_MANAGER_NAMESPACE)
        for rule in review.rules:
            for group in rule.groups:
                for resource in rule.resources:
                    for verb in rule.verbs:
                        triple = (group, resource, verb)
                        if triple not in allowed and triple not in seen:
                            seen.add(triple)
                            extra[triple].append(namespace)
    details = []
    if extra:
        everywhere = [t for t, where in extra.items() if len(where) == len(namespaces)]
        somewhere = [t for t, where in extra.items() if len(where) < len(namespaces)]
        details += [f"{line} (in every namespace)" for line in _by_resource(everywhere)]
        details += [f"{display_resource(g, r)}: {v} (in {listed(extra[(g, r, v)])})" for g, r, v in somewhere]
    if incomplete:
        details.append(f"The authorizer could not list every rule, so more may be granted: {listed(incomplete)}.")
    reviewed = f"{plural(len(namespaces), 'namespace')} reviewed"
    if extra:
        return CheckResult(
            "extra-permissions",
            "Extra permissions",
            Level.WARN,
            f"{_who(identity)} may do {plural(len(extra), 'thing')} the portal never does ({reviewed}: "
            f"{listed(namespaces)}).",
            "Take them out of its ClusterRole and RoleBindings: deploy/control-plane/portal-rbac.yaml is all it needs.",
            tuple(details),
        )
    if incomplete:
        return CheckResult(
            "extra-permissions",
            "Extra permissions",
            Level.WARN,
            f"Nothing extra among the rules listed ({reviewed}: {listed(namespaces)}), but the list is incomplete.",
            "An authorizer other than RBAC (a webhook) answers for this account; review its grants there.",
            tuple(details),
        )
    return CheckResult(
        "extra-permissions",
        "Extra permissions",
        Level.OK,
        f"Nothing beyond what the portal needs ({reviewed}: {listed(namespaces)}).",
    )


# --- tenant namespaces and the holder pod --------------------------------------------------------------------


def check_pod_security(namespaces: list[kube.NamespaceLabels]) -> CheckResult:
    level = str(getattr(settings, "FATIA_TENANT_POD_SECURITY", DEFAULT_POD_SECURITY))
    title = "Pod Security"
    if level not in POD_SECURITY_LEVELS:
        return CheckResult(
            "pod-security",
            title,
            Level.FAIL,
            f"FATIA_TENANT_POD_SECURITY is {level!r}, not a Pod Security level.",
            f"Set it to one of {', '.join(POD_SECURITY_LEVELS)} (restricted is the default).",
        )
    if not namespaces:
        return CheckResult(
            "pod-security",
            title,
            Level.OK,
            f"No tenant namespace yet; each one the portal makes is labelled {ENFORCE_LABEL}={level}.",
        )
    wrong = [n for n in namespaces if n.labels.get(ENFORCE_LABEL) != level]
    if wrong:
        return CheckResult(
            "pod-security",
            title,
            Level.WARN,
            f"{len(wrong)} of {len(namespaces)} tenant namespaces do not enforce {level}.",
            f"The portal labels a tenant's namespace when the tenant is onboarded (a quota is set); set a quota again "
            f"or run: kubectl label namespace NAME {ENFORCE_LABEL}={level} --overwrite",
            tuple(f"{n.name}: {n.labels.get(ENFORCE_LABEL) or 'no label'}" for n in wrong[:LISTED])
            + ((f"... and {len(wrong) - LISTED} more",) if len(wrong) > LISTED else ()),
        )
    return CheckResult("pod-security", title, Level.OK, f"Every tenant namespace ({len(namespaces)}) enforces {level}.")


# The RoleBindings a tenant's namespace must hold: the members' two, and in a namespace it owns the portal's own.
MEMBER_BINDINGS = frozenset({namespace_rbac.MEMBER_NAME, kube.MEMBER_WORKLOADS_BINDING})
OWNED_BINDINGS = MEMBER_BINDINGS | {namespace_rbac.PORTAL_BINDING}


def _tenant_namespaces_from_the_database() -> CheckResult:
    """check_tenant_namespaces, which reads the database: before `migrate` (or without a database) a warning."""
    try:
        return check_tenant_namespaces()
    except DatabaseError as exc:
        return CheckResult(
            "tenant-namespaces",
            "Tenant namespaces",
            Level.WARN,
            f"Not checked: the database cannot be read ({exc.__class__.__name__}).",
            "Run the check again once the database is migrated and reachable.",
        )


def check_tenant_namespaces() -> CheckResult:
    """The namespaces the portal manages (those it made and those tenants own, issue 17) as the cluster has them:
    each with its RoleBindings and tenant label; no namespace that left its tenant still holding the portal's
    bindings; no claim of the portal's there that no request wants (reconcile deletes those on its next pass); no
    system namespace (kube-*, where credentials are) owned by a tenant."""
    title = "Tenant namespaces"
    prefix = settings.FATIA_KUBE_NAMESPACE_PREFIX
    owned = dict(TenantNamespace.objects.values_list("name", "tenant__slug"))
    labelled = {n.name: n.labels.get(kube.LABEL_TENANT, "") for n in kube.list_labelled_namespaces()}
    bound: dict[str, set[str]] = defaultdict(set)
    for binding in kube.list_portal_role_bindings():
        bound[binding.namespace].add(binding.name)
    unbound = []
    for name, slug in sorted(owned.items()):
        if labelled.get(name) != slug:
            unbound.append(f"{name} ({slug}): not labelled {kube.LABEL_TENANT}={slug}; its bindings were never made")
        elif missing := sorted(OWNED_BINDINGS - bound[name]):
            unbound.append(f"{name} ({slug}): no RoleBinding {', '.join(missing)}")
    for name in sorted(n for n in labelled if n.startswith(prefix)):
        if missing := sorted(MEMBER_BINDINGS - bound[name]):
            unbound.append(f"{name} (portal-made): no RoleBinding {', '.join(missing)}")
    # Owned since before assign_namespace refused such names: the tenant's members may run pods there as the
    # service accounts of the control plane, the portal, the agent or NVIDIA's drivers.
    system = [f"{name} ({slug})" for name, slug in sorted(owned.items()) if holds_credentials(name)]
    left = sorted(ns for ns in bound if not ns.startswith(prefix) and ns not in owned)
    managed = {n for n in labelled if n.startswith(prefix)} | set(owned)
    claims = [c for c in kube.list_portal_claims() if c.namespace in managed]
    wanted = {
        request: namespace or f"{prefix}{slug}"
        for request, namespace, slug in Allocation.objects.filter(
            uuid__in=_uuids(c.label for c in claims), status__in=CLAIM_WANTED
        ).values_list("uuid", "namespace_name", "tenant__slug")
    }
    orphans = sorted(
        f"{c.namespace}/{c.name}"
        for c, request in ((c, _uuid(c.label)) for c in claims)
        if request is None or wanted.get(request) != c.namespace
    )
    details = []
    if unbound:
        more = f"; and {len(unbound) - LISTED} more" if len(unbound) > LISTED else ""
        details.append(f"Bindings missing: {'; '.join(unbound[:LISTED])}{more}.")
    if left:
        still = [f"{ns} ({', '.join(sorted(bound[ns]))})" for ns in left]
        details.append(f"Left their tenant with the portal's bindings still there: {listed(still)}.")
    if orphans:
        details.append(f"Claims of the portal's that no request wants: {listed(orphans)}.")
    if system:
        details.append(
            f"System namespaces a tenant owns (its members may run pods as their accounts): {listed(system)}."
        )
    found = (
        f"{plural(len(managed), 'namespace')} managed ({plural(len(owned), 'owned by a tenant', 'owned by tenants')})"
    )
    if not details:
        if not managed:
            return CheckResult("tenant-namespaces", title, Level.OK, "No tenant namespace yet.")
        return CheckResult("tenant-namespaces", title, Level.OK, f"{found}: every one bound, no stray claim.")
    return CheckResult(
        "tenant-namespaces",
        title,
        Level.WARN,
        f"{found}: {plural(len(unbound), 'without its bindings', 'without their bindings')}, "
        f"{len(left)} left with bindings, {plural(len(orphans), 'stray claim')}"
        + (f", {plural(len(system), 'system namespace')} owned by a tenant." if system else "."),
        "System namespaces: remove each from its tenant on its namespaces page (new ones are refused). "
        "Missing bindings: assign a tenant's own namespace again on its namespaces page (that applies them again), "
        "or set a quota for a portal-made one's tenant again (onboarding). Left with bindings: kubectl delete "
        "rolebinding fatia-portal fatia-member fatia-member-workloads -n NAMESPACE. Stray claims: the reconcile "
        "pass deletes them within a minute; if they stay, the worker or beat is not running.",
        tuple(details),
    )


def _uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def _uuids(values: Iterable[str]) -> list[uuid.UUID]:
    return [u for u in map(_uuid, values) if u is not None]


@dataclass(frozen=True, slots=True)
class ImageReference:
    registry: str  # "" for a short name
    repository: str
    tag: str
    digest: str


_DOMAIN = re.compile(
    r"^(?:(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
    r"|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?$"
)
_PATH_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST = re.compile(r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[0-9A-Fa-f]{32,}$")


def parse_image_reference(reference: str) -> ImageReference | None:
    """[registry/]repository[:tag][@digest] as container runtimes read it, or None when it is not one. The first
    component is a registry when it has a dot or a port, or is localhost (the runtimes' rule)."""
    rest, at, digest = reference.partition("@")
    if at and not _DIGEST.match(digest):
        return None
    tag = ""
    colon = rest.rfind(":")
    if colon > rest.rfind("/"):
        rest, tag = rest[:colon], rest[colon + 1 :]
        if not _TAG.match(tag):
            return None
    parts = rest.split("/")
    registry = ""
    if len(parts) > 1 and (
        "." in parts[0] or ":" in parts[0] or parts[0] == "localhost" or parts[0] != parts[0].lower()
    ):
        registry = parts.pop(0)
        if not _DOMAIN.match(registry):
            return None
    if not all(_PATH_COMPONENT.match(p) for p in parts):
        return None
    return ImageReference(registry=registry, repository="/".join(parts), tag=tag, digest=digest)


def check_holder_image() -> CheckResult:
    image = str(getattr(settings, "FATIA_HOLDER_IMAGE", DEFAULT_HOLDER_IMAGE))
    title = "Holder image"
    reference = parse_image_reference(image)
    example = f"e.g. {DEFAULT_HOLDER_IMAGE}, or its copy in your mirror"
    if reference is None:
        return CheckResult(
            "holder-image",
            title,
            Level.FAIL,
            f"FATIA_HOLDER_IMAGE {image!r} is not an image reference: the kubelet refuses it (InvalidImageName).",
            f"Set FATIA_HOLDER_IMAGE to registry/repository:tag ({example}).",
        )
    problems = []
    if not reference.registry:
        # containerd resolves a short name on Docker Hub, CRI-O by its own search list or not at all: which image
        # runs depends on the node. Not blocking: the claim is allocated when the pod is scheduled, pulled or not.
        problems.append("names no registry, so each node's container runtime picks one (or refuses it)")
    if not reference.tag and not reference.digest:
        problems.append("has no tag or digest, so it means :latest, which changes under you")
    elif reference.tag == "latest" and not reference.digest:
        problems.append("is :latest, which changes under you")
    if problems:
        return CheckResult(
            "holder-image",
            title,
            Level.WARN,
            f"FATIA_HOLDER_IMAGE {image} {' and '.join(problems)}.",
            f"Name it fully: registry/repository:tag or @sha256 digest ({example}).",
        )
    pinned = f"digest {reference.digest}" if reference.digest else f"tag {reference.tag}"
    return CheckResult(
        "holder-image", title, Level.OK, f"FATIA_HOLDER_IMAGE {image}: registry {reference.registry}, {pinned}."
    )


# --- output ---------------------------------------------------------------------------------------------------


def format_report(report: ClusterReport) -> str:
    """One line per check (level, title, what was found, what to do), details indented below it."""
    who = f" as {report.identity}" if report.identity else ""
    where = report.server or "(no API server configured)"
    lines = [f"Cluster check of {where}{who}, {report.checked_at:%Y-%m-%d %H:%M:%S %Z}", ""]
    width = max((len(r.title) for r in report.results), default=0)
    for r in report.results:
        todo = f" -> {r.action}" if r.action else ""
        lines.append(f"{r.level:<4}  {r.title:<{width}}  {r.found}{todo}")
        lines += [f"{'':<4}  {'':<{width}}    {d}" for d in r.details]
    fails, warnings = report.count(Level.FAIL), report.count(Level.WARN)
    lines += [
        "",
        f"{report.level}: {plural(fails, 'blocking problem')}, {plural(warnings, 'warning')}.",
    ]
    return "\n".join(lines)
