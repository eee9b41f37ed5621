"""Forms of the cohort admin page (issue 15): the shape of the input; allocations/cohorts/config.py checks the rest."""

from __future__ import annotations

from typing import Any

from django import forms
from django.db.models import QuerySet

from allocations.cohorts.config import MAX_GRACE_MINUTES, Limits
from allocations.models import Cohort, Quota

GRACE_HELP = "Notice the borrower gets before its borrowed slices are taken back; 0: at once."
LIMIT_HELP = "Empty: no limit."


class CohortForm(forms.Form):
    name = forms.CharField(max_length=100)
    reclaim_grace_minutes = forms.IntegerField(
        min_value=0, max_value=MAX_GRACE_MINUTES, initial=30, label="Reclaim grace (minutes)", help_text=GRACE_HELP
    )


def _limit(label: str) -> forms.IntegerField:
    return forms.IntegerField(min_value=0, max_value=100_000, required=False, label=label, help_text=LIMIT_HELP)


class TenantQuotaField(forms.ModelChoiceField):  # type: ignore[type-arg]
    """A quota of the page's pool, named by its tenant and the cohort it is in now (so an admin who saves the
    form sees what the tenant leaves)."""

    def label_from_instance(self, obj: Quota) -> str:
        return obj.tenant.name if obj.cohort is None else f"{obj.tenant.name} (now in {obj.cohort.name})"


class MembershipForm(forms.Form):
    """A tenant's quota of the pool: its cohort (none: it leaves) and its four limits."""

    # No tenant chosen at first: saving the form as it comes would otherwise take the first tenant out of its cohort.
    quota = TenantQuotaField(queryset=Quota.objects.none(), label="Tenant", empty_label="Choose a tenant")
    cohort = forms.ModelChoiceField(queryset=Cohort.objects.none(), required=False, empty_label="(no cohort)")
    borrowing_compute_limit = _limit("May borrow (compute slices)")
    borrowing_memory_limit = _limit("May borrow (memory slots)")
    lending_compute_limit = _limit("May lend (compute slices)")
    lending_memory_limit = _limit("May lend (memory slots)")

    def __init__(self, *args: Any, quotas: QuerySet[Quota], cohorts: QuerySet[Cohort], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        quota_field = self.fields["quota"]
        assert isinstance(quota_field, forms.ModelChoiceField)  # noqa: S101 (declared above)
        quota_field.queryset = quotas
        cohort_field = self.fields["cohort"]
        assert isinstance(cohort_field, forms.ModelChoiceField)  # noqa: S101
        cohort_field.queryset = cohorts

    def limits(self) -> Limits:
        data = self.cleaned_data
        return Limits(
            borrowing_compute_limit=data["borrowing_compute_limit"],
            borrowing_memory_limit=data["borrowing_memory_limit"],
            lending_compute_limit=data["lending_compute_limit"],
            lending_memory_limit=data["lending_memory_limit"],
        )
