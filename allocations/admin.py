"""Django admin: read-only views. Changes go through the portal pages and the API (services)."""

from __future__ import annotations

from django.contrib import admin

from allocations.models import Allocation, Booking, Node, NodePool, Quota, QuotaChangeRequest
from tenants.admin import ReadOnlyAdmin


@admin.register(Allocation)
class AllocationAdmin(ReadOnlyAdmin):
    list_display = ["id", "tenant", "pool", "profile", "count", "status", "created_at"]
    list_filter = ["status", "pool", "tenant"]


@admin.register(NodePool)
class NodePoolAdmin(ReadOnlyAdmin):
    list_display = ["name", "slug", "gpu_model", "admission", "max_hold_minutes"]


@admin.register(Node)
class NodeAdmin(ReadOnlyAdmin):
    list_display = ["name", "pool", "state"]


@admin.register(Quota)
class QuotaAdmin(ReadOnlyAdmin):
    list_display = [
        "tenant",
        "pool",
        "compute_slices_limit",
        "compute_slices_used",
        "memory_slices_limit",
        "memory_slices_used",
    ]


@admin.register(QuotaChangeRequest)
class QuotaChangeRequestAdmin(ReadOnlyAdmin):
    list_display = ["tenant", "pool", "status", "created_at"]


@admin.register(Booking)
class BookingAdmin(ReadOnlyAdmin):
    list_display = ["id", "tenant", "pool", "profile", "count", "starts_at", "ends_at", "status"]
    list_filter = ["status", "pool", "tenant"]
