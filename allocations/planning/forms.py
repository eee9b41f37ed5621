"""The what-if page's two forms (the mix question takes no input). Bounds match the API's
(allocations/api/whatif.py); what only the answers can check (unknown model, a tenant) comes back as field
errors from allocations/planning/answers.py."""

from __future__ import annotations

from typing import Any

from django import forms

from . import answers


class AddGpusForm(forms.Form):
    count = forms.IntegerField(label="GPUs to add", min_value=1, max_value=answers.MAX_ADD_GPUS, initial=8)
    model = forms.CharField(
        label="GPU model", required=False, max_length=100, help_text="A catalog model; blank: the pool's."
    )
    gpus_per_node = forms.IntegerField(
        label="GPUs per new node", min_value=1, max_value=answers.MAX_GPUS_PER_NODE, initial=8
    )


class QuotaForm(forms.Form):
    tenant = forms.ChoiceField(label="Tenant")
    factor = forms.FloatField(
        label="Scale the quota by",
        required=False,
        min_value=0.0,
        max_value=answers.MAX_FACTOR,
        help_text="Leave blank and give new limits instead; both blank: double it.",
    )
    compute = forms.IntegerField(label="New compute-slice limit", required=False, min_value=0)
    memory = forms.IntegerField(label="New memory-slot limit", required=False, min_value=0)

    def __init__(self, *args: Any, tenants: list[tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["tenant"].choices = tenants  # type: ignore[attr-defined]
