"""The Kubernetes adapter: plain functions, dataclasses in and out, no ORM.

Everything the workers do on the cluster goes through here. Writes are Server-Side Apply under the field
manager "fatia" with names derived from our ids, so repeating a call is harmless; deletes treat 404 as done.
Every call has an explicit timeout. Kubernetes errors become `KubeUnavailable` (retry later: 5xx, 429,
timeouts, an unreachable API, and the two admission refusals that only mean "not ready yet") or
`KubeRejected` (4xx: the request itself is wrong) here and nowhere else.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import urllib3
import yaml
from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

logger = logging.getLogger(__name__)

FIELD_MANAGER = "fatia"
DRIVER = "gpu.nvidia.com"
MIG_DEVICE_CLASS = "mig.nvidia.com"
LABEL_ALLOCATION = "fatia.io/allocation"
LABEL_TENANT = "fatia.io/tenant"
# On every namespace whose claims the portal manages: the claim admission policy's namespace selector (issue 17).
LABEL_MANAGED = "fatia.io/managed"
APPLY = "application/apply-patch+yaml"

# The quota admission plugin refuses objects in a namespace whose new ResourceQuota the controller has not
# counted yet, and the ServiceAccount plugin refuses pods until the namespace's default account exists. Both
# answer 403 but clear up by themselves within seconds of onboarding, so they are retryable.
_NOT_READY_YET = (re.compile(r"status unknown for quota"), re.compile(r"serviceaccount .* not found", re.IGNORECASE))

# An API server that has just restarted can answer 403 to the portal's own ServiceAccount for a while after its
# /readyz says ok (its RBAC caches are still filling; seen on the local control plane under load). A 403 of the RBAC
# shape within FATIA_KUBE_RESTART_GRACE_S of the API having been unreachable is the outage's tail and retried; later
# it is a real refusal. The moment is kept in the shared cache, so every worker process knows of the outage.
_RBAC_REFUSAL = re.compile(r'is forbidden: User ".*" cannot ')
_UNREACHABLE_AT_KEY = "fatia:kube:unreachable-at"

T = TypeVar("T")


class KubeError(Exception):
    """Base of the adapter's errors; `status` is the HTTP status (0 when the API was not reached)."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class KubeUnavailable(KubeError):
    """Retryable: the API server failed, timed out, could not be reached, or is not ready for this yet."""


class KubeRejected(KubeError):
    """Terminal: the API server refused the request (4xx); repeating it will not help."""


# --- what goes in -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TenantSpec:
    """A tenant's namespace: members (a group) may use claims there but not create them; `max_devices`
    bounds the MIG devices claimed in it (a ResourceQuota, the fence behind the portal's own quota)."""

    namespace: str
    tenant_slug: str
    member_group: str
    max_devices: int
    device_class: str = MIG_DEVICE_CLASS
    # The Pod Security Standard level the namespace enforces, audits and warns about (FATIA_TENANT_POD_SECURITY).
    pod_security: str = "restricted"
    # The ClusterRole of the members' workload rights (FATIA_KUBE_MEMBER_ROLE), bound in the namespace; "" binds none.
    member_role: str = ""


@dataclass(frozen=True, slots=True)
class DeviceRequestSpec:
    """One MIG device of `profile` on the GPU whose UUID is `gpu_uuid` (the MIG devices' parentUUID);
    an empty `gpu_uuid` leaves the GPU to the scheduler (bench/provision.py compares the two). Static MIG:
    `mig_uuid` pins the one pre-created MIG device (its `uuid` attribute), so the slot is ours, not first fit."""

    name: str
    profile: str
    gpu_uuid: str
    mig_uuid: str = ""
    # A share of a whole GPU (shared and MPS pools): the GPU pinned by its `uuid`, this much of its `memory`
    # capacity requested (DRA consumable capacity); `profile` is not selected on then.
    memory_mib: int | None = None


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    namespace: str
    name: str
    allocation_uuid: str
    tenant_slug: str
    requests: tuple[DeviceRequestSpec, ...]
    device_class: str = MIG_DEVICE_CLASS
    # The driver's opaque configuration for every request (NVIDIA's GpuConfig: time-slicing or MPS settings).
    gpu_config: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class HolderPodSpec:
    """A pause pod on `node_name` (any node when empty) that references the claims, so that kube-scheduler
    allocates them now, all together or none (a pod's claims are allocated in one go). `tolerations` let it
    onto nodes with taints (its pool's, NodePool.tolerations)."""

    namespace: str
    name: str
    claim_names: tuple[str, ...]
    node_name: str
    allocation_uuid: str
    tenant_slug: str
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True)
class SteeringSpec:
    """DeviceTaintRules that keep every claim off `devices` (of the driver's pool `pool`: the node) while the
    claim of allocation `allocation_uuid` waits, so that the scheduler, walking the devices in order, takes the
    slot after them. The claim does not tolerate them either; they are deleted once it is allocated."""

    rule_prefix: str
    allocation_uuid: str
    tenant_slug: str
    pool: str
    devices: tuple[str, ...]


# --- what comes out ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    request: str
    driver: str
    pool: str
    device: str
    # Consumable capacity (a device that allows multiple allocations): which share of the device this is, and
    # the memory it consumed there (MiB; None when the device is not shared).
    share_id: str = ""
    consumed_memory_mib: int | None = None


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    """A claim's status.allocation as kube-scheduler wrote it: the node and the devices."""

    node_name: str
    devices: tuple[AllocatedDevice, ...]


@dataclass(frozen=True, slots=True)
class ClaimState:
    """A claim as listed for reconciling; `allocation` is None while it is unallocated."""

    namespace: str
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    allocation: ClaimAllocation | None = None
    deleting: bool = False
    # "<request>: <CEL expression>" per selector, in order: enough to tell our spec from another one.
    selectors: tuple[str, ...] = ()


# --- the client -------------------------------------------------------------------------------------------

_lock = threading.Lock()
_clients: dict[str, client.ApiClient] = {}


# The cache key of the client built from the pod's ServiceAccount (an empty FATIA_KUBECONFIG in a pod).
IN_CLUSTER = "in-cluster"


def in_cluster() -> bool:
    """True in a pod: the kubelet sets KUBERNETES_SERVICE_HOST in every container's environment."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def api_client() -> client.ApiClient:
    """One client per kubeconfig path and process (it holds a connection pool).

    An empty FATIA_KUBECONFIG in a pod means the pod's own ServiceAccount (the Helm chart's way): the mounted token,
    which the kubelet rotates and the loader re-reads, and the cluster's CA."""
    path = settings.FATIA_KUBECONFIG
    if not path and not in_cluster():
        raise ImproperlyConfigured(
            "FATIA_CLUSTER_BACKEND is 'kubernetes' but FATIA_KUBECONFIG is not set and this is not a pod."
        )
    key = path or IN_CLUSTER
    with _lock:
        if key not in _clients:
            configuration = client.Configuration()
            try:
                if path:
                    config.load_kube_config(  # type: ignore[no-untyped-call]
                        config_file=path, client_configuration=configuration, persist_config=False
                    )
                else:
                    config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            except (config.ConfigException, OSError, yaml.YAMLError) as exc:
                # Retryable like an unreachable API: an operator fixes the file (or its secret mount) and the
                # tasks' next try goes through; until then every request says why it waits.
                where = f"the kubeconfig {path}" if path else "the pod's ServiceAccount"
                raise KubeUnavailable(f"{where} cannot be used: {exc}") from exc
            # The tasks retry with backoff (allocations/tasks.py); urllib3's own retries would only multiply
            # every timeout before the task even hears of the failure.
            configuration.retries = 0
            _clients[key] = client.ApiClient(configuration)
        return _clients[key]


