"""The tasks' side of tenant namespaces: read the row, call namespace_rbac (issue 17). Idempotent."""

from __future__ import annotations

from django.conf import settings

from allocations.cluster import namespace_rbac
from tenants.models import TenantNamespace


def binding_for(ns: TenantNamespace) -> namespace_rbac.NamespaceBinding:
    return namespace_rbac.NamespaceBinding(
        namespace=ns.name,
        tenant_slug=ns.tenant.slug,
        member_group=f"fatia:tenant:{ns.tenant.slug}",
        portal_service_account=settings.FATIA_KUBE_PORTAL_SERVICE_ACCOUNT,
        portal_role=settings.FATIA_KUBE_NAMESPACE_ROLE,
        member_role=settings.FATIA_KUBE_MEMBER_ROLE,
    )


def bind_tenant_namespace(*, namespace_id: int) -> None:
    """Labels and bindings for a namespace that joined a tenant; nothing when it left again before this ran."""
    ns = TenantNamespace.objects.select_related("tenant").filter(pk=namespace_id).first()
    if ns is not None:
        namespace_rbac.bind_namespace(binding_for(ns))


def unbind_tenant_namespace(*, name: str) -> None:
    """Undo bind_tenant_namespace, unless the namespace joined a tenant again meanwhile."""
    if not TenantNamespace.objects.filter(name=name).exists():
        namespace_rbac.unbind_namespace(name)
