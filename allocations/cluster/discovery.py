"""Fleet discovery's services: what the cluster publishes becomes Node, Gpu, GpuFigures and ClaimedDevice rows.

The long-lived process (`manage.py discover_fleet`, allocations/cluster/watcher.py) lists and watches Nodes, the
`gpu.nvidia.com` ResourceSlices and ResourceClaims, and hands what changed to these services; `--once` (tests,
the beat's safety net) lists everything and hands it over in one go.

* A pool is defined by its node selector (NodePool.node_selector, label selector syntax): a GPU node whose
  labels match exactly one pool, and whose GPUs are that pool's model, joins it with no admin action; a GPU node
  matching none (or several, or of another model) is kept with no pool and a note saying why, for the admin.
* A node's GPUs are those of its driver pool's last complete generation: UUID, minor (from the device names),
  product, memory, PCI bus id and the figures it publishes (counter set, MIG devices and what they consume).
* A node that leaves the cluster is marked gone (the state reconcile uses too), and ready when it comes back.
* Every allocated claim's `gpu.nvidia.com` devices are kept (ClaimedDevice); those of claims the portal did not
  make are occupancy that placement and the scheduler prediction count ("outside Fatia").

Audited (verb, on the node): node_joined, node_left (its pool), node_unmatched (a new GPU node no pool takes),
node_gone, node_back, gpus_changed (GPUs added, removed or changed; driver version; DynamicMIG). Label changes
that move no node, node status heartbeats and claims are not audited.

Locks: the pools (pk order), then the nodes, only when something that placement reads changes; placement reads
nodes and GPUs under the pool lock (services/locks.py).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from allocations.cluster.labels import Selector, selector_or_none
from allocations.cluster.published import Figures, Published, PublishedGpu, mig_suffix, minor_of
from allocations.mig.catalog import UnknownGpuModel, load_catalog
from allocations.models import ClaimedDevice, Gpu, GpuFigures, Node, NodePool, SlicePlacement
from allocations.services.locks import lock_pool
from allocations.services.queue_trigger import request_admission
from tenants.services import record_audit_event

logger = logging.getLogger(__name__)

GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
DRIVER_VERSION_LABEL = "nvidia.com/cuda.driver-version.full"


@dataclass(frozen=True, slots=True)
class DiscoveredNode:
    """A cluster node: its labels and its driver pool's last complete view (None: no complete slices yet)."""

    name: str
    labels: dict[str, str]
    published: Published | None = None

    @property
    def is_gpu_node(self) -> bool:
        return self.labels.get(GPU_PRESENT_LABEL) == "true" or self.published is not None


@dataclass(frozen=True, slots=True)
class ClaimView:
    """An allocated claim's `gpu.nvidia.com` devices as (driver pool = node name, device name);
    `allocation_uuid` is the portal's label on claims in the namespaces it manages."""

    namespace: str
    name: str
    uid: str
    allocation_uuid: str | None
    devices: tuple[tuple[str, str], ...]
    # Per device, in the same order: (shareID, consumed memory in MiB) where the device is shared (a GPU published
    # with allowMultipleAllocations: each claim on it is a share of its own); ("", None) otherwise.
    shares: tuple[tuple[str, int | None], ...] = ()

    def share_of(self, i: int) -> tuple[str, int | None]:
        return self.shares[i] if i < len(self.shares) else ("", None)


@dataclass
class DiscoveryReport:
    """What one sync changed, by node name."""

    joined: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    back: list[str] = field(default_factory=list)
    gpus_changed: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)  # any row written (labels, driver, ... included)
    claimed_devices: int = 0  # rows written or deleted

    def merge(self, other: DiscoveryReport) -> None:
        for name in ("joined", "left", "unmatched", "gone", "back", "gpus_changed", "updated"):
            getattr(self, name).extend(getattr(other, name))
        self.claimed_devices += other.claimed_devices

    @property
    def changed(self) -> bool:
        return bool(self.updated or self.gone or self.claimed_devices)


# --- pools by node selector -------------------------------------------------------------------------------


def _normalised(name: str) -> str:
    return re.sub(r"[\s_-]+", "-", name.strip()).casefold()


