"""Query-string filters of the allocations app's list endpoints (shared pieces and the tenant rule:
tenants/api/filters.py)."""

from __future__ import annotations

import django_filters

from allocations.models import Allocation, ExtensionConsent, LeaseExtension, Quota, QuotaChangeRequest
from tenants.api.filters import IdFilter, UtcIsoDateTimeFilter, tenant_filter
from tenants.models import AuditEvent


class AllocationFilter(django_filters.FilterSet):
    tenant = tenant_filter()
    status = django_filters.MultipleChoiceFilter(choices=Allocation.Status.choices)
    requested_by = django_filters.CharFilter(field_name="requested_by__username")
    created_after = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = Allocation
        fields = ["status", "tenant", "pool", "profile", "requested_by"]


class QuotaFilter(django_filters.FilterSet):
    tenant = tenant_filter()

    class Meta:
        model = Quota
        fields = ["tenant", "pool"]


class QuotaChangeFilter(django_filters.FilterSet):
    tenant = tenant_filter()

    class Meta:
        model = QuotaChangeRequest
        fields = ["status", "tenant", "pool"]


class AuditEventFilter(django_filters.FilterSet):
    tenant = tenant_filter()
    actor = django_filters.CharFilter(field_name="actor_name")
    created_after = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = AuditEvent
        fields = ["tenant", "verb", "object_type", "object_id", "actor"]


class LeaseExtensionFilter(django_filters.FilterSet):
    # A number, not a choice of allocations: an id of another tenant's allocation answers like a missing one.
    allocation = IdFilter(field_name="allocation_id")
    status = django_filters.MultipleChoiceFilter(choices=LeaseExtension.Status.choices)

    class Meta:
        model = LeaseExtension
        fields = ["allocation", "status"]


class ExtensionConsentFilter(django_filters.FilterSet):
    # `fatia book asks --status` asks the portal for one status rather than fetching every page to drop rows. The
    # message names the choices (Django's says only "not one of the available choices").
    status = django_filters.MultipleChoiceFilter(
        choices=ExtensionConsent.Status.choices,
        error_messages={
            "invalid_choice": "Unknown status '%(value)s': choose one of "
            + ", ".join(ExtensionConsent.Status.values)
            + "."
        },
    )

    class Meta:
        model = ExtensionConsent
        fields = ["status"]
