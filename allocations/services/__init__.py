"""Every state change of the allocations app goes through one of these functions."""

from __future__ import annotations

from allocations.services.leases import expire_due_leases, warn_expiring_leases
from allocations.services.pools import create_node_pool, register_node, update_node_pool
from allocations.services.provisioning import finish_release, mark_allocation_failed, provision_allocation
from allocations.services.quotas import (
    approve_quota_change,
    reject_quota_change,
    request_quota_change,
    set_tenant_quota,
)
from allocations.services.requests import (
    approve_allocation,
    extend_allocation_lease,
    reject_allocation,
    release_allocation,
    request_allocation,
)

__all__ = [
    "approve_allocation",
    "approve_quota_change",
    "create_node_pool",
    "expire_due_leases",
    "extend_allocation_lease",
    "finish_release",
    "mark_allocation_failed",
    "provision_allocation",
    "register_node",
    "reject_allocation",
    "reject_quota_change",
    "release_allocation",
    "request_allocation",
    "request_quota_change",
    "set_tenant_quota",
    "update_node_pool",
    "warn_expiring_leases",
]
