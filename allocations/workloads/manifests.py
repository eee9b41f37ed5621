"""Ready-to-apply manifests for an active request: a Pod, a Job, a Deployment, a Jupyter notebook (StatefulSet
and Service) and an OpenAI-compatible vLLM server (Deployment and Service).

Every pod references the request's claims, tolerates the pool's taints, keeps to the pool's nodes and passes
the Pod Security Standard `restricted` (the level tenant namespaces enforce by default): non-root, no privilege
escalation, no capabilities, the runtime's seccomp profile. Shared-pool requests get one workload per share.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from allocations.workloads.target import ClaimTarget, container_claims, node_affinity, pod_claims

KINDS = ("pod", "job", "deployment", "notebook", "vllm")

# Public images (the Jupyter project publishes on quay.io only since 2023); any other can be given as `image`.
DEFAULT_IMAGES = {
    "pod": "nvidia/cuda:12.6.3-base-ubuntu24.04",
    "job": "nvidia/cuda:12.6.3-base-ubuntu24.04",
    "deployment": "nvidia/cuda:12.6.3-base-ubuntu24.04",
    "notebook": "quay.io/jupyter/pytorch-notebook:cuda12-latest",
    "vllm": "vllm/vllm-openai:v0.11.0",
}
DEFAULT_NAMES = {"pod": "gpu-pod", "job": "gpu-job", "deployment": "gpu-app", "notebook": "notebook", "vllm": "vllm"}
DEFAULT_COMMANDS = {"pod": ["nvidia-smi", "-L"], "job": ["nvidia-smi", "-L"], "deployment": ["sleep", "infinity"]}
DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
# The UID and GID the notebook image runs as (jovyan); the other images get it too, as `restricted` wants a
# non-root user and the CUDA and vLLM images default to root.
RUN_AS = 1000
VLLM_PORT = 8000
NOTEBOOK_PORT = 8888
# What vLLM may take of a MIG instance (its own default): the rest is the CUDA context and fragmentation.
VLLM_MEMORY_UTILIZATION = 0.9

_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
NAME_MAX = 50  # a DNS label is 63; leaves room for "-<share>" and the StatefulSet's "-0"
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$")
_MODEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:-]*$")
ARGS_MAX = 40
ARG_MAX = 500


class WorkloadInputError(ValueError):
    """Options that cannot make a manifest; `errors` maps each field to its messages."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


@dataclass(frozen=True, slots=True)
class WorkloadOptions:
    kind: str
    name: str = ""
    image: str = ""
    command: tuple[str, ...] = ()
    model: str = ""
    args: tuple[str, ...] = ()
    share: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def parse_options(raw: dict[str, Any], target: ClaimTarget) -> WorkloadOptions:
    """Check what a page, the API or the CLI asked for. `command` and `args` may be one shell-quoted string or a
    list. Raises WorkloadInputError with a message per field."""
    errors: dict[str, list[str]] = {}
    kind = str(raw.get("kind") or "").strip()
    if kind not in KINDS:
        errors["kind"] = [f"Choose one of {', '.join(KINDS)}."]
    name = str(raw.get("name") or "").strip()
    if name and (len(name) > NAME_MAX or not _NAME.match(name)):
        errors["name"] = [
            f"Use lower case letters, digits and '-', starting with a letter, at most {NAME_MAX} characters."
        ]
    image = str(raw.get("image") or "").strip()
    if image and (len(image) > 512 or not _IMAGE.match(image)):
        errors["image"] = ["Give an image reference such as registry/name:tag (no spaces, at most 512 characters)."]
    model = str(raw.get("model") or "").strip()
    if model and (len(model) > 200 or not _MODEL.match(model)):
        errors["model"] = ["Give a model name or path such as org/model (no spaces, at most 200 characters)."]
    if model and kind != "vllm" and kind in KINDS:
        errors["model"] = ["Only the vllm kind serves a model."]
    command = _words(raw.get("command"), "command", errors)
    if command and kind in ("notebook", "vllm"):
        errors["command"] = ["The notebook and vllm kinds run their image's own command; use args for vllm."]
    args = _words(raw.get("args"), "args", errors)
    if args and kind in ("pod", "job", "deployment"):
        errors["args"] = ["Use command for this kind."]
    share = _share(raw.get("share"), target, errors)
    if errors:
        raise WorkloadInputError(errors)
    return WorkloadOptions(
        kind=kind,
        name=name or DEFAULT_NAMES[kind],
        image=image or DEFAULT_IMAGES[kind],
        command=tuple(command) or tuple(DEFAULT_COMMANDS.get(kind, ())),
        model=model or DEFAULT_MODEL,
        args=tuple(args),
        share=share,
    )


