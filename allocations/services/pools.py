"""Node pools and the (simulated or discovered) fleet behind them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import IntegrityError, transaction

# A module, not a name: discovery imports services.locks, which loads this package first.
from allocations.cluster import discovery
from allocations.cluster.labels import InvalidSelector, parse_selector
from allocations.costs import gpu_model_for
from allocations.mig.catalog import UnknownGpuModel, load_catalog
from allocations.models import Gpu, Node, NodePool
from allocations.services.locks import lock_pool
from tenants.errors import InvalidInput, NotAllowed
from tenants.services import full_clean_or_raise, record_audit_event

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def _require_staff(actor: User) -> None:
    if not getattr(actor, "is_staff", False):
        raise NotAllowed("Only platform admins can change node pools.")


def _checked_profiles(gpu_model: str, profiles: list[str] | None) -> list[str]:
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
    node_selector: str = "",
) -> NodePool:
    """Register a pool of one GPU model. `profiles` defaults to every profile of the model. With a
    `node_selector`, the discovered GPU nodes whose labels match join it at once (cluster/discovery.py:
    rematch_nodes, which locks every pool, then the nodes it moves)."""
    _require_staff(actor)
    pool = NodePool(
        name=name,
        slug=slug,
        gpu_model=gpu_model,
        profiles=_checked_profiles(gpu_model, profiles),
        description=description,
        node_selector=_checked_selector(node_selector),
    )
    full_clean_or_raise(pool)
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
            "node_selector": pool.node_selector,
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
    node_selector: str | None = None,
) -> NodePool:
    """Rename a pool, change which profiles it offers (running slices are not affected) or its node selector
    (discovered nodes join and leave at once: cluster/discovery.py rematch_nodes; the slices running on a node
    that leaves keep running). Locks the pool; a selector change then locks every pool in pk order."""
    _require_staff(actor)
    if node_selector is not None:
        # Moving nodes locks every pool, in pk order (as discovery does): take them all now, in that order.
        for pk in NodePool.objects.order_by("pk").values_list("pk", flat=True):
            lock_pool(pool_id=pk)
    pool = NodePool.objects.select_for_update(no_key=True, of=("self",)).get(pk=pool_id)
    before = {
        "name": pool.name,
        "profiles": pool.profiles,
        "description": pool.description,
        "node_selector": pool.node_selector,
    }
    if name is not None:
        pool.name = name
    if profiles is not None:
        pool.profiles = _checked_profiles(pool.gpu_model, profiles)
    if description is not None:
        pool.description = description
    if node_selector is not None:
        pool.node_selector = _checked_selector(node_selector)
    full_clean_or_raise(pool)
    pool.save(update_fields=["name", "profiles", "description", "node_selector", "updated_at"])
    record_audit_event(
        actor=actor,
        verb="update",
        obj=pool,
        before=before,
        after={
            "name": pool.name,
            "profiles": pool.profiles,
            "description": pool.description,
            "node_selector": pool.node_selector,
        },
    )
    if pool.node_selector != before["node_selector"]:
        discovery.rematch_nodes()
    return pool


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
    return node
