from __future__ import annotations

import django_filters

from allocations.models import Allocation, LeaseExtension, QuotaChangeRequest
from tenants.models import AuditEvent


class AllocationFilter(django_filters.FilterSet):
    status = django_filters.MultipleChoiceFilter(choices=Allocation.Status.choices)
    requested_by = django_filters.CharFilter(field_name="requested_by__username")
    created_after = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = Allocation
        fields = ["status", "tenant", "pool", "profile", "requested_by"]


class QuotaChangeFilter(django_filters.FilterSet):
    class Meta:
        model = QuotaChangeRequest
        fields = ["status", "tenant", "pool"]


class AuditEventFilter(django_filters.FilterSet):
    actor = django_filters.CharFilter(field_name="actor_name")
    created_after = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = AuditEvent
        fields = ["tenant", "verb", "object_type", "object_id", "actor"]


class LeaseExtensionFilter(django_filters.FilterSet):
    # A number, not a choice of allocations: an id of another tenant's allocation answers like a missing one.
    allocation = django_filters.NumberFilter(field_name="allocation_id")
    status = django_filters.MultipleChoiceFilter(choices=LeaseExtension.Status.choices)

    class Meta:
        model = LeaseExtension
        fields = ["allocation", "status"]
