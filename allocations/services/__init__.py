"""Every state change of the allocations app goes through one of these functions."""

from __future__ import annotations

from allocations.services.extensions import (
    approve_lease_extension,
    reject_lease_extension,
    request_lease_extension,
)
from allocations.services.leases import expire_due_leases, warn_expiring_leases
from allocations.services.lifecycle import finish_release, mark_allocation_failed
from allocations.services.notifications import mark_all_notifications_read, mark_notification_read
from allocations.services.pools import create_node_pool, register_node, update_node_pool
from allocations.services.provisioning import provision_allocation
from allocations.services.quotas import (
    approve_quota_change,
    reject_quota_change,
    request_quota_change,
    set_tenant_quota,
)
from allocations.services.requests import (
    approve_allocation,
    reject_allocation,
    release_allocation,
    request_allocation,
)
from allocations.services.retry import retry_allocation_work

__all__ = [
    "approve_allocation",
    "approve_lease_extension",
    "approve_quota_change",
    "create_node_pool",
    "expire_due_leases",
    "finish_release",
    "mark_all_notifications_read",
    "mark_allocation_failed",
    "mark_notification_read",
    "provision_allocation",
    "register_node",
    "reject_allocation",
    "reject_lease_extension",
    "reject_quota_change",
    "release_allocation",
    "request_allocation",
    "request_lease_extension",
    "request_quota_change",
    "retry_allocation_work",
    "set_tenant_quota",
    "update_node_pool",
    "warn_expiring_leases",
]