def product_matches(product: str, model_name: str) -> bool:
    """Whether a product name (the driver's productName, or GFD's nvidia.com/gpu.product label with dashes for
    spaces) is the catalog model `model_name`. An unknown product matches: the selector decides."""
    if not product:
        return True
    catalog = load_catalog()
    if product in catalog:
        return catalog.model(product).name == model_name
    try:
        model = catalog.model(model_name)
    except UnknownGpuModel:
        # A GPU without MIG (shared and MPS pools: "NVIDIA L4"): the names alone, as the driver or GFD spell them.
        return _normalised(product) == _normalised(model_name)
    wanted = _normalised(product)
    return any(wanted == _normalised(n) for n in (model.name, *model.aliases))


@dataclass(frozen=True, slots=True)
class _Pool:
    pk: int
    slug: str
    gpu_model: str
    selector: Selector
    shared: bool  # a shared or MPS pool: its GPUs must be published shareable


class PoolMatcher:
    """Which pool a GPU node belongs to, from the pools' node selectors."""

    def __init__(self, pools: Iterable[NodePool]) -> None:
        self.pools: list[_Pool] = []
        self.by_hand: set[int] = set()  # pools without a selector: their nodes were registered by hand
        self.slugs: dict[int, str] = {}
        for pool in pools:
            self.slugs[pool.pk] = pool.slug
            selector = selector_or_none(pool.node_selector)
            if selector is None:
                self.by_hand.add(pool.pk)
            else:
                self.pools.append(_Pool(pool.pk, pool.slug, pool.gpu_model, selector, pool.is_shared))

    def match(
        self, labels: dict[str, str], product: str, current: int | None, unshareable: bool = False
    ) -> tuple[int | None, str]:
        """(pool id, note): the one pool whose selector matches; None with the reason otherwise. Of several
        matching pools, a node stays in the one it is in; a node registered by hand in a pool without a selector
        stays there. A node whose driver publishes its GPUs but not as shareable (`unshareable`) joins no shared
        or MPS pool: every claim there would take a whole GPU."""
        if current in self.by_hand:
            return current, ""
        matching = [p for p in self.pools if p.selector.matches(labels)]
        if not matching:
            return None, "No pool's node selector matches its labels."
        fitting = [p for p in matching if product_matches(product, p.gpu_model)]
        if not fitting:
            names = ", ".join(p.slug for p in matching)
            return None, f"Its GPUs ({product}) are not the model of the pool(s) whose selector matches: {names}."
        if unshareable and all(p.shared for p in fitting):
            names = ", ".join(p.slug for p in fitting)
            return None, (
                f"Its GPUs are not published as shareable (allowMultipleAllocations), which the shared pool(s) "
                f"{names} need: run NVIDIA's DRA driver with consumable shares (--consumable-shares=memory) and "
                "Kubernetes' DRAConsumableCapacity on (docs/sharing.md)."
            )
        fitting = [p for p in fitting if not (unshareable and p.shared)]
        if len(fitting) > 1:
            stay = next((p for p in fitting if p.pk == current), None)
            if stay is not None:
                return stay.pk, ""
            names = ", ".join(p.slug for p in fitting)
            return None, f"Several pools' node selectors match it: {names}. Make them exclusive."
        return fitting[0].pk, ""


def _product_of(labels: dict[str, str], published: Published | None, gpus: Iterable[Gpu] = ()) -> str:
    if published is not None:
        found = next((g.product for g in published.gpus if g.product), "")
        if found:
            return found
    found = next((g.product for g in gpus if g.product), "")
    return found or labels.get(GPU_PRODUCT_LABEL, "")


# --- nodes and GPUs ---------------------------------------------------------------------------------------


