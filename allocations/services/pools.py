"""Node pools and the (simulated or discovered) fleet behind them."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, transaction

# A module, not a name: discovery imports services.locks, which loads this package first.
from allocations.admission.setting import apply_admission
from allocations.cluster import discovery
from allocations.cluster.labels import InvalidSelector, parse_selector
from allocations.costs import gpu_model_for
from allocations.mig.catalog import UnknownGpuModel, load_catalog
from allocations.models import Allocation, Gpu, Node, NodePool, default_tolerations
from allocations.services.locks import lock_pool
from allocations.services.queue_trigger import request_admission
from allocations.services.shared_pools import (
    checked_kind,
    checked_shared_model,
    checked_sharing_interval,
    refuse_stranding_kind_change,
)
from allocations.sharing.catalog import is_shared_model
from tenants.errors import InvalidInput, NotAllowed
from tenants.services import full_clean_or_raise, record_audit_event

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def _require_staff(actor: User) -> None:
    if not getattr(actor, "is_staff", False):
        raise NotAllowed("Only platform admins can change node pools.")


def _checked_profiles(gpu_model: str, profiles: list[str] | None) -> list[str]:
    if is_shared_model(gpu_model):
        raise InvalidInput(
            {"gpu_model": [f"{gpu_model} has no MIG: make the pool time-sliced or MPS (kind shared or mps)."]}
        )
    try:
        model = gpu_model_for(gpu_model)
    except UnknownGpuModel as exc:
        known = ", ".join(load_catalog().model_names())
        raise InvalidInput({"gpu_model": [f"Unknown GPU model {gpu_model!r}. Known models: {known}."]}) from exc
    offered = model.profile_names()
    if profiles is None:
        return list(offered)
    if not profiles:
        raise InvalidInput({"profiles": ["Offer at least one MIG profile."]})
    unknown = [p for p in profiles if p not in offered]
    if unknown:
        raise InvalidInput(
            {"profiles": [f"Not a MIG profile of {gpu_model}: {', '.join(unknown)}. Valid: {', '.join(offered)}."]}
        )
    # Keep the catalog's order so forms list profiles from small to large.
    return [p for p in offered if p in profiles]


# Kubernetes' own rules for a toleration (core/v1 validation): the key is a qualified name (an optional DNS
# subdomain prefix and "/", then up to 63 alphanumerics, "-", "_", "."), the value a label value.
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
TOLERATION_FIELDS = ("key", "operator", "value", "effect", "tolerationSeconds")
TOLERATION_OPERATORS = ("Exists", "Equal")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
MAX_TOLERATIONS = 32


def _key_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"the key prefix {prefix!r} is not a DNS subdomain (lowercase letters, digits, '-' and '.')"
    if len(name) > 63 or not _NAME.match(name):
        return (
            f"the key {key!r} is not a qualified name (up to 63 letters, digits, '-', '_' or '.', starting and "
            "ending with a letter or digit, after an optional DNS prefix and '/')"
        )
    return None


def _toleration_problem(t: Any) -> str | None:
    """Why `t` is not a toleration Kubernetes accepts, or None."""
    if not isinstance(t, dict):
        return "write it as an object with key, operator, value, effect and tolerationSeconds"
    unknown = sorted(set(t) - set(TOLERATION_FIELDS))
    if unknown:
        return f"unknown field {', '.join(unknown)} (known: {', '.join(TOLERATION_FIELDS)})"
    if any(not isinstance(t.get(f, ""), str) for f in ("key", "operator", "value", "effect")):
        return "key, operator, value and effect are strings"
    key, operator = t.get("key", ""), t.get("operator", "Equal")
    value, effect, seconds = t.get("value", ""), t.get("effect", ""), t.get("tolerationSeconds")
    if operator not in TOLERATION_OPERATORS:
        return f"the operator is Exists or Equal, not {operator!r}"
    if key and (problem := _key_problem(key)):
        return problem
    if not key and operator != "Exists":
        return "a toleration without a key tolerates every taint and needs the operator Exists"
    if operator == "Exists" and value:
        return "with the operator Exists the value must be empty"
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        return f"the value {value!r} is not a label value (up to 63 letters, digits, '-', '_' or '.')"
    if effect and effect not in TAINT_EFFECTS:
        return f"the effect is one of {', '.join(TAINT_EFFECTS)} (or empty: every effect), not {effect!r}"
    if seconds is not None:
        if isinstance(seconds, bool) or not isinstance(seconds, int):
            return "tolerationSeconds is a whole number of seconds"
        if effect != "NoExecute":
            return "tolerationSeconds goes only with the effect NoExecute"
    return None


def checked_tolerations(tolerations: Any) -> list[dict[str, Any]]:
    """The holder pods' tolerations of a pool in the API's JSON form, normalised (operator always given, empty
    fields left out), or InvalidInput naming the first bad one."""
    if not isinstance(tolerations, list):
        raise InvalidInput({"tolerations": ["Give a list of tolerations (an empty list tolerates no taint)."]})
    if len(tolerations) > MAX_TOLERATIONS:
        raise InvalidInput({"tolerations": [f"At most {MAX_TOLERATIONS} tolerations."]})
    out: list[dict[str, Any]] = []
    for n, t in enumerate(tolerations, start=1):
        problem = _toleration_problem(t)
        if problem:
            raise InvalidInput({"tolerations": [f"Toleration {n}: {problem}."]})
        normal: dict[str, Any] = {"operator": t.get("operator", "Equal")}
        for name in ("key", "value", "effect"):
            if t.get(name):
                normal[name] = t[name]
        if t.get("tolerationSeconds") is not None:
            normal["tolerationSeconds"] = t["tolerationSeconds"]
        out.append({k: normal[k] for k in TOLERATION_FIELDS if k in normal})
    return out


def _checked_mig_mode(mig_mode: str) -> str:
    if mig_mode not in NodePool.MigMode.values:
        valid = ", ".join(NodePool.MigMode.values)
        raise InvalidInput({"mig_mode": [f"Unknown MIG mode {mig_mode!r}. Valid: {valid}."]})
    return mig_mode


def _refuse_stranding_mode_change(pool: NodePool, mig_mode: str) -> None:
    """A pool's MIG mode is changed only while it holds no live request: the claims of its running slices name
    devices of the old mode (DynamicMIG devices have no uuid and are made at prepare time; static ones are
    pre-created and pinned by uuid), and the driver restart that a mode change needs destroys the MIG instances
    it did not make (DynamicMIG) or stops publishing the dynamic ones. Drain the pool first."""
    if mig_mode == pool.mig_mode:
        return
    live = Allocation.objects.filter(pool=pool, status__in=Allocation.QUOTA_HOLDING).count()
    if live:
        raise InvalidInput(
            {
                "mig_mode": [
                    f"{pool.name} holds {live} live request{'s' if live != 1 else ''}; their slices would be "
                    "stranded by a MIG mode change. Release them (or wait for their leases) first."
                ]
            }
        )


def _checked_selector(node_selector: str) -> str:
    """A node selector in Kubernetes label selector syntax, normalised (blank: no discovered node joins)."""
    text = node_selector.strip()
    if not text:
        return ""
    try:
        return str(parse_selector(text))
    except InvalidSelector as exc:
        raise InvalidInput({"node_selector": [str(exc)]}) from exc


@transaction.atomic
def create_node_pool(
    *,
    name: str,
    slug: str,
    gpu_model: str,
    actor: User,
    profiles: list[str] | None = None,
    description: str = "",
    tolerations: list[dict[str, Any]] | None = None,
    node_selector: str = "",
    mig_mode: str = NodePool.MigMode.DYNAMIC,
    kind: str = NodePool.Kind.MIG,
    sharing_interval: str = NodePool.SharingInterval.DEFAULT,
) -> NodePool:
    """Register a pool of one GPU model. `profiles` defaults to every profile of the model, `tolerations` (of
    the holder pods, Kubernetes backend) to tolerating the usual GPU node taint (models.default_tolerations).
    A time-sliced or MPS pool (`kind`) names a model of the non-MIG catalog (allocations/sharing/catalog.py) and
    offers no profile (`profiles` empty or left out); `sharing_interval` is for time-sliced pools.
    With a `node_selector`, the discovered GPU nodes whose labels match join it at once (cluster/discovery.py:
    rematch_nodes, which locks every pool, then the nodes it moves)."""
    _require_staff(actor)
    kind = checked_kind(kind)
    if kind != NodePool.Kind.MIG:
        checked_shared_model(gpu_model, kind=kind, profiles=profiles)
    pool = NodePool(
        name=name,
        slug=slug,
        gpu_model=gpu_model,
        kind=kind,
        sharing_interval=checked_sharing_interval(sharing_interval, kind=kind),
        profiles=[] if kind != NodePool.Kind.MIG else _checked_profiles(gpu_model, profiles),
        description=description,
        tolerations=checked_tolerations(default_tolerations() if tolerations is None else tolerations),
        node_selector=_checked_selector(node_selector),
        mig_mode=_checked_mig_mode(mig_mode),
    )
    # A time-sliced or MPS pool offers no profiles: the model's blank=False on them is a MIG pool's rule.
    full_clean_or_raise(pool, exclude=["profiles"] if pool.is_shared else None)
    pool.save()
    record_audit_event(
        actor=actor,
        verb="create",
        obj=pool,
        after={
            "name": name,
            "slug": slug,
            "gpu_model": gpu_model,
            "profiles": pool.profiles,
            "tolerations": pool.tolerations,
            "node_selector": pool.node_selector,
            "mig_mode": pool.mig_mode,
            "kind": pool.kind,
            "sharing_interval": pool.sharing_interval,
        },
    )
    if pool.node_selector:
        discovery.rematch_nodes()
    return pool


@transaction.atomic
def update_node_pool(
    *,
    pool_id: int,
    actor: User,
    name: str | None = None,
    profiles: list[str] | None = None,
    description: str | None = None,
    tolerations: list[dict[str, Any]] | None = None,
    node_selector: str | None = None,
    mig_mode: str | None = None,
    kind: str | None = None,
    gpu_model: str | None = None,
    sharing_interval: str | None = None,
    admission: str | None = None,
    max_hold_minutes: int | None = None,
) -> NodePool:
    """Rename a pool, change which profiles it offers or what its holder pods tolerate (running slices are
    not affected: a holder pod keeps the tolerations it was made with), or its node selector (discovered nodes
    join and leave at once: cluster/discovery.py rematch_nodes; the slices running on a node that leaves keep
    running), or its MIG mode (refused with InvalidInput while the pool holds live requests, see
    _refuse_stranding_mode_change), or its kind and GPU model (MIG, time-sliced or MPS: refused the same way while
    requests hold quota, services/shared_pools.py). Locks the pool; a selector change first locks every pool in pk
    order. `admission` and `max_hold_minutes`: whether the pool holds requests that would strand room (issue 14,
    allocations/admission/setting.apply_admission; refused in static and shared pools)."""
    _require_staff(actor)
    if node_selector is not None:
        # Moving nodes locks every pool, in pk order (as discovery does): take them all now, in that order.
        for pk in NodePool.objects.order_by("pk").values_list("pk", flat=True):
            lock_pool(pool_id=pk)
    pool = NodePool.objects.select_for_update(no_key=True, of=("self",)).get(pk=pool_id)
    fields = (
        "name",
        "profiles",
        "description",
        "tolerations",
        "node_selector",
        "mig_mode",
        "kind",
        "gpu_model",
        "sharing_interval",
        "admission",
        "max_hold_minutes",
    )
    before = {f: getattr(pool, f) for f in fields}
    if name is not None:
        pool.name = name
    if kind is not None or gpu_model is not None:
        _change_kind(pool, kind if kind is not None else pool.kind, gpu_model or pool.gpu_model, profiles)
    elif profiles is not None and pool.is_shared:
        checked_shared_model(pool.gpu_model, kind=pool.kind, profiles=profiles)
    elif profiles is not None:
        pool.profiles = _checked_profiles(pool.gpu_model, profiles)
    if sharing_interval is not None:
        pool.sharing_interval = checked_sharing_interval(sharing_interval, kind=pool.kind)
    if description is not None:
        pool.description = description
    if tolerations is not None:
        pool.tolerations = checked_tolerations(tolerations)
    if node_selector is not None:
        pool.node_selector = _checked_selector(node_selector)
    if mig_mode is not None:
        _refuse_stranding_mode_change(pool, _checked_mig_mode(mig_mode))
        pool.mig_mode = mig_mode
    released = apply_admission(pool, admission=admission, max_hold_minutes=max_hold_minutes)  # after kind and mode
    # A time-sliced or MPS pool offers no profiles: the model's blank=False on them is a MIG pool's rule.
    full_clean_or_raise(pool, exclude=["profiles"] if pool.is_shared else None)
    pool.save(update_fields=[*fields, "updated_at"])
    record_audit_event(actor=actor, verb="update", obj=pool, before=before, after={f: getattr(pool, f) for f in fields})
    if released:
        request_admission(pool_id=pool.pk)  # admission off: what it held is placed wherever it fits
    if pool.node_selector != before["node_selector"]:
        discovery.rematch_nodes()
    return pool


def _change_kind(pool: NodePool, kind: str, gpu_model: str, profiles: list[str] | None) -> None:
    """Turn the pool into another kind or GPU model (validated as a new pool would be); the caller holds the
    pool's lock. Refused while the pool holds live requests: their slices or shares would be stranded."""
    kind = checked_kind(kind)
    if kind == pool.kind and gpu_model == pool.gpu_model:
        if profiles is not None:
            pool.profiles = [] if pool.is_shared else _checked_profiles(pool.gpu_model, profiles)
        return
    refuse_stranding_kind_change(pool, kind=kind, gpu_model=gpu_model)
    if kind == NodePool.Kind.MIG:
        pool.profiles = _checked_profiles(gpu_model, profiles)
    else:
        checked_shared_model(gpu_model, kind=kind, profiles=profiles)
        pool.profiles = []
    pool.kind = kind
    pool.gpu_model = gpu_model


@transaction.atomic
def register_node(*, pool_id: int, name: str, gpu_count: int, actor: User | None) -> Node:
    """Add a node with `gpu_count` GPUs to a pool (discovery workers and the simulated fleet)."""
    if actor is not None:
        _require_staff(actor)
    if not 1 <= gpu_count <= 16:
        raise InvalidInput({"gpu_count": ["A node has between 1 and 16 GPUs."]})
    pool = NodePool.objects.get(pk=pool_id)
    try:
        with transaction.atomic():
            node = Node.objects.create(pool=pool, name=name)
    except IntegrityError as exc:
        raise InvalidInput({"name": [f"A node named {name!r} already exists."]}) from exc
    Gpu.objects.bulk_create([Gpu(node=node, index=i, uuid=f"GPU-{node.pk:08x}-{i:04x}-sim") for i in range(gpu_count)])
    record_audit_event(actor=actor, verb="register_node", obj=node, after={"pool": pool.slug, "gpus": gpu_count})
    request_admission(pool_id=pool.pk)  # new GPUs: the queue may fit now
    return node
