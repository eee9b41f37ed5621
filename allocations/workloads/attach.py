"""Add a request's claim references to manifests the user already has, keeping everything else.

For each object (Pod, Deployment, StatefulSet, ReplicaSet, ReplicationController, Job, CronJob, PodTemplate, or a
List of them) the pod spec gets `resourceClaims` entries for the claims, the chosen containers (all of them
unless named) a `resources.claims` entry each, and the pool's tolerations that it lacks. Attaching twice gives
the same result. An object without a namespace gets the claims'; one in another namespace is refused, as a pod
can only use a claim of its own namespace.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from allocations.workloads.target import REF_NAME, ClaimTarget, container_claims, pod_claims

# Where each kind keeps its pod spec.
POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "PodTemplate": ("template", "spec"),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "ReplicationController": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
REFUSED_KINDS = {
    "DaemonSet": "a DaemonSet runs a pod on every matching node, while the claim's devices are on one node: the "
    "pods elsewhere would never start. Use a Deployment or a Pod.",
}


class AttachError(ValueError):
    """The manifest cannot take the claims; `field` is the input it is about (API field messages)."""

    def __init__(self, message: str, *, field: str = "manifest") -> None:
        super().__init__(message)
        self.message = message
        self.field = field


@dataclass(frozen=True, slots=True)
class Attached:
    kind: str
    name: str
    containers: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "containers": list(self.containers)}


def attach_claims(
    documents: list[dict[str, Any]],
    target: ClaimTarget,
    *,
    containers: tuple[str, ...] = (),
    share: int | None = None,
) -> tuple[list[dict[str, Any]], list[Attached]]:
    """A copy of `documents` with the claims attached, and what was attached where. Raises AttachError."""
    claims = _claims(target, share)
    result = copy.deepcopy(documents)
    attached: list[Attached] = []
    seen_containers: set[str] = set()
    for number, document in enumerate(result, start=1):
        for obj in _objects(document, number):
            attached.append(_attach(obj, target, claims, containers, seen_containers))
    missing = [c for c in containers if c not in seen_containers]
    if missing:
        raise AttachError(f"No container named {', '.join(missing)} in the manifest.", field="containers")
    return result, attached


def _claims(target: ClaimTarget, share: int | None) -> tuple[str, ...]:
    if not target.shared:
        if share is not None:
            raise AttachError("Only requests of time-sliced and MPS pools have shares.", field="share")
        return target.claim_names
    if share is None:
        if len(target.claim_names) == 1:
            return target.claim_names
        raise AttachError(
            f"This request has {len(target.claim_names)} shares, one per pod (they may be on different GPUs): "
            f"say which one this workload takes (share 0 to {len(target.claim_names) - 1}).",
            field="share",
        )
    if not 0 <= share < len(target.claim_names):
        raise AttachError(f"This request has shares 0 to {len(target.claim_names) - 1}.", field="share")
    return (target.claim_names[share],)


def _objects(document: dict[str, Any], number: int) -> list[dict[str, Any]]:
    if document.get("kind") == "List":
        items = document.get("items")
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise AttachError(f"Document {number}: a List needs `items`, a list of objects.")
        return items
    return [document]


def _name(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata")
    return str(metadata.get("name") or "") if isinstance(metadata, dict) else ""


def _attach(
    obj: dict[str, Any],
    target: ClaimTarget,
    claims: tuple[str, ...],
    wanted: tuple[str, ...],
    seen_containers: set[str],
) -> Attached:
    kind = str(obj.get("kind") or "")
    label = f"{kind} {_name(obj) or '(no name)'}"
    if kind in REFUSED_KINDS:
        raise AttachError(f"{label}: {REFUSED_KINDS[kind]}")
    if kind not in POD_SPEC_PATHS:
        raise AttachError(
            f"{label}: cannot attach a claim to a {kind or 'object without a kind'}; this works on "
            f"{', '.join(POD_SPEC_PATHS)} (and a List of them)."
        )
    _namespace(obj, target, label)
    spec = _pod_spec(obj, POD_SPEC_PATHS[kind], label)
    pod_containers = spec.get("containers")
    if (
        not isinstance(pod_containers, list)
        or not pod_containers
        or not all(isinstance(c, dict) for c in pod_containers)
    ):
        raise AttachError(f"{label}: its pod spec has no containers.")
    names = [str(c.get("name") or "") for c in pod_containers]
    seen_containers.update(names)
    chosen = [c for c in pod_containers if not wanted or c.get("name") in wanted]
    if not chosen:
        return Attached(kind, _name(obj), ())
    _set_pod_claims(spec, claims, label)
    for container in chosen:
        _set_container_claims(container, claims, label)
    _add_tolerations(spec, target.tolerations, label)
    return Attached(kind, _name(obj), tuple(str(c.get("name") or "") for c in chosen))


def _namespace(obj: dict[str, Any], target: ClaimTarget, label: str) -> None:
    metadata = obj.setdefault("metadata", {})
    if not isinstance(metadata, dict):
        raise AttachError(f"{label}: `metadata` is not a mapping.")
    namespace = metadata.get("namespace")
    if namespace in (None, ""):
        metadata["namespace"] = target.namespace
    elif namespace != target.namespace:
        raise AttachError(
            f"{label} is in namespace {namespace!r}, but the request's claims are in {target.namespace!r}: a pod "
            "can only use a claim of its own namespace. Remove its namespace or set it to the claims'.",
            field="namespace",
        )


def _pod_spec(obj: dict[str, Any], path: tuple[str, ...], label: str) -> dict[str, Any]:
    node: Any = obj
    for key in path:
        if not isinstance(node, dict) or not isinstance(node.get(key), dict):
            raise AttachError(f"{label}: it has no {'.'.join(path)} (the pod spec).")
        node = node[key]
    return node  # type: ignore[no-any-return]


def _ours(name: object) -> bool:
    return isinstance(name, str) and (name == REF_NAME or name.startswith(f"{REF_NAME}-"))


def _set_pod_claims(spec: dict[str, Any], claims: tuple[str, ...], label: str) -> None:
    existing = spec.get("resourceClaims") or []
    if not isinstance(existing, list):
        raise AttachError(f"{label}: `resourceClaims` is not a list.")
    # Attaching again (or another request's claims) replaces what an earlier attach put there.
    kept = [e for e in existing if not (isinstance(e, dict) and _ours(e.get("name")))]
    spec["resourceClaims"] = kept + pod_claims(claims)


def _set_container_claims(container: dict[str, Any], claims: tuple[str, ...], label: str) -> None:
    resources = container.setdefault("resources", {})
    if not isinstance(resources, dict):
        raise AttachError(f"{label}: container {container.get('name')!r} has `resources` that is not a mapping.")
    existing = resources.get("claims") or []
    if not isinstance(existing, list):
        raise AttachError(f"{label}: container {container.get('name')!r} has `resources.claims` that is not a list.")
    kept = [e for e in existing if not (isinstance(e, dict) and _ours(e.get("name")))]
    resources["claims"] = kept + container_claims(claims)


def _add_tolerations(spec: dict[str, Any], tolerations: tuple[dict[str, Any], ...], label: str) -> None:
    if not tolerations:
        return
    existing = spec.get("tolerations") or []
    if not isinstance(existing, list):
        raise AttachError(f"{label}: `tolerations` is not a list.")
    spec["tolerations"] = existing + [dict(t) for t in tolerations if t not in existing]
