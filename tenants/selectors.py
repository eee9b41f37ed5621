"""Read-only questions about tenants and roles."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tenants.models import Membership, Tenant

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User


def role_in_tenant(user: User | AnonymousUser, tenant_id: int) -> str | None:
    """The user's role in the tenant, or None when they are not a member."""
    if not user.is_authenticated:
        return None
    return Membership.objects.filter(user_id=user.pk, tenant_id=tenant_id).values_list("role", flat=True).first()


def can_manage_tenant(user: User | AnonymousUser, tenant_id: int) -> bool:
    """Platform admins manage every tenant; tenant managers manage their own."""
    if not user.is_authenticated:
        return False
    return bool(user.is_staff) or role_in_tenant(user, tenant_id) == Membership.Role.MANAGER


def can_use_tenant(user: User | AnonymousUser, tenant_id: int) -> bool:
    """Members and managers may request slices for their tenant (admins act for any tenant)."""
    if not user.is_authenticated:
        return False
    return bool(user.is_staff) or role_in_tenant(user, tenant_id) is not None


def tenants_for_user(user: User | AnonymousUser) -> list[Tenant]:
    return list(Tenant.objects.for_user(user).order_by("name").distinct())


def managed_tenant_ids(user: User | AnonymousUser) -> list[int]:
    if not user.is_authenticated:
        return []
    if user.is_staff:
        return list(Tenant.objects.values_list("pk", flat=True))
    return list(
        Membership.objects.filter(user_id=user.pk, role=Membership.Role.MANAGER).values_list("tenant_id", flat=True)
    )
