"""A request as a ClaimTarget: the one place the workloads package reads the database's view of a request."""

from __future__ import annotations

from allocations.costs import gpu_model_for
from allocations.models import Allocation
from allocations.workloads.target import ClaimTarget
from tenants.errors import DomainError


class NoClaimYet(DomainError):
    """Manifests need the claims, which exist only while the request is active."""

    status = 409
    code = "not_active"


def claim_target(allocation: Allocation) -> ClaimTarget:
    """Where the active request's claims are. Raises NoClaimYet for a request in any other state."""
    if allocation.status != Allocation.Status.ACTIVE or not allocation.claim_names:
        raise NoClaimYet(
            f"Request #{allocation.pk} is {allocation.get_status_display().lower()}: workloads can use its claims "
            "once it is active."
        )
    pool = allocation.pool
    fraction = None
    if pool.is_shared and allocation.memory_mib:
        fraction = min(1.0, allocation.memory_mib / gpu_model_for(pool.gpu_model).memory_mib)
    return ClaimTarget(
        request_id=allocation.pk,
        namespace=allocation.namespace,
        claim_names=tuple(allocation.claim_names),
        shared=pool.is_shared,
        tolerations=tuple(t for t in pool.tolerations or () if isinstance(t, dict)),
        node_selector=pool.node_selector,
        memory_fraction=fraction,
    )
