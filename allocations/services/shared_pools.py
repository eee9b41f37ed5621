"""The checks a time-sliced or MPS pool passes when it is created or changed: a kind we know, a GPU model of the
non-MIG catalog (one that can do MPS for an MPS pool), no MIG profiles, a time-slice interval only where it means
something, and no kind change under live requests."""

from __future__ import annotations

from allocations.models import Allocation, NodePool
from allocations.sharing.catalog import UnknownSharedModel, shared_model
from tenants.errors import InvalidInput


def checked_kind(kind: str) -> str:
    if kind not in NodePool.Kind.values:
        raise InvalidInput({"kind": [f"Unknown pool kind {kind!r}. Valid: {', '.join(NodePool.Kind.values)}."]})
    return kind


def checked_shared_model(gpu_model: str, *, kind: str, profiles: list[str] | None) -> None:
    errors: dict[str, list[str]] = {}
    try:
        model = shared_model(gpu_model)
    except UnknownSharedModel as exc:
        errors["gpu_model"] = [str(exc)]
    else:
        if kind == NodePool.Kind.MPS and not model.mps:
            errors["gpu_model"] = [f"{gpu_model} cannot run MPS with memory limits (Volta or newer can)."]
    if profiles:
        errors["profiles"] = [
            "A time-sliced or MPS pool offers no MIG profiles: requests name a memory size. Leave profiles empty."
        ]
    if errors:
        raise InvalidInput(errors)


def checked_sharing_interval(interval: str, *, kind: str) -> str:
    if interval not in NodePool.SharingInterval.values:
        valid = ", ".join(NodePool.SharingInterval.values)
        raise InvalidInput({"sharing_interval": [f"Unknown time-slice interval {interval!r}. Valid: {valid}."]})
    if kind != NodePool.Kind.SHARED and interval != NodePool.SharingInterval.DEFAULT:
        raise InvalidInput({"sharing_interval": ["Only time-sliced pools have a time-slice interval."]})
    return interval


def refuse_stranding_kind_change(pool: NodePool, *, kind: str, gpu_model: str) -> None:
    """A pool's kind or GPU model changes only while no request holds quota in it: its slices or shares, and the
    quota they hold, are counted in the old kind's units and placed on the old kind's devices."""
    live = Allocation.objects.filter(pool=pool, status__in=Allocation.QUOTA_HOLDING).count()
    if live:
        field = "kind" if kind != pool.kind else "gpu_model"
        raise InvalidInput(
            {
                field: [
                    f"{pool.name} holds {live} live request{'s' if live != 1 else ''}; their quota and slices "
                    f"would be stranded by a change of {'kind' if field == 'kind' else 'GPU model'}. Release them "
                    "(or wait for their leases) first."
                ]
            }
        )
