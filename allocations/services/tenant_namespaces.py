"""Namespaces a tenant owns besides its portal-made one (issue 17): assign, remove, and a request's choice.

A namespace row is locked before anything else (then allocation, pool, quota as in locks.py): removal locks it and
counts the live requests naming it; a new request locks it while it is written, so no request can name a
namespace in the middle of leaving its tenant. On the cluster, joining and leaving are applied after commit by
`bind_tenant_namespace_task` / `unbind_tenant_namespace_task` (allocations/cluster/namespace_rbac.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction

from allocations.models import Allocation, tenant_namespace
from allocations.services.outbox import enqueue_task
from tenants.errors import DomainError, InvalidInput, NotAllowed
from tenants.models import Tenant, TenantNamespace, namespace_name_validator
from tenants.services import holds_credentials, record_audit_event

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class NamespaceInUse(DomainError):
    """A namespace still holding live requests' claims cannot leave its tenant (409)."""

    status = 409
    code = "namespace_in_use"


BIND_TASK = "allocations.tasks.bind_tenant_namespace_task"
UNBIND_TASK = "allocations.tasks.unbind_tenant_namespace_task"


def namespace_choices(tenant: Tenant) -> list[str]:
    """What a request of the tenant may name: the portal-made namespace first, then the tenant's own."""
    return [tenant_namespace(tenant), *TenantNamespace.objects.filter(tenant=tenant).values_list("name", flat=True)]


def _fields(ns: TenantNamespace) -> dict[str, str]:
    return {"name": ns.name, "tenant": ns.tenant.slug, "source": ns.source}


def _checked_name(name: str) -> str:
    name = (name or "").strip()
    try:
        namespace_name_validator(name)
    except ValidationError as exc:
        raise InvalidInput({"name": [str(m) for m in exc.messages]}) from exc
    if name.startswith(settings.FATIA_KUBE_NAMESPACE_PREFIX):
        # Portal-made namespaces are derived from tenant slugs; another tenant's could collide with this one.
        raise InvalidInput({"name": [f"Names starting {settings.FATIA_KUBE_NAMESPACE_PREFIX!r} are the portal's own."]})
    if holds_credentials(name):
        raise InvalidInput({"name": [f"{name} holds the cluster's or the portal's credentials; no tenant may own it."]})
    return name


@transaction.atomic
def assign_namespace(
    *, tenant_id: int, name: str, actor: User | None, source: str = TenantNamespace.Source.ASSIGNED
) -> TenantNamespace:
    """Give an existing namespace to a tenant (platform admins; `actor` None: discovery found its label).
    Idempotent for the same tenant, where an admin's assigning again applies its labels and bindings again (the
    cluster check's remedy for missing ones); a namespace another tenant owns is refused."""
    if actor is not None and not actor.is_staff:
        raise NotAllowed("Only platform admins assign namespaces.")
    name = _checked_name(name)
    tenant = Tenant.objects.get(pk=tenant_id)
    owned = TenantNamespace.objects.select_for_update().filter(name=name).first()
    if owned is not None:
        if owned.tenant_id != tenant.pk:
            raise InvalidInput({"name": [f"{name} belongs to tenant {owned.tenant.slug}; remove it there first."]})
        if actor is not None and settings.FATIA_CLUSTER_BACKEND == "kubernetes":
            enqueue_task(BIND_TASK, owned.pk)
        return owned
    ns = TenantNamespace.objects.create(tenant=tenant, name=name, source=source)
    record_audit_event(
        actor=actor,
        actor_name=None if actor else "discovery",
        verb="assign_namespace",
        obj=ns,
        tenant=tenant,
        after=_fields(ns),
    )
    if settings.FATIA_CLUSTER_BACKEND == "kubernetes":
        enqueue_task(BIND_TASK, ns.pk)
    return ns


def live_requests_in(name: str) -> int:
    """Requests naming the namespace that are not over yet (their claims exist or may still be made there)."""
    return Allocation.objects.filter(namespace_name=name).exclude(status__in=Allocation.TERMINAL).count()


@transaction.atomic
def remove_namespace(*, namespace_id: int, actor: User | None) -> None:
    """Take a namespace from its tenant (platform admins; `actor` None: its label was removed). Refused while a
    request that is not over names it: its claims live there."""
    if actor is not None and not actor.is_staff:
        raise NotAllowed("Only platform admins remove namespaces.")
    ns = TenantNamespace.objects.select_for_update().select_related("tenant").get(pk=namespace_id)
    live = live_requests_in(ns.name)
    if live:
        raise NamespaceInUse(
            f"{ns.name} still holds the claims of {live} request(s); release them before removing the namespace.",
            field="namespace",
        )
    before = _fields(ns)
    tenant = ns.tenant
    ns.delete()
    record_audit_event(
        actor=actor,
        actor_name=None if actor else "discovery",
        verb="remove_namespace",
        obj=tenant,
        tenant=tenant,
        before=before,
    )
    if settings.FATIA_CLUSTER_BACKEND == "kubernetes":
        enqueue_task(UNBIND_TASK, before["name"])


def chosen_namespace(tenant: Tenant, name: str | None) -> str:
    """The `namespace_name` to store for a request naming `name` (empty or None: the portal-made one). Locks the
    tenant's namespace row until the caller's transaction ends; InvalidInput for a name not in its list."""
    if not name or name == tenant_namespace(tenant):
        return ""
    if not TenantNamespace.objects.select_for_update().filter(tenant=tenant, name=name).exists():
        choices = ", ".join(namespace_choices(tenant))
        raise InvalidInput({"namespace": [f"{name} is not one of {tenant.slug}'s namespaces ({choices})."]})
    return name
