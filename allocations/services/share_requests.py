"""The checks a request in a time-sliced or MPS pool passes on top of every request's: the tenant's isolation
policy, the share's memory (more than 0, at most the GPU's) and, for MPS, its active-thread percentage (1-100);
and the auto-approve bound for shares."""

from __future__ import annotations

from allocations.costs import Cost
from allocations.models import NodePool
from allocations.sharing.catalog import UnknownSharedModel, shared_model
from allocations.sharing.isolation import allowed_by_policy, policy_refusal
from tenants.errors import InvalidInput
from tenants.models import Tenant

# A MIG GPU of the catalog has 7 compute slices: a tenant's auto-approve bound of N compute slices allows shares
# up to N/7 of a GPU, the same share of a GPU a MIG request of N compute slices takes.
MIG_COMPUTE_SLICES_PER_GPU = 7


def check_isolation_policy(*, tenant: Tenant, pool: NodePool) -> None:
    """InvalidInput on `pool` when the tenant refuses sharing as weak as the pool's kind."""
    if not allowed_by_policy(weakest=tenant.weakest_isolation, kind=pool.kind):
        raise InvalidInput(
            {"pool": [policy_refusal(tenant_name=tenant.name, weakest=tenant.weakest_isolation, kind=pool.kind)]}
        )


def validate_share_request(
    *, tenant: Tenant, pool: NodePool, memory_mib: int | None, thread_percentage: int | None
) -> None:
    check_isolation_policy(tenant=tenant, pool=pool)
    errors: dict[str, list[str]] = {}
    try:
        gpu_memory = shared_model(pool.gpu_model).memory_mib
    except UnknownSharedModel as exc:
        raise InvalidInput({"pool": [str(exc)]}) from exc
    if memory_mib is None or isinstance(memory_mib, bool) or not isinstance(memory_mib, int):
        errors["memory_mib"] = [f"Give the GPU memory of each share in MiB (1 to {gpu_memory})."]
    elif not 0 < memory_mib <= gpu_memory:
        errors["memory_mib"] = [
            f"A share of a {pool.gpu_model} has between 1 and {gpu_memory} MiB ({gpu_memory // 1024} GiB) of memory."
        ]
    if pool.kind == NodePool.Kind.MPS:
        if thread_percentage is None or not 1 <= thread_percentage <= 100:
            errors["thread_percentage"] = ["Give each MPS share's active-thread percentage, from 1 to 100."]
    elif thread_percentage is not None:
        errors["thread_percentage"] = [
            f"{pool.name} is time-sliced: there is no thread share to set (only MPS pools have one)."
        ]
    if errors:
        raise InvalidInput(errors)


def auto_approve_share(*, tenant: Tenant, cost: Cost) -> bool:
    """Whether shares costing `cost` are within the tenant's auto-approve bound (in GPU-equivalents)."""
    return cost.gpu_equivalents <= tenant.auto_approve_max_compute_slices / MIG_COMPUTE_SLICES_PER_GPU + 1e-9
