"""What a tenant's namespaces page shows: each namespace with the requests whose claims live there."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from allocations.models import Allocation, tenant_namespace
from tenants.models import Tenant, TenantNamespace

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User

SOURCES = {"portal": "made by the portal (the default)", **dict(TenantNamespace.Source.choices)}


@dataclass(frozen=True, slots=True)
class NamespaceRow:
    name: str
    source: str  # "portal", or a TenantNamespace.Source value
    source_label: str
    namespace_id: int | None = None  # None: the portal-made namespace, which cannot be removed
    # The requests that are not over yet and name this namespace: their claims are there, or will be.
    live: list[Allocation] = field(default_factory=list)


def namespace_rows(user: User | AnonymousUser, tenant: Tenant) -> list[NamespaceRow]:
    """The portal-made namespace first, then those the tenant owns by name; two queries."""
    live: dict[str, list[Allocation]] = {}
    requests = (
        Allocation.objects.for_user(user)
        .filter(tenant=tenant)
        .exclude(status__in=Allocation.TERMINAL)
        .only("pk", "status", "namespace_name", "profile", "count")
        .order_by("pk")
    )
    for request in requests:
        live.setdefault(request.namespace_name, []).append(request)
    rows = [NamespaceRow(tenant_namespace(tenant), "portal", SOURCES["portal"], None, live.get("", []))]
    for ns in TenantNamespace.objects.for_user(user).filter(tenant=tenant).order_by("name"):
        rows.append(NamespaceRow(ns.name, ns.source, SOURCES[ns.source], ns.pk, live.get(ns.name, [])))
    return rows