class _Figures:
    """GpuFigures rows by digest, made on first use (rows are shared and never change)."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}

    def id_of(self, figures: Figures | None) -> int | None:
        if figures is None:
            return None
        found = self._ids.get(figures.digest)
        if found is None:
            row, _ = GpuFigures.objects.get_or_create(
                digest=figures.digest,
                defaults={
                    "product": figures.product,
                    "counters": dict(figures.counters),
                    "devices": [d.as_json() for d in figures.devices],
                },
            )
            found = self._ids[figures.digest] = row.pk
        return found


def _gpu_fields(gpu: PublishedGpu, figures_id: int | None) -> dict[str, Any]:
    return {
        "uuid": gpu.uuid,
        "product": gpu.product,
        "memory_mib": gpu.memory_mib,
        "pci_bus_id": gpu.pci_bus_id,
        "figures_id": figures_id,
        "static_instances": [i.as_json() for i in gpu.instances],
    }


def _describe_gpu(fields: dict[str, Any], index: int) -> str:
    return f"gpu-{index} {fields['uuid'] or '?'}"


@dataclass
class _NodePlan:
    """What to write for one node."""

    name: str
    row: Node | None
    found: DiscoveredNode | None  # None: gone from the cluster
    node_fields: dict[str, Any] = field(default_factory=dict)
    create_gpus: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    update_gpus: list[tuple[Gpu, dict[str, Any]]] = field(default_factory=list)
    delete_gpus: list[Gpu] = field(default_factory=list)
    events: list[tuple[str, dict[str, Any], dict[str, Any]]] = field(default_factory=list)  # verb, before, after

    @property
    def empty(self) -> bool:
        return not (self.node_fields or self.create_gpus or self.update_gpus or self.delete_gpus or self.row is None)


def _plan_node(
    row: Node | None, found: DiscoveredNode | None, gpus: list[Gpu], matcher: PoolMatcher, figures: _Figures
) -> _NodePlan | None:
    """The changes that bring `row` (None: not in the database) to what the cluster says (`found` None: gone)."""
    if found is None:
        if row is None or row.state == Node.State.GONE:
            return None
        plan = _NodePlan(row.name, row, None, {"state": Node.State.GONE})
        plan.events.append(("node_gone", {"state": row.state}, {"state": Node.State.GONE}))
        return plan
    if row is None and not found.is_gpu_node:
        return None
    published = found.published
    product = _product_of(found.labels, published, gpus)
    unshareable = published is not None and any(not g.shareable for g in published.gpus if g.figures is None)
    pool_id, note = matcher.match(found.labels, product, row.pool_id if row is not None else None, unshareable)
    # The driver's own version when it published slices; else what we had; else GFD's label.
    driver = published.driver_version if published is not None else ""
    driver = driver or (row.driver_version if row is not None else "") or found.labels.get(DRIVER_VERSION_LABEL, "")
    wanted: dict[str, Any] = {
        "pool_id": pool_id,
        "pool_note": note,
        "labels": found.labels,
        "driver_version": driver,
        "dynamic_mig": published.dynamic_mig if published is not None else (row.dynamic_mig if row else None),
    }
    plan = _NodePlan(found.name, row, found)
    if row is None:
        plan.node_fields = {**wanted, "state": Node.State.READY}
    else:
        plan.node_fields = {k: v for k, v in wanted.items() if getattr(row, k) != v}
        if row.state == Node.State.GONE:
            plan.node_fields["state"] = Node.State.READY
            plan.events.append(("node_back", {"state": row.state}, {"state": Node.State.READY}))
    slugs = matcher.slugs
    before_pool = row.pool_id if row is not None else None
    if row is None or "pool_id" in plan.node_fields:
        if pool_id is not None:
            plan.events.append(
                ("node_joined", {"pool": slugs.get(before_pool) if before_pool else None}, {"pool": slugs[pool_id]})
            )
        elif row is None:
            plan.events.append(("node_unmatched", {}, {"note": note}))
        else:
            plan.events.append(("node_left", {"pool": slugs.get(before_pool or 0)}, {"pool": None, "note": note}))
    if published is not None:
        existing = {g.index: g for g in gpus}
        removed, added, changed = [], [], []
        for gpu in published.gpus:
            fields = _gpu_fields(gpu, figures.id_of(gpu.figures))
            row_gpu = existing.pop(gpu.minor, None)
            if row_gpu is None:
                plan.create_gpus.append((gpu.minor, fields))
                added.append(_describe_gpu(fields, gpu.minor))
                continue
            diff = {k: v for k, v in fields.items() if getattr(row_gpu, k) != v}
            if diff:
                plan.update_gpus.append((row_gpu, diff))
                if set(diff) - {"figures_id"} or row_gpu.figures_id is not None:
                    changed.append(f"gpu-{gpu.minor}: {', '.join(sorted(k.removesuffix('_id') for k in diff))}")
        for gpu_row in existing.values():
            plan.delete_gpus.append(gpu_row)
            removed.append(f"gpu-{gpu_row.index} {gpu_row.uuid or '?'}")
        if row is not None and (
            added or removed or changed or {"driver_version", "dynamic_mig"} & set(plan.node_fields)
        ):
            plan.events.append(
                (
                    "gpus_changed",
                    {"driver_version": row.driver_version, "dynamic_mig": row.dynamic_mig},
                    {
                        "added": added,
                        "removed": removed,
                        "changed": changed,
                        "driver_version": wanted["driver_version"],
                        "dynamic_mig": wanted["dynamic_mig"],
                    },
                )
            )
    if row is not None and not plan.node_fields and plan.empty:
        return None
    return plan


def _plans(
    nodes: Collection[DiscoveredNode], gone: Collection[str], everything: bool, *, lock: bool
) -> tuple[list[_NodePlan], PoolMatcher]:
    matcher = PoolMatcher(NodePool.objects.order_by("pk"))
    found = {n.name: n for n in nodes}
    rows = Node.objects.filter(name__in=[*found, *gone])
    if everything:
        rows = Node.objects.filter(Q(name__in=list(found)) | ~Q(state=Node.State.GONE))
    if lock:
        rows = rows.select_for_update(no_key=True, of=("self",))
    by_name = {r.name: r for r in rows.order_by("pk")}
    gpus: dict[int, list[Gpu]] = {}
    for gpu in Gpu.objects.filter(node_id__in=[r.pk for r in by_name.values()]).order_by("node_id", "index"):
        gpus.setdefault(gpu.node_id, []).append(gpu)
    figures = _Figures()
    plans = []
    names = set(found) | set(gone) | (set(by_name) if everything else set())
    for name in sorted(names):
        row = by_name.get(name)
        plan = _plan_node(row, found.get(name), gpus.get(row.pk, []) if row else [], matcher, figures)
        if plan is not None:
            plans.append(plan)
    return plans, matcher


@transaction.atomic
def sync_fleet(
    *, nodes: Collection[DiscoveredNode], gone: Collection[str] = (), everything: bool = False
) -> DiscoveryReport:
    """Bring Node and Gpu rows to what the cluster publishes for `nodes`; mark the nodes named in `gone` (and,
    with `everything`, every node not in `nodes`: a full list) gone. Idempotent: a sync that finds nothing new
    writes nothing. Locks every pool (pk order), then the nodes it changes, only when something changed."""
    plans, _ = _plans(nodes, gone, everything, lock=False)
    if not plans:
        return DiscoveryReport()
    for pool_id in NodePool.objects.order_by("pk").values_list("pk", flat=True):
        lock_pool(pool_id=pool_id)
    plans, matcher = _plans(nodes, gone, everything, lock=True)  # again, under the locks
    return _apply(plans, matcher)


def _apply(plans: list[_NodePlan], matcher: PoolMatcher) -> DiscoveryReport:
    report = DiscoveryReport()
    now = timezone.now()
    new_nodes = [Node(name=p.name, discovered_at=now, **p.node_fields) for p in plans if p.row is None]
    created = {n.name: n for n in Node.objects.bulk_create(new_nodes)}
    changed_nodes = []
    fields = {"updated_at", "discovered_at"}
    for plan in plans:
        if plan.row is None:
            plan.row = created[plan.name]
            continue
        for key, value in plan.node_fields.items():
            setattr(plan.row, key, value)
        fields |= set(plan.node_fields)
        if plan.found is not None:
            plan.row.discovered_at = now
        plan.row.updated_at = now  # moves the dashboard's live version (selectors._pool_versions)
        changed_nodes.append(plan.row)
    if changed_nodes:
        Node.objects.bulk_update(changed_nodes, sorted(fields), batch_size=500)
    new_gpus = [Gpu(node=p.row, index=index, **fields) for p in plans for index, fields in p.create_gpus]
    Gpu.objects.bulk_create(new_gpus, batch_size=2000)
    updated_gpus = []
    gpu_fields: set[str] = set()
    for plan in plans:
        for gpu, diff in plan.update_gpus:
            for key, value in diff.items():
                setattr(gpu, key, value)
            gpu_fields |= set(diff)
            updated_gpus.append(gpu)
    if updated_gpus:
        Gpu.objects.bulk_update(updated_gpus, sorted(gpu_fields), batch_size=2000)
    for plan in plans:
        for gpu in plan.delete_gpus:
            if SlicePlacement.objects.filter(gpu=gpu).exists():
                # Slices of a live request sit on it: keep the row (the request ends through reconcile or its
                # lease) rather than lose where they are.
                logger.warning("GPU %s left %s but holds slices; kept", gpu.index, plan.row)
                continue
            gpu.delete()
    if new_gpus:
        _attach_claimed_devices([p.name for p in plans if p.create_gpus])
    for plan in plans:
        name = plan.name
        report.updated.append(name)
        node = plan.row or created[name]
        for verb, before, after in plan.events:
            record_audit_event(actor=None, verb=verb, obj=node, before=before, after=after)
            {
                "node_joined": report.joined,
                "node_left": report.left,
                "node_unmatched": report.unmatched,
                "node_gone": report.gone,
                "node_back": report.back,
                "gpus_changed": report.gpus_changed,
            }[verb].append(name)
    for pool_id in sorted({p.row.pool_id for p in plans if p.row is not None and p.row.pool_id is not None}):
        request_admission(pool_id=pool_id)  # a node joined, came back or changed GPUs: the queue may fit now
    return report


@transaction.atomic
def rematch_nodes() -> DiscoveryReport:
    """Match every discovered node against the pools' node selectors again (a selector was changed or a pool
    created), from the labels discovery stored: nodes join and leave pools with no look at the cluster."""
    nodes = [
        DiscoveredNode(name=n.name, labels=dict(n.labels), published=None)
        for n in Node.objects.filter(discovered_at__isnull=False).exclude(state=Node.State.GONE).order_by("pk")
    ]
    return sync_fleet(nodes=nodes)


# --- node state (reconcile uses these too) ----------------------------------------------------------------


@transaction.atomic
def set_node_state(*, node_id: int, state: str) -> Node:
    """Mark a node gone (it left the cluster: no placement goes there) or ready (it came back); audited as
    node_gone / node_back. Locks its pool, then the node."""
    pool_id = Node.objects.values_list("pool_id", flat=True).get(pk=node_id)
    if pool_id is not None:
        lock_pool(pool_id=pool_id)  # placement reads node states under this lock
    node = Node.objects.select_for_update(no_key=True, of=("self",)).get(pk=node_id)
    if node.state == state:
        return node
    before = node.state
    node.state = state
    node.save(update_fields=["state", "updated_at"])
    verb = "node_gone" if state == Node.State.GONE else "node_back"
    record_audit_event(actor=None, verb=verb, obj=node, before={"state": before}, after={"state": state})
    return node


# --- claims -----------------------------------------------------------------------------------------------


def _claimed(
    view: ClaimView,
    node: str,
    device: str,
    gpus: dict[tuple[str, int], Gpu],
    figures: dict[int, dict[str, Any]],
    share: tuple[str, int | None] = ("", None),
) -> dict[str, Any]:
    minor = minor_of(device)
    gpu = gpus.get((node, minor)) if minor is not None else None
    profile, start, size = "", 0, 0
    suffix = mig_suffix(device)
    if gpu is not None:
        published = figures.get(gpu.figures_id or 0)
        if suffix is None and not _part_of_gpu(gpu, share):  # the whole GPU
            size = _memory_slots(gpu, published)
        elif published is not None:
            entry = published["by_suffix"].get(suffix)
            if entry is not None:
                profile, start, size = entry["profile"], entry["start"], entry["size"]
        if suffix is not None and not profile:
            profile, start, size = _from_catalog(gpu, suffix)
    return {
        "claim_uid": view.uid,
        "allocation_uuid": view.allocation_uuid,
        "node_name": node,
        "gpu_id": gpu.pk if gpu is not None else None,
        "profile": profile,
        "start": start,
        "size": size,
        "share_id": share[0],
        "consumed_memory_mib": share[1],
    }


def _part_of_gpu(gpu: Gpu, share: tuple[str, int | None]) -> bool:
    """A share that consumed less than the GPU's memory: it takes memory, not the GPU's MIG memory slots. (A claim
    that names no memory takes all of it under the driver's `memory` policy: that is the whole GPU.)"""
    share_id, consumed = share
    return bool(share_id) and consumed is not None and gpu.memory_mib is not None and consumed < gpu.memory_mib


def _memory_slots(gpu: Gpu, published: dict[str, Any] | None) -> int:
    if published is not None and published["slots"]:
        return int(published["slots"])
    model = _node_model(gpu)
    return model.memory_slices if model is not None else 0


def _node_model(gpu: Gpu) -> Any:
    pool = gpu.node.pool
    try:
        return load_catalog().model(pool.gpu_model if pool is not None else gpu.product)
    except UnknownGpuModel:
        return None


def _from_catalog(gpu: Gpu, suffix: str) -> tuple[str, int, int]:
    """A MIG device of a GPU that published no figures (registered by hand): its profile id and start from
    the name, the profile from the pool's catalog model."""
    model = _node_model(gpu)
    parts = suffix.rsplit("-", 2)
    if model is None or len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return "", 0, 0
    for profile in model.profiles:
        if profile.profile_id == int(parts[1]):
            return profile.name, int(parts[2]), profile.memory_slices
    return "", 0, 0


def _figures_index(ids: set[int]) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for pk, counters, devices in GpuFigures.objects.filter(pk__in=ids).values_list("pk", "counters", "devices"):
        out[pk] = {
            "by_suffix": {d["suffix"]: d for d in devices},
            "slots": sum(1 for name in counters if name.startswith("memory-slice-")),
        }
    return out


def _gpus_of(nodes: set[str]) -> dict[tuple[str, int], Gpu]:
    return {
        (g.node.name, g.index): g
        for g in Gpu.objects.filter(node__name__in=nodes).select_related("node__pool").order_by("pk")
    }


@transaction.atomic
def sync_claimed_devices(
    *, claims: Collection[ClaimView], removed: Collection[tuple[str, str]] = (), everything: bool = False
) -> int:
    """Keep one ClaimedDevice row per device of each allocated `gpu.nvidia.com` claim in `claims`; drop the rows
    of the claims in `removed` (deleted or no longer allocated) and, with `everything` (a full list), of every
    claim not in `claims`. Returns the number of rows written or deleted. Not audited: claims come and go all
    day; what they hold shows on the dashboard."""
    wanted: dict[tuple[str, str, str], tuple[ClaimView, str, tuple[str, int | None]]] = {}
    for view in claims:
        for i, (node, device) in enumerate(view.devices):
            wanted[(view.namespace, view.name, device)] = (view, node, view.share_of(i))
    keys = {(v.namespace, v.name) for v in claims} | set(removed)
    existing_rows = ClaimedDevice.objects.all() if everything else ClaimedDevice.objects.none()
    if not everything and keys:
        condition = Q()
        for namespace, name in keys:
            condition |= Q(namespace=namespace, claim_name=name)
        existing_rows = ClaimedDevice.objects.filter(condition)
    existing = {(r.namespace, r.claim_name, r.device): r for r in existing_rows.order_by("pk")}
    gpus = _gpus_of({node for _, node, _ in wanted.values()})
    figures = _figures_index({g.figures_id for g in gpus.values() if g.figures_id is not None})
    stale = [r.pk for key, r in existing.items() if key not in wanted]
    if stale:
        ClaimedDevice.objects.filter(pk__in=stale).delete()
    create, update = [], []
    for key, (view, node, share) in wanted.items():
        fields = _claimed(view, node, key[2], gpus, figures, share)
        row = existing.get(key)
        if row is None:
            create.append(ClaimedDevice(namespace=key[0], claim_name=key[1], device=key[2], **fields))
            continue
        if any(getattr(row, k) != (uuid.UUID(v) if k == "allocation_uuid" and v else v) for k, v in fields.items()):
            for k, v in fields.items():
                setattr(row, k, v)
            update.append(row)
    ClaimedDevice.objects.bulk_create(create, batch_size=2000)
    if update:
        fields_list = [
            "claim_uid",
            "allocation_uuid",
            "node_name",
            "gpu_id",
            "profile",
            "start",
            "size",
            "share_id",
            "consumed_memory_mib",
            "seen_at",
        ]
        now = timezone.now()
        for row in update:
            row.seen_at = now
        ClaimedDevice.objects.bulk_update(update, fields_list, batch_size=2000)
    return len(stale) + len(create) + len(update)


def _attach_claimed_devices(node_names: list[str]) -> None:
    """Claimed devices listed before their node's GPUs existed: point them at the GPU now."""
    keys = set(
        ClaimedDevice.objects.filter(node_name__in=node_names, gpu__isnull=True).values_list("namespace", "claim_name")
    )
    if not keys:
        return
    condition = Q()
    for namespace, name in keys:
        condition |= Q(namespace=namespace, claim_name=name)
    views: dict[tuple[str, str], list[ClaimedDevice]] = {}
    for row in ClaimedDevice.objects.filter(condition).order_by("pk"):
        views.setdefault((row.namespace, row.claim_name), []).append(row)
    sync_claimed_devices(
        claims=[
            ClaimView(
                namespace=namespace,
                name=name,
                uid=found[0].claim_uid,
                allocation_uuid=str(found[0].allocation_uuid) if found[0].allocation_uuid else None,
                devices=tuple((r.node_name, r.device) for r in found),
                shares=tuple((r.share_id, r.consumed_memory_mib) for r in found),
            )
            for (namespace, name), found in views.items()
        ]
    )
