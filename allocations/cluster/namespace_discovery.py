"""Namespaces an admin labels `fatia.io/tenant=<slug>` join that tenant; removing the label takes them back
(issue 17). Run by the reconcile pass (reconcile_cluster_task), after the claims and pods.

Portal-made namespaces (the prefix) carry the label too and are skipped. A namespace whose leaving is still being
applied (an open unbind in the outbox) is skipped as well: its label is about to go, it is not a new one. Rows an
admin assigned through the API are never removed here: only those this pass added (source `labelled`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.conf import settings

from allocations.cluster import namespace_rbac
from allocations.services.outbox import has_open_message
from allocations.services.tenant_namespaces import UNBIND_TASK, NamespaceInUse, assign_namespace, remove_namespace
from tenants.errors import InvalidInput
from tenants.models import Tenant, TenantNamespace

logger = logging.getLogger(__name__)


@dataclass
class NamespaceReport:
    joined: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def discover_labelled_namespaces() -> NamespaceReport:
    """One pass; raises KubeUnavailable when the namespaces cannot be listed."""
    report = NamespaceReport()
    labelled = {
        name: slug
        for name, slug in namespace_rbac.labelled_namespaces().items()
        if not name.startswith(settings.FATIA_KUBE_NAMESPACE_PREFIX)
    }
    known = dict(TenantNamespace.objects.values_list("name", "source"))
    tenants = dict(Tenant.objects.filter(slug__in=set(labelled.values())).values_list("slug", "pk"))
    for name, slug in sorted(labelled.items()):
        if name in known or has_open_message(UNBIND_TASK, name):
            continue
        if slug not in tenants:
            report.refused.append(f"{name}: no tenant {slug!r}")
            continue
        try:
            assign_namespace(tenant_id=tenants[slug], name=name, actor=None, source=TenantNamespace.Source.LABELLED)
        except InvalidInput as exc:
            report.refused.append(f"{name}: {exc.message}")
            continue
        report.joined.append(name)
    for ns in TenantNamespace.objects.filter(source=TenantNamespace.Source.LABELLED).exclude(name__in=labelled):
        try:
            remove_namespace(namespace_id=ns.pk, actor=None)
        except NamespaceInUse as exc:
            report.refused.append(f"{ns.name}: {exc.message}")
            continue
        report.left.append(ns.name)
    if report.refused:
        logger.warning("labelled namespaces not taken: %s", "; ".join(report.refused))
    return report