def _words(value: Any, field_name: str, errors: dict[str, list[str]]) -> list[str]:
    if value in (None, "", []):
        return []
    if isinstance(value, str):
        try:
            words = shlex.split(value)
        except ValueError as exc:
            errors[field_name] = [f"Cannot split it into words: {exc}."]
            return []
    elif isinstance(value, list | tuple) and all(isinstance(w, str) for w in value):
        words = list(value)
    else:
        errors[field_name] = ["Give a string or a list of strings."]
        return []
    if len(words) > ARGS_MAX or any(len(w) > ARG_MAX or "\x00" in w for w in words):
        errors[field_name] = [f"At most {ARGS_MAX} words of at most {ARG_MAX} characters each."]
        return []
    return words


def _share(value: Any, target: ClaimTarget, errors: dict[str, list[str]]) -> int | None:
    if value in (None, ""):
        return None
    if not target.shared:
        errors["share"] = ["Only requests of time-sliced and MPS pools have shares."]
        return None
    try:
        share = int(value)
    except (TypeError, ValueError):
        errors["share"] = ["Give the share's number, 0 for the first."]
        return None
    if not 0 <= share < len(target.claim_names):
        errors["share"] = [f"This request has shares 0 to {len(target.claim_names) - 1}."]
        return None
    return share


# --- the objects ------------------------------------------------------------------------------------------


def build_manifests(target: ClaimTarget, options: WorkloadOptions) -> list[dict[str, Any]]:
    """The Kubernetes objects of one workload per claim group (see ClaimTarget.claim_groups), in apply order."""
    groups = target.claim_groups(options.share)
    objects: list[dict[str, Any]] = []
    for k, claims in enumerate(groups):
        several = len(groups) > 1 or options.share is not None
        index = options.share if options.share is not None else k
        name = f"{options.name}-{index}" if several else options.name
        objects.extend(_BUILDERS[options.kind](target, options, name, claims))
    return objects


def _metadata(target: ClaimTarget, name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": target.namespace, "labels": labels}


def _labels(target: ClaimTarget, name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "fatia.io/request": str(target.request_id)}


def _container(
    name: str, image: str, claims: tuple[str, ...], *, command: tuple[str, ...] = (), args: tuple[str, ...] = ()
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": image}
    if command:
        container["command"] = list(command)
    if args:
        container["args"] = list(args)
    container["resources"] = {"claims": container_claims(claims)}
    container["securityContext"] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    return container


def _pod_spec(target: ClaimTarget, claims: tuple[str, ...], containers: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "fsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": containers,
        "resourceClaims": pod_claims(claims),
    }
    if target.tolerations:
        spec["tolerations"] = [dict(t) for t in target.tolerations]
    affinity = node_affinity(target.node_selector)
    if affinity:
        spec["affinity"] = affinity
    return spec


def _pod(target: ClaimTarget, o: WorkloadOptions, name: str, claims: tuple[str, ...]) -> list[dict[str, Any]]:
    spec = _pod_spec(target, claims, [_container("main", o.image, claims, command=o.command)])
    spec["restartPolicy"] = "Never"
    return [
        {"apiVersion": "v1", "kind": "Pod", "metadata": _metadata(target, name, _labels(target, name)), "spec": spec}
    ]


def _job(target: ClaimTarget, o: WorkloadOptions, name: str, claims: tuple[str, ...]) -> list[dict[str, Any]]:
    labels = _labels(target, name)
    spec = _pod_spec(target, claims, [_container("main", o.image, claims, command=o.command)])
    spec["restartPolicy"] = "Never"
    return [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": _metadata(target, name, labels),
            "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": labels}, "spec": spec}},
        }
    ]