def _timeout() -> tuple[float, float]:
    return (float(settings.FATIA_KUBE_CONNECT_TIMEOUT_S), float(settings.FATIA_KUBE_READ_TIMEOUT_S))


def _message(exc: ApiException) -> str:
    try:
        body = json.loads(exc.body or "")
    except (TypeError, ValueError):
        body = None
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])
    return f"{exc.status} {exc.reason}"


def _note_unreachable() -> None:
    try:
        cache.set(_UNREACHABLE_AT_KEY, time.time(), timeout=settings.FATIA_KUBE_RESTART_GRACE_S)
    except Exception as exc:  # noqa: BLE001 - the cache is a hint; the error being mapped matters more
        logger.debug("could not note the Kubernetes API outage in the cache: %s", exc)


def _recently_unreachable() -> bool:
    try:
        return cache.get(_UNREACHABLE_AT_KEY) is not None
    except Exception:  # noqa: BLE001
        return False


@contextmanager
def _mapped(what: str) -> Iterator[None]:
    try:
        yield
    except ApiException as exc:
        status = int(exc.status or 0)
        message = f"{what}: {_message(exc)}"
        if status == 0 or status >= 500:
            _note_unreachable()
        if status == 0 or status == 429 or status >= 500:
            raise KubeUnavailable(message, status=status) from exc
        if status == 403 and any(p.search(message) for p in _NOT_READY_YET):
            raise KubeUnavailable(message, status=status) from exc
        if status == 403 and _RBAC_REFUSAL.search(message) and _recently_unreachable():
            raise KubeUnavailable(f"{message} (the API server came back moments ago)", status=status) from exc
        raise KubeRejected(message, status=status) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        _note_unreachable()
        raise KubeUnavailable(f"{what}: the Kubernetes API is unreachable ({exc.__class__.__name__})") from exc


def _call(what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    with _mapped(what):
        return fn(*args, _request_timeout=_timeout(), **kwargs)


def _delete(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    try:
        _call(what, fn, *args, **kwargs)
    except KubeRejected as exc:
        if exc.status != 404:
            raise


def _apply(what: str, fn: Callable[..., Any], *args: Any, body: dict[str, Any]) -> None:
    _call(what, fn, *args, body=body, field_manager=FIELD_MANAGER, force=True, _content_type=APPLY)


def _labels(allocation_uuid: str | None, tenant_slug: str) -> dict[str, str]:
    labels = {LABEL_TENANT: tenant_slug}
    if allocation_uuid:
        labels[LABEL_ALLOCATION] = allocation_uuid
    return labels


# --- tenants ----------------------------------------------------------------------------------------------


def ensure_tenant_namespace(spec: TenantSpec) -> None:
    """Namespace (with its Pod Security labels), a Role and RoleBinding for the tenant's members, and the DRA
    ResourceQuota. Idempotent."""
    api = api_client()
    core = client.CoreV1Api(api)
    rbac = client.RbacAuthorizationV1Api(api)
    labels = _labels(None, spec.tenant_slug)
    _apply(
        f"namespace {spec.namespace}",
        core.patch_namespace,
        spec.namespace,
        body={
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": spec.namespace,
                "labels": labels | {LABEL_MANAGED: "true"} | pod_security_labels(spec.pod_security),
            },
        },
    )
    meta = {"name": "fatia-member", "namespace": spec.namespace, "labels": labels}
    _apply(
        f"role {spec.namespace}/fatia-member",
        rbac.patch_namespaced_role,
        "fatia-member",
        spec.namespace,
        body={
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": [
                # Use the portal's claims in pod specs; creating or changing claims is the portal's job.
                {
                    "apiGroups": ["resource.k8s.io"],
                    "resources": ["resourceclaims"],
                    "verbs": ["get", "list", "watch"],
                },
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "create", "delete"]},
            ],
        },
    )
    _apply(
        f"rolebinding {spec.namespace}/fatia-member",
        rbac.patch_namespaced_role_binding,
        "fatia-member",
        spec.namespace,
        body={
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "fatia-member"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": spec.member_group}],
        },
    )
    if spec.member_role:
        apply_member_workloads_binding(spec.namespace, labels, spec.member_group, spec.member_role)
    _apply(
        f"resourcequota {spec.namespace}/fatia-devices",
        core.patch_namespaced_resource_quota,
        "fatia-devices",
        spec.namespace,
        body={
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "fatia-devices", "namespace": spec.namespace, "labels": labels},
            "spec": {"hard": {quota_resource_name(spec.device_class): str(spec.max_devices)}},
        },
    )


MEMBER_WORKLOADS_BINDING = "fatia-member-workloads"


def apply_member_workloads_binding(namespace: str, labels: dict[str, str], member_group: str, role: str) -> None:
    """Bind the member group, in this namespace only, to the ClusterRole of workload rights (permissions.py,
    MEMBER_WORKLOAD_RULES). The portal holds none of those verbs; RBAC lets it make this binding because it may
    `bind` that one ClusterRole. A RoleBinding of its own, beside `fatia-member`: a roleRef cannot change."""
    rbac = client.RbacAuthorizationV1Api(api_client())
    _apply(
        f"rolebinding {namespace}/{MEMBER_WORKLOADS_BINDING}",
        rbac.patch_namespaced_role_binding,
        MEMBER_WORKLOADS_BINDING,
        namespace,
        body={
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": MEMBER_WORKLOADS_BINDING, "namespace": namespace, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": member_group}],
        },
    )


def quota_resource_name(device_class: str) -> str:
    """The ResourceQuota key counting the devices of a class (dra-mig.md §2)."""
    return f"{device_class}.deviceclass.resource.k8s.io/devices"


# --- claims and holder pods -------------------------------------------------------------------------------


def mib_quantity(mib: int) -> str:
    """MiB as the API server writes a quantity back (canonical form: 4096Mi is stored as 4Gi)."""
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def _request_selectors(r: DeviceRequestSpec) -> list[dict[str, Any]]:
    attrs = f"device.attributes['{DRIVER}']"
    if r.memory_mib is not None:  # a share of a whole GPU: the GPU itself is the device
        return [{"cel": {"expression": f"{attrs}.uuid == '{r.gpu_uuid}'"}}]
    return [
        {"cel": {"expression": f"{attrs}.profile == '{r.profile}'"}},
        *([{"cel": {"expression": f"{attrs}.parentUUID == '{r.gpu_uuid}'"}}] if r.gpu_uuid else []),
        *([{"cel": {"expression": f"{attrs}.uuid == '{r.mig_uuid}'"}}] if r.mig_uuid else []),
    ]


