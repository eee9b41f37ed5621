"""Forms of the browser pages for tenants, members, API tokens and the audit log.

Forms only parse and type the input; the rules live in the services, whose InvalidInput errors are
put back on the form's fields with `add_service_errors`.
"""

from __future__ import annotations

from datetime import datetime, time, timedelta
from typing import Any

from django import forms
from django.utils import timezone

from tenants.errors import InvalidInput
from tenants.models import ApiToken, Membership, Tenant


def add_service_errors(form: forms.BaseForm, error: InvalidInput, aliases: dict[str, str] | None = None) -> None:
    """Show a service's InvalidInput next to the form fields it names (unknown names go on top).

    `aliases` maps a service argument to the form field that carries it (e.g. "hours" -> "extend_hours").
    """
    for name, messages in error.errors.items():
        field = (aliases or {}).get(name, name)
        form.add_error(field if field in form.fields else None, list(messages))


def form_status(*forms_on_page: forms.BaseForm | None) -> int:
    """The status of a page that shows these forms: 400 when one of them was sent and refused, else 200. Every page
    answers bad input so, as the API does, with the errors next to the fields."""
    return 400 if any(f is not None and f.is_bound and f.errors for f in forms_on_page) else 200


class TenantCreateForm(forms.Form):
    name = forms.CharField(max_length=100)
    slug = forms.CharField(
        max_length=40,
        help_text="Lowercase letters, digits and hyphens; it becomes part of Kubernetes names and cannot change.",
    )
    max_lease_hours = forms.IntegerField(min_value=1, initial=168, label="Maximum lease (hours)")
    auto_approve_max_compute_slices = forms.IntegerField(
        min_value=0,
        initial=2,
        label="Auto-approve up to (compute slices)",
        help_text="Requests costing at most this many compute slices are approved at once when they fit "
        "the quota; 0 sends every request to a manager.",
    )
    auto_approve_max_lease_hours = forms.IntegerField(
        min_value=1, initial=24, label="Auto-approve leases up to (hours)"
    )


class TenantPolicyForm(forms.Form):
    name = forms.CharField(max_length=100)
    max_lease_hours = TenantCreateForm.base_fields["max_lease_hours"]
    auto_approve_max_compute_slices = TenantCreateForm.base_fields["auto_approve_max_compute_slices"]
    auto_approve_max_lease_hours = TenantCreateForm.base_fields["auto_approve_max_lease_hours"]
    weakest_isolation = forms.ChoiceField(
        choices=Tenant.Isolation.choices,
        required=False,
        label="Weakest GPU sharing accepted",
        help_text="MIG isolates memory, cache and SMs in hardware; MPS limits memory and compute but shares one "
        "fault domain; time-slicing isolates nothing. Requests to pools of a weaker kind are refused.",
    )
    avoid_co_tenants = forms.BooleanField(
        required=False,
        label="Never share a GPU with another tenant",
        help_text="On time-sliced and MPS pools, this tenant's shares only go on GPUs no other tenant uses.",
    )
    movable_by_default = forms.BooleanField(
        required=False,
        label="New requests are movable",
        help_text="Compaction may move their slices to make room (their pods restart), unless the requester says no.",
    )

    def clean_weakest_isolation(self) -> str | None:
        # Left out (a form from before the field existed): keep the tenant's policy as it is.
        return self.cleaned_data.get("weakest_isolation") or None

    @classmethod
    def for_tenant(cls, tenant: Tenant, data: Any = None) -> TenantPolicyForm:
        return cls(
            data,
            initial={
                "name": tenant.name,
                "max_lease_hours": tenant.max_lease_hours,
                "auto_approve_max_compute_slices": tenant.auto_approve_max_compute_slices,
                "auto_approve_max_lease_hours": tenant.auto_approve_max_lease_hours,
                "weakest_isolation": tenant.weakest_isolation,
                "avoid_co_tenants": tenant.avoid_co_tenants,
                "movable_by_default": tenant.movable_by_default,
            },
        )


class MemberAddForm(forms.Form):
    username = forms.CharField(max_length=150, widget=forms.TextInput(attrs={"autocomplete": "off"}))
    role = forms.ChoiceField(choices=Membership.Role.choices, initial=Membership.Role.MEMBER)


class MemberRoleForm(forms.Form):
    role = forms.ChoiceField(choices=Membership.Role.choices)