def _deployment(target: ClaimTarget, name: str, labels: dict[str, str], spec: dict[str, Any]) -> dict[str, Any]:
    # Recreate: the old pod gives the slices back before the new one starts, so the two never share them.
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(target, name, labels),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def _plain_deployment(
    target: ClaimTarget, o: WorkloadOptions, name: str, claims: tuple[str, ...]
) -> list[dict[str, Any]]:
    spec = _pod_spec(target, claims, [_container("main", o.image, claims, command=o.command)])
    return [_deployment(target, name, _labels(target, name), spec)]


def _service(target: ClaimTarget, name: str, port: int, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(target, name, labels),
        "spec": {
            "selector": {"app.kubernetes.io/name": name},
            "ports": [{"name": "http", "port": port, "targetPort": port}],
        },
    }


def _scratch(container: dict[str, Any], volumes: list[dict[str, Any]], mounts: dict[str, str]) -> None:
    """emptyDir volumes for the paths a non-root container with a read-only image must write to."""
    container["volumeMounts"] = [{"name": n, "mountPath": p} for n, p in mounts.items()]
    for n in mounts:
        volumes.append({"name": n, "emptyDir": {"medium": "Memory"} if n == "shm" else {}})


def _notebook(target: ClaimTarget, o: WorkloadOptions, name: str, claims: tuple[str, ...]) -> list[dict[str, Any]]:
    labels = _labels(target, name)
    container = _container("notebook", o.image, claims)
    container["ports"] = [{"name": "http", "containerPort": NOTEBOOK_PORT}]
    spec = _pod_spec(target, claims, [container])
    spec["volumes"] = []
    _scratch(container, spec["volumes"], {"work": "/home/jovyan/work"})
    statefulset = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _metadata(target, name, labels),
        "spec": {
            "replicas": 1,
            "serviceName": name,
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }
    return [_service(target, name, NOTEBOOK_PORT, labels), statefulset]


def _vllm(target: ClaimTarget, o: WorkloadOptions, name: str, claims: tuple[str, ...]) -> list[dict[str, Any]]:
    labels = _labels(target, name)
    args = ["--model", o.model, "--port", str(VLLM_PORT)]
    if target.memory_fraction is not None and not _has_flag(o.args, "--gpu-memory-utilization"):
        # A share sees the whole GPU: tell vLLM how much of it is this share's, or it takes 90 % of the GPU.
        args += ["--gpu-memory-utilization", f"{VLLM_MEMORY_UTILIZATION * target.memory_fraction:.3f}"]
    container = _container("vllm", o.image, claims, args=(*args, *o.args))
    container["ports"] = [{"name": "http", "containerPort": VLLM_PORT}]
    container["env"] = [{"name": "HF_HOME", "value": "/cache/huggingface"}, {"name": "HOME", "value": "/cache"}]
    container["readinessProbe"] = {"httpGet": {"path": "/health", "port": VLLM_PORT}, "periodSeconds": 10}
    spec = _pod_spec(target, claims, [container])
    spec["volumes"] = []
    _scratch(container, spec["volumes"], {"cache": "/cache", "shm": "/dev/shm"})  # noqa: S108  # the pod's own tmpfs, not a shared temp dir
    return [_service(target, name, VLLM_PORT, labels), _deployment(target, name, labels, spec)]


def _has_flag(args: tuple[str, ...], flag: str) -> bool:
    return any(a == flag or a.startswith(f"{flag}=") for a in args)


_BUILDERS = {
    "pod": _pod,
    "job": _job,
    "deployment": _plain_deployment,
    "notebook": _notebook,
    "vllm": _vllm,
}
