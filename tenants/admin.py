"""Django admin: read-only views. Changes go through the portal pages and the API (services)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from tenants.models import ApiToken, AuditEvent, Membership, SsoGroupMapping, SsoIdentity, Tenant


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "actor_name", "tenant", "verb", "object_type", "object_id"]
    list_filter = ["verb", "object_type", "tenant"]
    search_fields = ["actor_name", "object_id"]


@admin.register(Tenant)
class TenantAdmin(ReadOnlyAdmin):
    list_display = ["name", "slug", "max_lease_hours", "auto_approve_max_compute_slices"]


@admin.register(Membership)
class MembershipAdmin(ReadOnlyAdmin):
    list_display = ["tenant", "user", "role", "sso_managed"]


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    list_display = ["user", "name", "prefix", "scope", "expires_at", "revoked_at"]


@admin.register(SsoGroupMapping)
class SsoGroupMappingAdmin(ReadOnlyAdmin):
    list_display = ["group", "tenant", "role", "created_at"]


@admin.register(SsoIdentity)
class SsoIdentityAdmin(ReadOnlyAdmin):
    list_display = ["user", "issuer", "subject", "staff_from_sso", "last_login_at"]
    search_fields = ["subject", "user__username"]
