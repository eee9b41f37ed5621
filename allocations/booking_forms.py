"""The booking form (issue 15): the shape of the input; the booking services check everything else."""

from __future__ import annotations

from typing import Any

from django import forms
from django.db.models import QuerySet

from allocations.models import NodePool
from tenants.models import Tenant

# What a browser's <input type="datetime-local"> sends, with or without seconds.
LOCAL_FORMATS = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"]


class LocalDateTimeInput(forms.DateTimeInput):
    input_type = "datetime-local"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(format="%Y-%m-%dT%H:%M", **kwargs)


class BookingForm(forms.Form):
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), empty_label=None)
    pool = forms.ModelChoiceField(queryset=NodePool.objects.none(), empty_label=None, help_text="MIG pools only.")
    profile = forms.ChoiceField(label="MIG profile")
    count = forms.IntegerField(min_value=1, initial=1, label="Number of slices")
    starts_at = forms.DateTimeField(
        label="Starts (UTC)", input_formats=LOCAL_FORMATS, widget=LocalDateTimeInput(), help_text="In the future."
    )
    ends_at = forms.DateTimeField(label="Ends (UTC)", input_formats=LOCAL_FORMATS, widget=LocalDateTimeInput())
    purpose = forms.CharField(
        max_length=500,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="What the slices are for, e.g. a workshop; your manager reads this when approving.",
    )

    def __init__(self, *args: Any, tenants: QuerySet[Tenant], pools: QuerySet[NodePool], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        tenant_field = self.fields["tenant"]
        pool_field = self.fields["pool"]
        assert isinstance(tenant_field, forms.ModelChoiceField)  # noqa: S101 (declared above)
        assert isinstance(pool_field, forms.ModelChoiceField)  # noqa: S101
        tenant_field.queryset = tenants
        pool_field.queryset = pools
        if tenants.count() == 1:
            tenant_field.widget = forms.HiddenInput()
            tenant_field.initial = tenants.first()
        profiles = sorted({p for pool in pools for p in pool.profiles})
        profile_field = self.fields["profile"]
        assert isinstance(profile_field, forms.ChoiceField)  # noqa: S101
        profile_field.choices = [(p, p) for p in profiles]