def _exactly(r: DeviceRequestSpec, device_class: str) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "selectors": _request_selectors(r)}
    if r.memory_mib is not None:
        exactly["capacity"] = {"requests": {"memory": mib_quantity(r.memory_mib)}}
    return exactly


def claim_body(spec: ClaimSpec) -> dict[str, Any]:
    devices: dict[str, Any] = {
        "requests": [{"name": r.name, "exactly": _exactly(r, spec.device_class)} for r in spec.requests]
    }
    if spec.gpu_config is not None:
        devices["config"] = [
            {"requests": [r.name for r in spec.requests], "opaque": {"driver": DRIVER, "parameters": spec.gpu_config}}
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": spec.name,
            "namespace": spec.namespace,
            "labels": _labels(spec.allocation_uuid, spec.tenant_slug),
        },
        "spec": {"devices": devices},
    }


def apply_resource_claim(spec: ClaimSpec) -> None:
    """Create or confirm the claim. Its spec is immutable: an existing claim with another spec is a 422."""
    api = client.ResourceV1Api(api_client())
    _apply(
        f"resourceclaim {spec.namespace}/{spec.name}",
        api.patch_namespaced_resource_claim,
        spec.name,
        spec.namespace,
        body=claim_body(spec),
    )


STEER_TAINT_KEY = "fatia.io/steered"


def apply_steering(spec: SteeringSpec) -> None:
    """One DeviceTaintRule per device (a rule selects one device). Idempotent."""
    api = client.ResourceV1Api(api_client())
    for device in spec.devices:
        name = f"{spec.rule_prefix}-{device}"
        _apply(
            f"devicetaintrule {name}",
            api.patch_device_taint_rule,
            name,
            body={
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceTaintRule",
                "metadata": {"name": name, "labels": _labels(spec.allocation_uuid, spec.tenant_slug)},
                "spec": {
                    "deviceSelector": {"driver": DRIVER, "pool": spec.pool, "device": device},
                    "taint": {"key": STEER_TAINT_KEY, "value": spec.allocation_uuid, "effect": "NoSchedule"},
                },
            },
        )


def delete_steering(allocation_uuid: str) -> None:
    """Delete the allocation's DeviceTaintRules (none is fine)."""
    api = client.ResourceV1Api(api_client())
    _call(
        "devicetaintrules",
        api.delete_collection_device_taint_rule,
        label_selector=f"{LABEL_ALLOCATION}={allocation_uuid}",
    )


def list_steering() -> set[str]:
    """The allocation uuids that have DeviceTaintRules of ours; none where the API server does not serve
    DeviceTaintRules (before they reached resource.k8s.io/v1), so reconcile runs there too with steering off."""
    api = client.ResourceV1Api(api_client())
    try:
        listed = _call("devicetaintrules", api.list_device_taint_rule, label_selector=LABEL_ALLOCATION)
    except KubeRejected as exc:
        if exc.status == 404:
            return set()
        raise
    return {
        r.metadata.labels[LABEL_ALLOCATION]
        for r in listed.items
        if r.metadata is not None and r.metadata.labels and LABEL_ALLOCATION in r.metadata.labels
    }


def holder_pod_body(spec: HolderPodSpec) -> dict[str, Any]:
    """The pause pod that holds the claims: FATIA_HOLDER_IMAGE, tiny resources, a securityContext that the
    Pod Security Standard `restricted` admits, no service account token, FATIA_HOLDER_PRIORITY_CLASS if set."""
    # One claim keeps the pod-level name "gpu" that pods made before claims were split have.
    refs = ["gpu"] if len(spec.claim_names) == 1 else [f"gpu-{k}" for k in range(len(spec.claim_names))]
    priority_class = settings.FATIA_HOLDER_PRIORITY_CLASS
    # HOLDER_UID unless FATIA_HOLDER_RUN_AS_USER says otherwise; None leaves it to the platform (OpenShift's SCC).
    uid: int | None = settings.FATIA_HOLDER_RUN_AS_USER
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": spec.name,
            "namespace": spec.namespace,
            "labels": _labels(spec.allocation_uuid, spec.tenant_slug),
        },
        "spec": {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 0,
            **({"nodeSelector": {"kubernetes.io/hostname": spec.node_name}} if spec.node_name else {}),
            **({"priorityClassName": priority_class} if priority_class else {}),
            **({"tolerations": [toleration_body(t) for t in spec.tolerations]} if spec.tolerations else {}),
            "securityContext": {
                "runAsNonRoot": True,
                **({"runAsUser": uid, "runAsGroup": uid} if uid is not None else {}),
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "hold",
                    "image": settings.FATIA_HOLDER_IMAGE,
                    "resources": {
                        "requests": dict(HOLDER_RESOURCES),
                        "limits": dict(HOLDER_RESOURCES),
                        "claims": [{"name": ref} for ref in refs],
                    },
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                        "readOnlyRootFilesystem": True,
                    },
                }
            ],
            "resourceClaims": [
                {"name": ref, "resourceClaimName": claim} for ref, claim in zip(refs, spec.claim_names, strict=True)
            ],
        },
    }


def apply_holder_pod(spec: HolderPodSpec) -> None:
    api = client.CoreV1Api(api_client())
    _apply(
        f"pod {spec.namespace}/{spec.name}",
        api.patch_namespaced_pod,
        spec.name,
        spec.namespace,
        body=holder_pod_body(spec),
    )


def _allocation_of(status: Any) -> ClaimAllocation | None:
    allocation = getattr(status, "allocation", None) if status is not None else None
    if allocation is None or allocation.devices is None:
        return None
    node = ""
    selector = allocation.node_selector
    for term in (selector.node_selector_terms if selector else None) or []:
        for match in term.match_fields or []:
            if match.key == "metadata.name" and match.values:
                node = match.values[0]
    devices = tuple(
        AllocatedDevice(
            request=r.request,
            driver=r.driver,
            pool=r.pool,
            device=r.device,
            share_id=r.share_id or "",
            consumed_memory_mib=consumed_memory_mib(r.consumed_capacity),
        )
        for r in allocation.devices.results or []
    )
    return ClaimAllocation(node_name=node, devices=devices)


