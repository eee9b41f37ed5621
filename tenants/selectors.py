"""Read-only questions about tenants and roles."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from django.db.models import Count, QuerySet

from tenants.models import ApiToken, AuditEvent, Membership, Tenant

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User


def role_in_tenant(user: User | AnonymousUser, tenant_id: int) -> str | None:
    """The user's role in the tenant, or None when they are not a member."""
    if not user.is_authenticated:
        return None
    # order_by(): Membership.Meta.ordering would join two tables to sort a single row.
    return (
        Membership.objects.filter(user_id=user.pk, tenant_id=tenant_id)
        .order_by()
        .values_list("role", flat=True)
        .first()
    )


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
    return list(Tenant.objects.for_user(user).order_by("name"))


def managed_tenant_ids(user: User | AnonymousUser) -> list[int]:
    if not user.is_authenticated:
        return []
    if user.is_staff:
        return list(Tenant.objects.values_list("pk", flat=True))
    return list(
        Membership.objects.filter(user_id=user.pk, role=Membership.Role.MANAGER).values_list("tenant_id", flat=True)
    )


def tenants_overview() -> QuerySet[Tenant]:
    """Every tenant with its member count (the admin's tenant list)."""
    return Tenant.objects.annotate(
        member_count=Count("memberships", distinct=True),
    ).order_by("name")


def memberships_of(tenant: Tenant) -> QuerySet[Membership]:
    return Membership.objects.filter(tenant=tenant).select_related("user").order_by("user__username")


def api_tokens_for_user(user: User) -> QuerySet[ApiToken]:
    if not user.is_authenticated:
        return ApiToken.objects.none()
    return ApiToken.objects.filter(user_id=user.pk).order_by("-created_at")


def audit_events_for_user(
    user: User,
    *,
    tenant_id: int | None = None,
    verb: str = "",
    actor: str = "",
    object_type: str = "",
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[AuditEvent]:
    """The audit log the user may read (staff: all), filtered, newest first."""
    qs = AuditEvent.objects.for_user(user).select_related("tenant")
    if tenant_id is not None:
        qs = qs.filter(tenant_id=tenant_id)
    if verb:
        qs = qs.filter(verb=verb)
    if actor:
        qs = qs.filter(actor_name__iexact=actor)
    if object_type:
        qs = qs.filter(object_type=object_type)
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    if until is not None:
        qs = qs.filter(created_at__lt=until)
    return qs.order_by("-created_at", "-id")


def audit_filter_choices(user: User) -> tuple[list[str], list[str]]:
    """The verbs and object types present in the user's audit log, for the filter drop-downs."""
    qs = AuditEvent.objects.for_user(user)
    verbs = sorted(set(qs.values_list("verb", flat=True).order_by().distinct()))
    object_types = sorted(set(qs.values_list("object_type", flat=True).order_by().distinct()))
    return verbs, object_types


def managed_tenants(user: User) -> QuerySet[Tenant]:
    return Tenant.objects.filter(pk__in=managed_tenant_ids(user)).order_by("name")
