"""Forms of the browser pages for slice requests, quotas and pools.

Forms parse and type the input and offer the choices a user may pick from; every rule (profiles a
pool offers, lease bounds, quota, who may do what) is checked by the service the view calls.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from django import forms
from django.conf import settings
from django.db.models import QuerySet

from allocations.models import NodePool, default_tolerations
from allocations.selectors import GpuModelChoice
from allocations.services.tenant_namespaces import namespace_choices
from allocations.sharing.catalog import MODELS as SHARED_MODELS
from tenants.models import Tenant

CAP_ITEM = re.compile(r"^\s*(?P<profile>[\w.+-]+)\s*[=:]\s*(?P<count>\d{1,6})\s*$")
# One toleration per line: KEY[=VALUE][:EFFECT][ for SECONDSs], "*" for the empty key (every taint).
TOLERATION_LINE = re.compile(
    r"^(?P<key>\*|[^=:\s]+)(?:=(?P<value>[^:\s]*))?(?::(?P<effect>[A-Za-z]+))?(?:\s+for\s+(?P<seconds>\d{1,9})s)?$"
)


class ProfileCapsField(forms.CharField):
    """Per-profile caps written as `1g.10gb=4, 3g.40gb=1` (commas or new lines); empty means no caps."""

    widget = forms.Textarea(attrs={"rows": 2, "spellcheck": "false", "placeholder": "1g.10gb=4, 3g.40gb=1"})

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("label", "Per-profile caps (optional)")
        kwargs.setdefault(
            "help_text", "The most slices of a profile the tenant may hold at once, e.g. 1g.10gb=4, 3g.40gb=1."
        )
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> dict[str, int]:  # type: ignore[override]
        text = super().to_python(value) or ""
        caps: dict[str, int] = {}
        for item in filter(None, (part.strip() for part in re.split(r"[,\n]", text))):
            match = CAP_ITEM.match(item)
            if match is None:
                raise forms.ValidationError(
                    f"Cannot read {item!r}: write profile=count, e.g. 1g.10gb=4.", code="invalid_cap"
                )
            caps[match["profile"]] = int(match["count"])
        return caps

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, dict):
            return ", ".join(f"{k}={v}" for k, v in value.items())
        return value


class TolerationsField(forms.CharField):
    """A pool's holder pod tolerations, one per line as `KEY[=VALUE][:EFFECT]`: no value means the operator
    Exists, `=VALUE` means Equal, `*` as the key tolerates every taint, ` for 300s` adds tolerationSeconds
    (NoExecute). Only the shape is read here; services.pools.checked_tolerations applies Kubernetes' rules."""

    widget = forms.Textarea(attrs={"rows": 2, "spellcheck": "false", "placeholder": "nvidia.com/gpu:NoSchedule"})

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("label", "Holder pod tolerations")
        kwargs.setdefault(
            "help_text",
            "Taints of the pool's nodes that the pods holding the slices tolerate, one per line: "
            "key:Effect (any value), key=value:Effect, or * for every taint. Empty: none.",
        )
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> list[dict[str, Any]]:  # type: ignore[override]
        text = super().to_python(value) or ""
        tolerations: list[dict[str, Any]] = []
        for n, line in enumerate(filter(None, (part.strip() for part in text.splitlines())), start=1):
            match = TOLERATION_LINE.match(line)
            if match is None:
                raise forms.ValidationError(
                    f"Line {n}: cannot read {line!r}: write key:Effect or key=value:Effect, "
                    "e.g. nvidia.com/gpu:NoSchedule.",
                    code="invalid_toleration",
                )
            key = "" if match["key"] == "*" else match["key"]
            toleration: dict[str, Any] = {"key": key, "operator": "Exists" if match["value"] is None else "Equal"}
            if match["value"]:
                toleration["value"] = match["value"]
            if match["effect"]:
                toleration["effect"] = match["effect"]
            if match["seconds"]:
                toleration["tolerationSeconds"] = int(match["seconds"])
            tolerations.append({k: v for k, v in toleration.items() if v != ""})
        return tolerations

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list):
            return "\n".join(format_toleration(t) for t in value)
        return value


def format_toleration(t: dict[str, Any]) -> str:
    """A toleration as TolerationsField reads it back (and as the pools page lists it)."""
    text = t.get("key") or "*"
    if t.get("operator", "Equal") == "Equal":
        text += f"={t.get('value', '')}"
    if t.get("effect"):
        text += f":{t['effect']}"
    if t.get("tolerationSeconds") is not None:
        text += f" for {t['tolerationSeconds']}s"
    return text