def consumed_memory_mib(consumed: dict[str, Any] | None) -> int | None:
    """The `memory` of a result's consumedCapacity in MiB (rounded up), None when it has none."""
    value = (consumed or {}).get("memory")
    if value is None:
        return None
    return -(-quantity(str(value)) // (1 << 20))


def read_claim(namespace: str, name: str) -> ClaimState | None:
    """The claim with its allocation (None while unallocated), or None when there is no such claim."""
    api = client.ResourceV1Api(api_client())
    try:
        claim = _call(f"resourceclaim {namespace}/{name}", api.read_namespaced_resource_claim, name, namespace)
    except KubeRejected as exc:
        if exc.status == 404:
            return None
        raise
    return _claim_state(claim)


def _claim_state(claim: Any) -> ClaimState:
    meta = claim.metadata
    selectors = []
    for request in (claim.spec.devices.requests if claim.spec and claim.spec.devices else None) or []:
        exactly = request.exactly
        for selector in (exactly.selectors if exactly else None) or []:
            if selector.cel is not None:
                selectors.append(f"{request.name}: {selector.cel.expression}")
    return ClaimState(
        namespace=meta.namespace,
        name=meta.name,
        labels=dict(meta.labels or {}),
        allocation=_allocation_of(claim.status),
        deleting=meta.deletion_timestamp is not None,
        selectors=tuple(selectors),
    )


def claim_selectors(spec: ClaimSpec) -> tuple[str, ...]:
    """What ClaimState.selectors reads back from a claim applied from `spec`."""
    requests = claim_body(spec)["spec"]["devices"]["requests"]
    return tuple(f"{r['name']}: {s['cel']['expression']}" for r in requests for s in r["exactly"]["selectors"])


def delete_holder_pod(namespace: str, name: str) -> None:
    api = client.CoreV1Api(api_client())
    _delete(f"pod {namespace}/{name}", api.delete_namespaced_pod, name, namespace, grace_period_seconds=0)


def delete_resource_claim(namespace: str, name: str) -> None:
    api = client.ResourceV1Api(api_client())
    _delete(
        f"resourceclaim {namespace}/{name}",
        api.delete_namespaced_resource_claim,
        name,
        namespace,
        grace_period_seconds=0,
    )


def list_claims(label_selector: str) -> list[ClaimState]:
    """Every claim in every namespace matching the selector, e.g. "fatia.io/allocation" (ours)."""
    api = client.ResourceV1Api(api_client())
    listed = _call("resourceclaims", api.list_resource_claim_for_all_namespaces, label_selector=label_selector)
    return [_claim_state(c) for c in listed.items if c.metadata is not None and c.metadata.name]


def list_holder_pods(label_selector: str) -> list[HolderPodState]:
    """Every pod in every namespace matching the selector, with its phase."""
    api = client.CoreV1Api(api_client())
    listed = _call("pods", api.list_pod_for_all_namespaces, label_selector=label_selector)
    return [_pod_state(p) for p in listed.items if p.metadata is not None and p.metadata.name and p.metadata.namespace]


def list_node_names() -> set[str]:
    """The names of the cluster's nodes."""
    api = client.CoreV1Api(api_client())
    listed = _call("nodes", api.list_node)
    return {n.metadata.name for n in listed.items if n.metadata is not None and n.metadata.name}


# --- holder -----------------------------------------------------------------------------------------------

#: The pause image's own user (its Dockerfile says USER 65535:65535): not root, as `restricted` requires; the
#: default of FATIA_HOLDER_RUN_AS_USER.
HOLDER_UID = 65535
#: Requests equal to limits: the Guaranteed QoS class, which the kubelet evicts last under node pressure. The
#: pause process needs well under a MiB; the memory leaves room for the runtime's start-up in its cgroup.
HOLDER_RESOURCES = {"cpu": "10m", "memory": "32Mi"}
POD_SECURITY_MODES = ("enforce", "audit", "warn")
TOLERATION_OPERATORS = ("Exists", "Equal")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
#: Pod phases after which no container runs again: an evicted holder pod ends Failed, and a claim whose only
#: consumer has ended is deallocated by kube-controller-manager, so the pod must be replaced.
ENDED_PHASES = ("Failed", "Succeeded")


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration (core/v1 Toleration); empty fields are left out of the body. An empty key with
    operator Exists tolerates every taint."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class HolderPodState:
    """A holder pod as listed: `phase` is status.phase ("" before the API server set one), `reason` e.g.
    "Evicted"."""

    namespace: str
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    phase: str = ""
    reason: str = ""
    deleting: bool = False  # deletionTimestamp set: on its way out

    @property
    def ended(self) -> bool:
        return self.phase in ENDED_PHASES


def pod_security_labels(level: str) -> dict[str, str]:
    """The namespace labels that make the PodSecurity admission plugin enforce, audit and warn about `level`."""
    return {f"pod-security.kubernetes.io/{mode}": level for mode in POD_SECURITY_MODES}


def toleration_body(t: Toleration) -> dict[str, Any]:
    body: dict[str, Any] = {"operator": t.operator}
    if t.key:
        body["key"] = t.key
    if t.value:
        body["value"] = t.value
    if t.effect:
        body["effect"] = t.effect
    if t.toleration_seconds is not None:
        body["tolerationSeconds"] = t.toleration_seconds
    return body


def _pod_state(pod: Any) -> HolderPodState:
    status = pod.status
    return HolderPodState(
        namespace=pod.metadata.namespace,
        name=pod.metadata.name,
        labels=dict(pod.metadata.labels or {}),
        phase=(status.phase if status is not None else None) or "",
        reason=(status.reason if status is not None else None) or "",
        deleting=pod.metadata.deletion_timestamp is not None,
    )


def read_holder_pod(namespace: str, name: str) -> HolderPodState | None:
    """The pod with its phase, or None when there is no such pod."""
    api = client.CoreV1Api(api_client())
    try:
        pod = _call(f"pod {namespace}/{name}", api.read_namespaced_pod, name, namespace)
    except KubeRejected as exc:
        if exc.status == 404:
            return None
        raise
    return _pod_state(pod)


# --- check_cluster: what `manage.py check_cluster` asks the cluster (allocations/cluster/checks.py) -----------


@dataclass(frozen=True, slots=True)
class ServerVersion:
    """The API server's /version: `git_version` as it says it ("v1.37.2", "v1.34.1-eks-…"), and the minor
    version parsed from it (0 when it cannot be)."""

    git_version: str
    major: int
    minor: int


@dataclass(frozen=True, slots=True)
class SliceDevice:
    """One device of a ResourceSlice, reduced to what the check needs."""

    name: str
    type: str  # the driver's `type` attribute: gpu, mig, vfio
    consumes_counters: bool  # DynamicMIG devices draw on a shared counter set; static MIG devices do not
    has_uuid: bool  # a MIG device has a uuid only when it exists already (static MIG), not as a DynamicMIG spec
    driver_version: str


@dataclass(frozen=True, slots=True)
class SliceSummary:
    """A ResourceSlice of one driver: its pool (a node, for NVIDIA's driver), the pool's generation and slice
    count, and its devices."""

    name: str
    node_name: str
    pool: str
    generation: int
    pool_slice_count: int
    shared_counter_sets: int
    devices: tuple[SliceDevice, ...]


@dataclass(frozen=True, slots=True)
class ResourceRule:
    """A rule of a SelfSubjectRulesReview; "*" stands for every group, resource or verb."""

    groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    resource_names: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RulesReview:
    namespace: str
    rules: tuple[ResourceRule, ...]
    incomplete: bool
    evaluation_error: str


@dataclass(frozen=True, slots=True)
class NamespaceLabels:
    name: str
    labels: dict[str, str]


def api_server_url() -> str:
    """The API server the portal's kubeconfig names (no request is made)."""
    return str(_client_for_check().configuration.host)


def _client_for_check() -> client.ApiClient:
    """api_client(), with an unreadable kubeconfig as ImproperlyConfigured instead of the loader's own errors."""
    if not settings.FATIA_KUBECONFIG and not in_cluster():
        raise ImproperlyConfigured("FATIA_KUBECONFIG is not set: no cluster to check.")
    try:
        return api_client()
    except (KubeUnavailable, config.ConfigException, OSError, ValueError, TypeError) as exc:
        path = settings.FATIA_KUBECONFIG
        where = f"FATIA_KUBECONFIG ({path})" if path else "The pod's ServiceAccount"
        raise ImproperlyConfigured(f"{where} cannot be read: {exc.__class__.__name__}: {exc}") from exc


_VERSION = re.compile(r"^v?(\d+)\.(\d+)")


_CONNECTION_PREFIX = re.compile(r"^\w*Connection\w*\(.*?\): ")


def read_server_version() -> ServerVersion:
    """/version, the first call of a check: an unreachable server is reported with the network's own reason
    (refused, timed out, certificate), which `_mapped` leaves out."""
    api = client.VersionApi(_client_for_check())
    with _mapped("version"):
        try:
            info = api.get_code(_request_timeout=_timeout())
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            reason = getattr(exc, "reason", None) or exc
            detail = _CONNECTION_PREFIX.sub("", str(reason)) or reason.__class__.__name__
            raise KubeUnavailable(f"{api.api_client.configuration.host} is unreachable: {detail}") from exc
    git_version = str(info.git_version or "")
    match = _VERSION.match(git_version)
    if match is None:
        return ServerVersion(git_version=git_version, major=0, minor=0)
    return ServerVersion(git_version=git_version, major=int(match[1]), minor=int(match[2]))


def served_group_versions(group: str) -> tuple[str, ...]:
    """The versions of an API group the server serves (none when it does not serve the group)."""
    api = client.ApisApi(_client_for_check())
    listed = _call("api groups", api.get_api_versions)
    for entry in listed.groups or []:
        if entry.name == group:
            return tuple(str(v.version) for v in entry.versions or [])
    return ()


def served_resource_v1_resources() -> tuple[str, ...]:
    """The resources resource.k8s.io/v1 serves (resourceclaims, devicetaintrules, ...)."""
    api = client.ResourceV1Api(_client_for_check())
    listed = _call("resource.k8s.io/v1 resources", api.get_api_resources)
    return tuple(str(r.name) for r in listed.resources or [])


def list_device_class_names() -> tuple[str, ...]:
    api = client.ResourceV1Api(_client_for_check())
    listed = _call("deviceclasses", api.list_device_class)
    return tuple(sorted(str(c.metadata.name) for c in listed.items if c.metadata is not None and c.metadata.name))


def list_node_names_with_label(label_selector: str) -> tuple[str, ...]:
    """The nodes matching a label selector, e.g. GPU feature discovery's "nvidia.com/gpu.present=true"."""
    api = client.CoreV1Api(_client_for_check())
    listed = _call("nodes", api.list_node, label_selector=label_selector)
    return tuple(sorted(n.metadata.name for n in listed.items if n.metadata is not None and n.metadata.name))


SLICE_PAGE = 200


def list_driver_slices(driver: str) -> list[SliceSummary]:
    """Every ResourceSlice of `driver`, read in pages of raw JSON: a large fleet publishes hundreds of MB of
    slices, and building the client's models for all of them would cost minutes and gigabytes."""
    api = client.ResourceV1Api(_client_for_check())
    summaries: list[SliceSummary] = []
    token: str | None = None
    while True:
        # Any: with _preload_content=False the client returns the raw HTTP response, not the annotated list.
        response: Any = _call(
            "resourceslices",
            api.list_resource_slice,
            field_selector=f"spec.driver={driver}",
            limit=SLICE_PAGE,
            _continue=token,
            _preload_content=False,
        )
        page = json.loads(response.data)
        summaries += [_slice_summary(item, driver) for item in page.get("items") or []]
        token = (page.get("metadata") or {}).get("continue") or None
        if token is None:
            return summaries


def _slice_summary(item: dict[str, Any], driver: str) -> SliceSummary:
    spec = item.get("spec") or {}
    pool = spec.get("pool") or {}
    devices = []
    for device in spec.get("devices") or []:
        attributes = device.get("attributes") or {}
        devices.append(
            SliceDevice(
                name=str(device.get("name", "")),
                type=str((attributes.get("type") or {}).get("string", "")),
                consumes_counters=bool(device.get("consumesCounters")),
                has_uuid="uuid" in attributes,
                driver_version=str((attributes.get("driverVersion") or {}).get("version", "")),
            )
        )
    return SliceSummary(
        name=str((item.get("metadata") or {}).get("name", "")),
        node_name=str(spec.get("nodeName") or ""),
        pool=str(pool.get("name", "")),
        generation=int(pool.get("generation", 0)),
        pool_slice_count=int(pool.get("resourceSliceCount", 0)),
        shared_counter_sets=len(spec.get("sharedCounters") or []),
        devices=tuple(devices),
    )


def who_am_i() -> str:
    """The user name the API server sees for the portal's credentials (SelfSubjectReview); "" if it won't say."""
    api = client.AuthenticationV1Api(_client_for_check())
    try:
        review = _call(
            "selfsubjectreview",
            api.create_self_subject_review,
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
    except KubeRejected:
        return ""
    user = review.status.user_info if review.status is not None else None
    return str(user.username or "") if user is not None else ""


def may_i(group: str, resource: str, verb: str, namespace: str = "", name: str = "") -> bool:
    """SelfSubjectAccessReview: may the portal's identity do `verb` on `resource` (the object `name`, or any)? An
    empty namespace means in every namespace (the portal makes tenant namespaces as it goes, so it needs its verbs
    cluster-wide)."""
    api = client.AuthorizationV1Api(_client_for_check())
    resource_name, _, subresource = resource.partition("/")
    attributes = {"group": group, "resource": resource_name, "verb": verb, "namespace": namespace}
    if name:
        attributes["name"] = name
    if subresource:
        attributes["subresource"] = subresource
    review = _call(
        f"selfsubjectaccessreview {verb} {resource}",
        api.create_self_subject_access_review,
        body={
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        },
    )
    return bool(review.status is not None and review.status.allowed)


def review_rules(namespace: str) -> RulesReview:
    """SelfSubjectRulesReview in `namespace`: the cluster-wide rules and that namespace's. The API server
    wants a namespace; a namespace with no RoleBindings shows the cluster-wide rules alone."""
    api = client.AuthorizationV1Api(_client_for_check())
    review = _call(
        f"selfsubjectrulesreview in {namespace}",
        api.create_self_subject_rules_review,
        body={
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectRulesReview",
            "spec": {"namespace": namespace},
        },
    )
    status = review.status
    rules = tuple(
        ResourceRule(
            groups=tuple(r.api_groups or ()),
            resources=tuple(r.resources or ()),
            verbs=tuple(r.verbs or ()),
            resource_names=tuple(r.resource_names or ()),
        )
        for r in (status.resource_rules if status is not None else None) or []
    )
    return RulesReview(
        namespace=namespace,
        rules=rules,
        incomplete=bool(status is not None and status.incomplete),
        evaluation_error=str(status.evaluation_error or "") if status is not None else "",
    )


def list_tenant_namespaces(prefix: str) -> list[NamespaceLabels]:
    """The portal's tenant namespaces: labelled with the tenant and named with the portal's prefix."""
    api = client.CoreV1Api(_client_for_check())
    listed = _call("namespaces", api.list_namespace, label_selector=LABEL_TENANT)
    return sorted(
        (
            NamespaceLabels(name=n.metadata.name, labels=dict(n.metadata.labels or {}))
            for n in listed.items
            if n.metadata is not None and n.metadata.name and n.metadata.name.startswith(prefix)
        ),
        key=lambda n: n.name,
    )


@dataclass(frozen=True, slots=True)
class NamedObject:
    """A namespaced object the check looks at: where, its name, and one label's value ("" when unlabelled)."""

    namespace: str
    name: str
    label: str = ""


def list_labelled_namespaces() -> list[NamespaceLabels]:
    """Every namespace labelled `fatia.io/tenant`: the portal-made ones, those tenants own, and those an admin
    labelled for discovery."""
    api = client.CoreV1Api(_client_for_check())
    listed = _call("namespaces", api.list_namespace, label_selector=LABEL_TENANT)
    return sorted(
        (
            NamespaceLabels(name=n.metadata.name, labels=dict(n.metadata.labels or {}))
            for n in listed.items
            if n.metadata is not None and n.metadata.name
        ),
        key=lambda n: n.name,
    )


def list_portal_role_bindings() -> list[NamedObject]:
    """The RoleBindings the portal made, in every namespace (labelled `fatia.io/tenant`; `label`: the tenant)."""
    api = client.RbacAuthorizationV1Api(_client_for_check())
    listed = _call("rolebindings", api.list_role_binding_for_all_namespaces, label_selector=LABEL_TENANT)
    return [
        NamedObject(b.metadata.namespace, b.metadata.name, (b.metadata.labels or {}).get(LABEL_TENANT, ""))
        for b in listed.items
        if b.metadata is not None and b.metadata.name and b.metadata.namespace
    ]


def list_portal_claims() -> list[NamedObject]:
    """The claims labelled `fatia.io/allocation`, in every namespace (`label`: the allocation's UUID)."""
    api = client.ResourceV1Api(_client_for_check())
    listed = _call("resourceclaims", api.list_resource_claim_for_all_namespaces, label_selector=LABEL_ALLOCATION)
    return [
        NamedObject(c.metadata.namespace, c.metadata.name, (c.metadata.labels or {}).get(LABEL_ALLOCATION, ""))
        for c in listed.items
        if c.metadata is not None and c.metadata.name and c.metadata.namespace
    ]


# --- discovery --------------------------------------------------------------------------------------------
# What fleet discovery (allocations/cluster/discovery.py) reads: Nodes, the `gpu.nvidia.com` ResourceSlices and
# the ResourceClaims allocated from them, listed in pages and then watched from the list's resourceVersion.
# A thousand 8-GPU nodes publish about 400 MB of slices, so responses are read as raw JSON (no client models)
# and each object is cut down to what discovery keeps before the next page is read.

# Device attributes discovery keeps (dra-mig.md §3); the rest is dropped as soon as a page is read.
_DEVICE_ATTRIBUTES = frozenset(
    {"type", "uuid", "parentUUID", "profile", "productName", "driverVersion", "resource.kubernetes.io/pciBusID"}
)
LIST_PAGE_SIZE = 100


class KubeGone(KubeUnavailable):
    """410 Gone: the resourceVersion (or the list's continue token) is older than the API server keeps;
    list again from scratch."""


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    labels: dict[str, str]


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """One device of a ResourceSlice: the attributes discovery uses (strings, versions as strings, ints,
    bools), capacities and consumed counters as integers (memory in bytes)."""

    name: str
    attributes: dict[str, str | int | bool]
    capacity: dict[str, int]
    consumes: tuple[tuple[str, dict[str, int]], ...]  # (counter set, {counter: value})
    # allowMultipleAllocations: several claims may hold the device at once (DRA consumable capacity).
    shareable: bool = False


@dataclass(frozen=True, slots=True)
class SliceInfo:
    name: str
    node_name: str
    pool: str
    generation: int
    slice_count: int
    counter_sets: dict[str, dict[str, int]]
    devices: tuple[DeviceInfo, ...]


@dataclass(frozen=True, slots=True)
class ClaimInfo:
    """A ResourceClaim with the `gpu.nvidia.com` devices it was allocated (none while unallocated)."""

    namespace: str
    name: str
    uid: str
    labels: dict[str, str]
    devices: tuple[AllocatedDevice, ...]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """`kind` is ADDED, MODIFIED, DELETED or BOOKMARK (then `obj` is None); `resource_version` is where to
    resume."""

    kind: str
    obj: NodeInfo | SliceInfo | ClaimInfo | None
    resource_version: str


@functools.lru_cache(maxsize=4096)
def quantity(value: str) -> int:
    """A Kubernetes quantity as an integer ("81152Mi" -> bytes). The same few strings repeat across every
    device of a fleet, hence the cache."""
    return int(parse_quantity(value))  # type: ignore[no-untyped-call]


def _attribute(value: dict[str, Any]) -> str | int | bool | None:
    for kind in ("string", "version", "int", "bool"):
        if kind in value:
            found = value[kind]
            return found if isinstance(found, str | int | bool) else None
    return None


def _counters(raw: dict[str, Any] | None) -> dict[str, int]:
    return {name: quantity(str(c.get("value", "0"))) for name, c in (raw or {}).items() if isinstance(c, dict)}


def node_info(raw: dict[str, Any]) -> NodeInfo:
    meta = raw.get("metadata") or {}
    return NodeInfo(
        name=str(meta.get("name", "")), labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    )


def slice_info(raw: dict[str, Any]) -> SliceInfo:
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    pool = spec.get("pool") or {}
    devices = []
    for device in spec.get("devices") or []:
        attributes = {}
        for key, value in (device.get("attributes") or {}).items():
            if key in _DEVICE_ATTRIBUTES and isinstance(value, dict):
                found = _attribute(value)
                if found is not None:
                    attributes[key] = found
        devices.append(
            DeviceInfo(
                name=str(device.get("name", "")),
                attributes=attributes,
                capacity=_counters(device.get("capacity")),
                consumes=tuple(
                    (str(c.get("counterSet", "")), _counters(c.get("counters")))
                    for c in device.get("consumesCounters") or []
                ),
                shareable=device.get("allowMultipleAllocations") is True,
            )
        )
    return SliceInfo(
        name=str(meta.get("name", "")),
        node_name=str(spec.get("nodeName") or ""),
        pool=str(pool.get("name", "")),
        generation=int(pool.get("generation") or 0),
        slice_count=int(pool.get("resourceSliceCount") or 0),
        counter_sets={str(s.get("name", "")): _counters(s.get("counters")) for s in spec.get("sharedCounters") or []},
        devices=tuple(devices),
    )


def claim_info(raw: dict[str, Any]) -> ClaimInfo:
    meta = raw.get("metadata") or {}
    allocation = (raw.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return ClaimInfo(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        devices=tuple(
            AllocatedDevice(
                request=str(r.get("request", "")),
                driver=DRIVER,
                pool=str(r.get("pool", "")),
                device=str(r.get("device", "")),
                share_id=str(r.get("shareID") or ""),
                consumed_memory_mib=consumed_memory_mib(r.get("consumedCapacity")),
            )
            for r in results
            if r.get("driver") == DRIVER
        ),
    )


@contextmanager
def _mapped_gone(what: str) -> Iterator[None]:
    try:
        with _mapped(what):
            yield
    except KubeRejected as exc:
        if exc.status == 410:
            raise KubeGone(exc.message, status=410) from exc
        raise


def _json_body(response: Any) -> dict[str, Any]:
    try:
        body = json.loads(response.data)
    finally:
        response.release_conn()
    return body if isinstance(body, dict) else {}


def _collection(kind: str) -> tuple[str, Callable[..., Any], dict[str, Any], Callable[[dict[str, Any]], Any]]:
    api = api_client()
    if kind == "nodes":
        return "nodes", client.CoreV1Api(api).list_node, {}, node_info
    if kind == "slices":
        return (
            "resourceslices",
            client.ResourceV1Api(api).list_resource_slice,
            {"field_selector": f"spec.driver={DRIVER}"},
            slice_info,
        )
    if kind == "claims":
        return "resourceclaims", client.ResourceV1Api(api).list_resource_claim_for_all_namespaces, {}, claim_info
    raise ValueError(f"unknown collection {kind!r}")


def list_collection(kind: str, each: Callable[[Any], None], *, page_size: int = LIST_PAGE_SIZE) -> str:
    """List "nodes", "slices" (the gpu.nvidia.com driver's) or "claims" (every namespace) page by page,
    handing each object to `each` as NodeInfo, SliceInfo or ClaimInfo; returns the list's resourceVersion, where
    a watch starts. Raises KubeGone when the continue token expired (list again), KubeUnavailable."""
    what, fn, kwargs, convert = _collection(kind)
    token: str | None = None
    while True:
        with _mapped_gone(what):
            body = _json_body(
                fn(limit=page_size, _continue=token, _preload_content=False, _request_timeout=_timeout(), **kwargs)
            )
        for item in body.get("items") or []:
            if isinstance(item, dict):
                each(convert(item))
        meta = body.get("metadata") or {}
        token = meta.get("continue") or None
        if token is None:
            return str(meta.get("resourceVersion", ""))


def watch_collection(kind: str, resource_version: str, *, timeout_s: int) -> Iterator[WatchEvent]:
    """Watch "nodes", "slices" or "claims" from `resource_version` with bookmarks, for at most `timeout_s`
    (the server ends the watch then; start another from the last event's resourceVersion). Raises KubeGone
    when that resourceVersion is too old (list again), KubeUnavailable when the stream breaks."""
    what, fn, kwargs, convert = _collection(kind)
    connect, read = _timeout()
    with _mapped_gone(what):
        response = fn(
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=resource_version,
            timeout_seconds=timeout_s,
            _preload_content=False,
            # Bookmarks come about once a minute, changes whenever they happen: the read timeout covers the
            # whole watch (the server closes it after timeout_s).
            _request_timeout=(connect, timeout_s + read),
            **kwargs,
        )
    try:
        pending = b""
        with _mapped(what):
            for chunk in response.stream(amt=None, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield _watch_event(what, json.loads(line), convert)
    finally:
        response.release_conn()


def _watch_event(what: str, event: dict[str, Any], convert: Callable[[dict[str, Any]], Any]) -> WatchEvent:
    kind = str(event.get("type", ""))
    raw = event.get("object") or {}
    if kind == "ERROR":
        code = int(raw.get("code") or 0)
        message = f"{what} watch: {raw.get('message', code)}"
        if code == 410:
            raise KubeGone(message, status=410)
        raise KubeUnavailable(message, status=code)
    version = str((raw.get("metadata") or {}).get("resourceVersion", ""))
    return WatchEvent(kind=kind, obj=None if kind == "BOOKMARK" else convert(raw), resource_version=version)


# --- node agents: who holds a ServiceAccount token (allocations/nodeagent/bootstrap.py) -----------------------

# What the API server puts in a TokenReview's user.extra for a token bound to a pod (TokenRequest with a
# boundObjectRef, as a projected serviceAccountToken volume is); the node keys since Kubernetes 1.30.
EXTRA_POD_NAME = "authentication.kubernetes.io/pod-name"
EXTRA_POD_UID = "authentication.kubernetes.io/pod-uid"
EXTRA_NODE_NAME = "authentication.kubernetes.io/node-name"


@dataclass(frozen=True, slots=True)
class TokenIdentity:
    """A TokenReview's answer. `authenticated` False: `error` says why (expired, wrong audience, not a token)."""

    authenticated: bool
    username: str = ""
    audiences: tuple[str, ...] = ()
    extra: dict[str, tuple[str, ...]] = field(default_factory=dict)
    error: str = ""

    def extra_value(self, key: str) -> str:
        values = self.extra.get(key, ())
        return values[0] if len(values) == 1 else ""


@dataclass(frozen=True, slots=True)
class PodPlacement:
    """Where a pod runs: its UID and the node it was bound to ("" while unscheduled)."""

    namespace: str
    name: str
    uid: str
    node_name: str


def review_token(token: str, audience: str) -> TokenIdentity:
    """TokenReview: does the API server accept `token` for `audience`, and whose is it? The portal's identity
    needs `create` on tokenreviews (PORTAL_PERMISSIONS)."""
    api = client.AuthenticationV1Api(api_client())
    review = _call(
        "tokenreview",
        api.create_token_review,
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [audience]},
        },
    )
    status = review.status
    if status is None or not status.authenticated or status.user is None:
        return TokenIdentity(authenticated=False, error=str(getattr(status, "error", "") or ""))
    extra = {str(k): tuple(str(v) for v in (values or ())) for k, values in (status.user.extra or {}).items()}
    return TokenIdentity(
        authenticated=True,
        username=str(status.user.username or ""),
        audiences=tuple(str(a) for a in (status.audiences or ())),
        extra=extra,
    )


def read_pod_placement(namespace: str, name: str) -> PodPlacement | None:
    """The pod's UID and node, or None when there is no such pod."""
    api = client.CoreV1Api(api_client())
    try:
        pod = _call(f"pod {namespace}/{name}", api.read_namespaced_pod, name, namespace)
    except KubeRejected as exc:
        if exc.status == 404:
            return None
        raise
    uid = pod.metadata.uid if pod.metadata is not None else None
    node = pod.spec.node_name if pod.spec is not None else None
    return PodPlacement(namespace=namespace, name=name, uid=str(uid or ""), node_name=str(node or ""))


# --- static MIG: restarting NVIDIA's DRA kubelet plugin on a node (allocations/cluster/reconfigure.py) -----------
# The plugin reads the MIG devices once, at start; after the node agent changed a GPU's layout, deleting the
# plugin's pod on that node makes its DaemonSet start a new one, which publishes the node's pool again under a
# higher generation. Grace period 0: the pod holds nothing to drain, and a control plane without a kubelet (tests)
# would otherwise never finish deleting it.


def restart_dra_plugin(node_name: str) -> int:
    """Delete the DRA kubelet plugin pods on `node_name` (FATIA_DRA_PLUGIN_NAMESPACE, FATIA_DRA_PLUGIN_SELECTOR);
    the number deleted (0: none runs there right now). Raises KubeUnavailable, KubeRejected (no rights)."""
    api = client.CoreV1Api(api_client())
    namespace = settings.FATIA_DRA_PLUGIN_NAMESPACE
    pods = _call(
        f"pods {settings.FATIA_DRA_PLUGIN_SELECTOR} in {namespace}",
        api.list_namespaced_pod,
        namespace,
        label_selector=settings.FATIA_DRA_PLUGIN_SELECTOR,
        field_selector=f"spec.nodeName={node_name}",
    )
    names = [str(getattr(pod.metadata, "name", "")) for pod in pods.items]
    for name in names:
        _delete(f"pod {namespace}/{name}", api.delete_namespaced_pod, name, namespace, grace_period_seconds=0)
    return len(names)


def list_node_slices(node_name: str) -> list[SliceInfo]:
    """The `gpu.nvidia.com` ResourceSlices of one node's pool, as discovery reads them."""
    api = client.ResourceV1Api(api_client())
    with _mapped("resourceslices"):
        body = _json_body(
            api.list_resource_slice(
                field_selector=f"spec.driver={DRIVER},spec.nodeName={node_name}",
                _preload_content=False,
                _request_timeout=_timeout(),
            )
        )
    return [slice_info(item) for item in body.get("items") or [] if isinstance(item, dict)]


# --- MIG manager (allocations/cluster/migmanager.py) -------------------------------------------------------
# NVIDIA's MIG manager reads a mig-parted config from a ConfigMap and applies the entry a node's
# `nvidia.com/mig.config` label names, reporting in `nvidia.com/mig.config.state`. These calls touch only the one
# ConfigMap key and the node labels and annotations they are given, so writers that share them are not undone.

MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True, slots=True)
class ConfigMapValue:
    """One key of a ConfigMap (`None`: the key is missing) and the resourceVersion it was read at."""

    value: str | None
    resource_version: str


@dataclass(frozen=True, slots=True)
class NodeMetadata:
    labels: dict[str, str]
    annotations: dict[str, str]


@dataclass(frozen=True, slots=True)
class NodeEvent:
    """A core/v1 Event about a Node: who reported it, why, and when (ISO time, "" when unset)."""

    component: str
    reason: str
    message: str
    type: str
    time: str


def read_config_map_key(namespace: str, name: str, key: str) -> ConfigMapValue | None:
    """The value of `key` in ConfigMap `namespace/name`, or None when the ConfigMap does not exist."""
    core = client.CoreV1Api(api_client())
    try:
        found = _call(f"read ConfigMap {namespace}/{name}", core.read_namespaced_config_map, name, namespace)
    except KubeRejected as exc:
        if exc.status == 404:
            return None
        raise
    version = found.metadata.resource_version if found.metadata else None
    return ConfigMapValue(value=(found.data or {}).get(key), resource_version=str(version or ""))


def write_config_map_key(namespace: str, name: str, key: str, value: str, *, resource_version: str | None) -> bool:
    """Sets `key` of the ConfigMap only if it is still at `resource_version` (None: create the ConfigMap, only if it
    does not exist yet). False when another writer got there first (409): read it again and redo the change.

    A merge patch that carries metadata.resourceVersion is refused on any change since that version, so two
    writers cannot both win; other keys of the ConfigMap are left as they are."""
    core = client.CoreV1Api(api_client())
    try:
        if resource_version is None:
            body = {"metadata": {"name": name, "namespace": namespace}, "data": {key: value}}
            _call(f"create ConfigMap {namespace}/{name}", core.create_namespaced_config_map, namespace, body)
        else:
            patch = {"metadata": {"resourceVersion": resource_version}, "data": {key: value}}
            _call(
                f"update ConfigMap {namespace}/{name}",
                core.patch_namespaced_config_map,
                name,
                namespace,
                patch,
                field_manager=FIELD_MANAGER,
                _content_type=MERGE_PATCH,
            )
    except KubeRejected as exc:
        if exc.status == 409:
            return False
        raise
    return True


def read_node_metadata(name: str) -> NodeMetadata | None:
    """A node's labels and annotations, or None when there is no such node."""
    core = client.CoreV1Api(api_client())
    try:
        node = _call(f"read node {name}", core.read_node, name)
    except KubeRejected as exc:
        if exc.status == 404:
            return None
        raise
    meta = node.metadata
    return NodeMetadata(
        labels=dict((meta.labels if meta else None) or {}), annotations=dict((meta.annotations if meta else None) or {})
    )


def patch_node_metadata(
    name: str, *, labels: dict[str, str | None], annotations: dict[str, str | None] | None = None
) -> None:
    """Sets (or, for None, removes) only the given labels and annotations of a node (a JSON merge patch)."""
    core = client.CoreV1Api(api_client())
    metadata: dict[str, Any] = {"labels": labels}
    if annotations:
        metadata["annotations"] = annotations
    _call(
        f"label node {name}",
        core.patch_node,
        name,
        {"metadata": metadata},
        field_manager=FIELD_MANAGER,
        _content_type=MERGE_PATCH,
    )


def list_node_events(name: str, namespace: str = "default") -> list[NodeEvent]:
    """Events about node `name` (the API server files events of cluster-scoped objects under "default"), oldest
    first. A portal not allowed to read events gets an empty list: the events only add a reason to a failure."""
    core = client.CoreV1Api(api_client())
    try:
        found = _call(
            f"list events of node {name}",
            core.list_namespaced_event,
            namespace,
            field_selector=f"involvedObject.kind=Node,involvedObject.name={name}",
        )
    except KubeRejected as exc:
        if exc.status == 403:
            return []
        raise
    events = [
        NodeEvent(
            component=(e.reporting_component or (e.source.component if e.source else "") or ""),
            reason=e.reason or "",
            message=e.message or "",
            type=e.type or "",
            time=_event_time(e),
        )
        for e in found.items
    ]
    return sorted(events, key=lambda e: e.time)


def _event_time(event: Any) -> str:
    when = event.last_timestamp or event.event_time or event.first_timestamp or event.metadata.creation_timestamp
    return when.isoformat() if when is not None else ""