EXPIRY_CHOICES = [("", "Never"), ("7", "In 7 days"), ("30", "In 30 days"), ("90", "In 90 days"), ("365", "In a year")]


class ApiTokenForm(forms.Form):
    name = forms.CharField(
        max_length=100,
        help_text="What uses this token, e.g. “CI pipeline” or “my laptop”.",
        widget=forms.TextInput(attrs={"autocomplete": "off"}),
    )
    scope = forms.ChoiceField(
        choices=ApiToken.Scope.choices,
        initial=ApiToken.Scope.READ,
        widget=forms.RadioSelect,
        help_text="A read-only token cannot request, approve or release anything.",
    )
    expires_in_days = forms.TypedChoiceField(
        choices=EXPIRY_CHOICES, coerce=int, empty_value=None, required=False, label="Expires"
    )

    def expires_at(self) -> datetime | None:
        days = self.cleaned_data.get("expires_in_days")
        return timezone.now() + timedelta(days=days) if days else None


class AuditFilterForm(forms.Form):
    """The audit log's filters, all optional; read from the query string."""

    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), required=False, empty_label="Any tenant")
    verb = forms.ChoiceField(required=False)
    actor = forms.CharField(required=False, max_length=150, help_text="Exact username, or “system”.")
    object_type = forms.ChoiceField(required=False, label="Object type")
    since = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, label="To (inclusive)", widget=forms.DateInput(attrs={"type": "date"}))

    def __init__(self, *args: Any, tenants: Any, verbs: list[str], object_types: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        tenant_field = self.fields["tenant"]
        assert isinstance(tenant_field, forms.ModelChoiceField)  # noqa: S101 (narrows the type)
        tenant_field.queryset = tenants
        verb_field = self.fields["verb"]
        assert isinstance(verb_field, forms.ChoiceField)  # noqa: S101
        verb_field.choices = [("", "Any verb"), *((v, v) for v in verbs)]
        type_field = self.fields["object_type"]
        assert isinstance(type_field, forms.ChoiceField)  # noqa: S101
        type_field.choices = [("", "Any type"), *((t, t) for t in object_types)]

    def filters(self) -> dict[str, Any]:
        """Keyword arguments for `audit_events_for_user`; empty when the form is invalid."""
        if not self.is_valid():
            return {}
        data = self.cleaned_data
        since, until = data.get("since"), data.get("until")
        tz = timezone.get_current_timezone()
        return {
            "tenant_id": data["tenant"].pk if data.get("tenant") else None,
            "verb": data.get("verb") or "",
            "actor": (data.get("actor") or "").strip(),
            "object_type": data.get("object_type") or "",
            "since": datetime.combine(since, time.min, tzinfo=tz) if since else None,
            "until": datetime.combine(until + timedelta(days=1), time.min, tzinfo=tz) if until else None,
        }


class SsoGroupMappingForm(forms.Form):
    group = forms.CharField(
        max_length=255,
        help_text="Exactly as the identity provider sends it in the groups claim, e.g. gpu-ml-research-managers.",
        widget=forms.TextInput(attrs={"autocomplete": "off"}),
    )
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.order_by("name"), empty_label=None)
    role = forms.ChoiceField(choices=Membership.Role.choices, initial=Membership.Role.MEMBER)


class IdleReclaimForm(forms.Form):
    """A tenant's idle reclaim (tenants.services.set_idle_reclaim checks the bounds again)."""

    enabled = forms.BooleanField(
        required=False,
        label="Release idle slices",
        help_text="Active requests whose every slice has had no process and no memory in use for the idle time "
        "are flagged and their owner warned; they are released after the grace period unless used or kept.",
    )
    idle_after_minutes = forms.IntegerField(
        min_value=15,
        max_value=7 * 24 * 60,
        label="Idle after (minutes)",
        help_text="15 to 10080 (a week).",
    )
    idle_grace_minutes = forms.IntegerField(
        min_value=5,
        max_value=7 * 24 * 60,
        label="Grace period after the warning (minutes)",
        help_text="5 to 10080 (a week).",
    )

    @classmethod
    def for_tenant(cls, tenant: Tenant, data: Any = None) -> IdleReclaimForm:
        return cls(
            data,
            initial={
                "enabled": tenant.idle_reclaim_enabled,
                "idle_after_minutes": tenant.idle_after_minutes,
                "idle_grace_minutes": tenant.idle_grace_minutes,
            },
        )