class NewRequestForm(forms.Form):
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), empty_label=None)
    pool = forms.ModelChoiceField(queryset=NodePool.objects.none(), empty_label=None)
    profile = forms.ChoiceField(label="MIG profile", required=False)
    # Time-sliced and MPS pools (allocations/services/share_requests.py checks them against the pool's GPU).
    memory_gib = forms.DecimalField(
        required=False,
        min_value=Decimal("0.25"),
        max_digits=6,
        decimal_places=2,
        label="GPU memory per share (GiB)",
        help_text="Time-sliced and MPS pools: the memory each share may use.",
    )
    thread_percentage = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=100,
        label="Active threads per share (%)",
        help_text="MPS pools: the share of the GPU's SMs each share's processes may use.",
    )
    count = forms.IntegerField(min_value=1, initial=1, label="Number of slices")
    lease_hours = forms.IntegerField(min_value=1, initial=8, label="Lease (hours)")
    # Compaction (issue 14): may Fatia move these slices to make room (their pods restart)? Blank: the tenant's policy.
    movable = forms.TypedChoiceField(
        required=False,
        choices=[("", "As my team decides"), ("yes", "Yes, my pods may restart"), ("no", "No, never move them")],
        coerce=lambda v: v == "yes",
        empty_value=None,
        label="May Fatia move these slices to make room?",
        help_text="A move restarts the pods using the slices; movable requests help the pool fit everyone.",
    )
    purpose = forms.CharField(
        max_length=500,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="What the slices are for; your manager reads this when approving.",
    )
    # Tenant namespaces (issue 17): where the claims go, from the tenant's list; the service checks the choice.
    namespace = forms.ChoiceField(
        required=False,
        label="Namespace for the claims",
        help_text="Run the pods that use the slices in this namespace. Your team's own namespaces are listed too.",
    )

    def __init__(self, *args: Any, tenants: QuerySet[Tenant], pools: QuerySet[NodePool], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        namespace = self.fields["namespace"]
        assert isinstance(namespace, forms.ChoiceField)  # noqa: S101
        per_tenant = {tenant.name: namespace_choices(tenant) for tenant in tenants}
        namespace.choices = [(name, [(ns, ns) for ns in names]) for name, names in per_tenant.items()]
        if all(len(names) == 1 for names in per_tenant.values()):
            # Only the portal-made namespace: nothing to choose (blank means it).
            namespace.widget = forms.HiddenInput()
        self._model_field("tenant").queryset = tenants
        self._model_field("pool").queryset = pools
        if len(tenants) == 1:
            self.fields["tenant"].widget = forms.HiddenInput()
            self.fields["tenant"].initial = tenants[0].pk
        count = self.fields["count"]
        assert isinstance(count, forms.IntegerField)  # noqa: S101 (narrows the type)
        count.max_value = settings.FATIA_MAX_SLICES_PER_REQUEST
        count.widget.attrs["max"] = settings.FATIA_MAX_SLICES_PER_REQUEST
        profile = self.fields["profile"]
        assert isinstance(profile, forms.ChoiceField)  # noqa: S101
        # Without the page's script every pool's profiles are listed, grouped by pool; the script
        # keeps only the chosen pool's. The service refuses a profile the pool does not offer.
        profile.choices = [(pool.name, [(p, p) for p in pool.profiles]) for pool in pools]

    def _model_field(self, name: str) -> forms.ModelChoiceField[Any]:
        field = self.fields[name]
        assert isinstance(field, forms.ModelChoiceField)  # noqa: S101
        return field

    def memory_mib(self) -> int | None:
        """The share's memory in MiB (the service's unit), or None when not given."""
        gib = self.cleaned_data.get("memory_gib")
        return None if gib is None else int(gib * 1024)


class DecisionForm(forms.Form):
    reason = forms.CharField(required=False, max_length=2000, label="Note (optional)")


class RejectionForm(forms.Form):
    reason = forms.CharField(max_length=2000, label="Reason")


class ExtendForm(forms.Form):
    hours = forms.IntegerField(min_value=1, label="Add hours")
    ask_booking_owner = forms.BooleanField(required=False)


class QuotaChangeForm(forms.Form):
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), empty_label=None)
    pool = forms.ModelChoiceField(queryset=NodePool.objects.none(), empty_label=None)
    compute_slices_limit = forms.IntegerField(min_value=0, label="Compute slices limit")
    memory_slices_limit = forms.IntegerField(min_value=0, label="Memory slots limit")
    profile_caps = ProfileCapsField()
    justification = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}), help_text="Why the tenant needs this quota; an admin decides."
    )

    def __init__(self, *args: Any, tenants: QuerySet[Tenant], pools: QuerySet[NodePool], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        tenant = self.fields["tenant"]
        pool = self.fields["pool"]
        assert isinstance(tenant, forms.ModelChoiceField)  # noqa: S101
        assert isinstance(pool, forms.ModelChoiceField)  # noqa: S101
        tenant.queryset = tenants
        pool.queryset = pools


class SetQuotaForm(QuotaChangeForm):
    justification = None  # type: ignore[assignment]  # an admin sets limits directly

    def __init__(self, *args: Any, tenants: QuerySet[Tenant], pools: QuerySet[NodePool], **kwargs: Any) -> None:
        super().__init__(*args, tenants=tenants, pools=pools, **kwargs)
        self.fields["tenant"].empty_label = "Choose a tenant"  # type: ignore[attr-defined]
        self.fields["pool"].empty_label = "Choose a pool"  # type: ignore[attr-defined]


NODE_SELECTOR_HELP = (
    "Kubernetes label selector: GPU nodes whose labels match join the pool by themselves, e.g. "
    "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3. Leave blank for nodes registered by hand."
)


MIG_MODE_HELP = (
    "Dynamic: NVIDIA's DynamicMIG creates each instance and picks its slot. Static: pre-created MIG devices, "
    "shaped by Fatia's node agent at the slots Fatia chooses, or by NVIDIA's MIG manager (counts, not slots). "
    "Changed only while the pool holds no live request."
)


class PoolSelectorForm(forms.Form):
    """Change one pool's node selector and MIG mode (the pools page, one small form per pool)."""

    node_selector = forms.CharField(required=False, max_length=1000, label="Node selector")
    mig_mode = forms.ChoiceField(choices=NodePool.MigMode.choices, label="MIG mode", required=False)


class PoolForm(forms.Form):
    name = forms.CharField(max_length=100)
    slug = forms.CharField(max_length=40, help_text="Lowercase letters, digits and hyphens; used in Kubernetes names.")
    gpu_model = forms.ChoiceField(label="GPU model")
    profiles = forms.MultipleChoiceField(
        required=False,
        label="Offered MIG profiles",
        help_text="Leave all unticked to offer every profile of the GPU model.",
    )
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    tolerations = TolerationsField(initial=default_tolerations)
    node_selector = forms.CharField(
        required=False,
        max_length=1000,
        label="Node selector",
        help_text=NODE_SELECTOR_HELP,
    )
    mig_mode = forms.ChoiceField(
        choices=NodePool.MigMode.choices,
        initial=NodePool.MigMode.DYNAMIC,
        required=False,
        label="MIG mode",
        help_text=MIG_MODE_HELP,
    )

    kind = forms.ChoiceField(
        choices=NodePool.Kind.choices,
        initial=NodePool.Kind.MIG,
        required=False,
        label="Sharing",
        help_text="MIG: hardware slices (memory, cache and SMs isolated). Time-sliced: whole GPUs shared by memory "
        "size, no isolation at all. MPS: a memory limit and a thread share per tenant, one fault domain. "
        "Time-sliced and MPS pools take a GPU without MIG and offer no profiles.",
    )
    sharing_interval = forms.ChoiceField(
        choices=NodePool.SharingInterval.choices,
        initial=NodePool.SharingInterval.DEFAULT,
        required=False,
        label="Time slice",
        help_text="Time-sliced pools only: NVIDIA's time-slice interval.",
    )

    def __init__(self, *args: Any, models: list[GpuModelChoice], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.models = models
        gpu_model = self.fields["gpu_model"]
        profiles = self.fields["profiles"]
        assert isinstance(gpu_model, forms.ChoiceField)  # noqa: S101
        assert isinstance(profiles, forms.MultipleChoiceField)  # noqa: S101
        gpu_model.choices = [
            ("", "Choose a GPU model"),
            ("MIG (kind MIG)", [(m.name, m.name) for m in models]),
            (
                "Shared whole (kind time-sliced or MPS)",
                [(m.name, f"{m.name} ({m.memory_mib // 1024} GiB)") for m in SHARED_MODELS],
            ),
        ]
        names = dict.fromkeys(p for m in models for p in m.profiles)
        profiles.choices = [(p, p) for p in names]

    def chosen_profiles(self) -> list[str] | None:
        """The ticked profiles, or None (every profile of the model) when none is ticked."""
        return list(self.cleaned_data["profiles"]) or None


class PoolTolerationsForm(forms.Form):
    """What the holder pods of one pool tolerate (the pools page's edit form)."""

    pool = forms.ModelChoiceField(queryset=NodePool.objects.all(), widget=forms.HiddenInput)
    tolerations = TolerationsField()
