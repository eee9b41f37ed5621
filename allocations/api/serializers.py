"""Input serializers validate shape; output serializers list their fields. No business logic."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from allocations.admission.setting import MAX_HOLD_MINUTES_LIMIT
from allocations.cohorts.config import LIMIT_FIELDS, Limits
from allocations.costs import gpu_equivalents, gpu_model_for
from allocations.models import (
    Allocation,
    ExtensionConsent,
    LeaseExtension,
    NodePool,
    Quota,
    QuotaChangeRequest,
    SlicePlacement,
)
from allocations.selectors import Balance
from allocations.sharing.catalog import is_shared_model, shared_model
from allocations.sharing.isolation import isolation_of, weaker_warning
from tenants.api.serializers import RefusesUnknownFields
from tenants.models import AuditEvent


class PoolSerializer(serializers.ModelSerializer[NodePool]):
    profile_catalog = serializers.SerializerMethodField()
    gpu_memory_mib = serializers.SerializerMethodField(help_text="Memory of one GPU (time-sliced and MPS pools).")
    isolation = serializers.SerializerMethodField(help_text="What the pool's kind isolates between tenants.")
    isolation_warning = serializers.SerializerMethodField(
        help_text="Shown before a request to a pool weaker than MIG; empty for MIG pools."
    )

    class Meta:
        model = NodePool
        fields = [
            "id",
            "name",
            "slug",
            "gpu_model",
            "profiles",
            "profile_catalog",
            "description",
            "tolerations",
            "node_selector",
            "mig_mode",
            "kind",
            "sharing_interval",
            "admission",
            "max_hold_minutes",
            "gpu_memory_mib",
            "isolation",
            "isolation_warning",
            "created_at",
        ]
        read_only_fields = fields

    def get_gpu_memory_mib(self, pool: NodePool) -> int | None:
        return shared_model(pool.gpu_model).memory_mib if pool.is_shared else None

    def get_isolation(self, pool: NodePool) -> str:
        return isolation_of(pool.kind).text

    def get_isolation_warning(self, pool: NodePool) -> str:
        return weaker_warning(pool.kind)

    def get_profile_catalog(self, pool: NodePool) -> list[dict[str, Any]]:
        from allocations.costs import gpu_model_for

        model = gpu_model_for(pool.gpu_model)
        return [
            {
                "name": p.name,
                "compute_slices": p.compute_slices,
                "memory_slices": p.memory_slices,
                "memory_mib": p.memory_mib,
                "max_count": p.max_count,
                "unconfirmed": p.unconfirmed,
            }
            for p in model.profiles
            if p.name in pool.profiles
        ]


NODE_SELECTOR_HELP = (
    "Kubernetes label selector, e.g. nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3: discovered GPU nodes whose labels "
    "match join the pool. Blank: no discovered node joins."
)


MIG_MODE_HELP = (
    "dynamic (NVIDIA DynamicMIG: the driver creates instances and picks the slot), static-agent (pre-created MIG "
    "devices; Fatia's node agent shapes them at the slots Fatia chooses) or static-manager (NVIDIA's MIG manager "
    "applies a mig-parted config Fatia writes: counts, not slots). Refused while the pool holds live requests."
)


def mig_mode_field(**kwargs: Any) -> serializers.ChoiceField:
    return serializers.ChoiceField(choices=NodePool.MigMode.choices, help_text=MIG_MODE_HELP, **kwargs)


KIND_HELP = (
    "mig (MIG slices, hardware isolation), shared (whole GPUs time-sliced by memory size: no isolation) or mps "
    "(whole GPUs shared through CUDA MPS: memory limit and thread share, one fault domain). A shared or mps pool "
    "names a GPU model of the non-MIG catalog and offers no profiles. Changes are refused while requests hold quota."
)
SHARING_INTERVAL_HELP = "Time-sliced pools: NVIDIA's TimeSlicingConfig interval (Default, Short, Medium, Long)."
ADMISSION_HELP = (
    "Dynamic MIG pools: 'hold' keeps a request whose every placement would strand room (or, while the pool first "
    "fills, that would open an empty GPU whole-GPU requests are still expected for) in the queue, at most "
    "max_hold_minutes, then places it wherever it fits; 'off' places whatever fits. Refused in static and shared pools."
)
MAX_HOLD_HELP = "The longest a held request waits before it is placed wherever it fits (1 to 1440 minutes)."


class PoolCapacitySerializer(serializers.Serializer[Any]):
    pool = serializers.IntegerField()
    mig_mode = mig_mode_field(read_only=True)
    fits_now = serializers.DictField(
        child=serializers.IntegerField(),
        help_text=(
            "Profile -> slices that fit now, each profile alone. DynamicMIG: the slots the driver can create "
            "instances in. Static MIG: the free pre-created instances (served without a layout change). Time-sliced "
            "and MPS pools: share size (e.g. '4 GiB') -> shares."
        ),
    )
    fits_after_reconfiguration = serializers.DictField(
        child=serializers.IntegerField(),
        allow_null=True,
        help_text=(
            "Static MIG only (null otherwise): profile -> slices that fit after changing the layout of free "
            "space, held instances untouched. MIG-manager mode: counts (mig-parted picks the slots), and only GPUs "
            "holding nothing are changed."
        ),
    )
    free_memory_gib = serializers.FloatField(
        required=False, help_text="Time-sliced and MPS pools: GPU memory no share holds, in GiB."
    )
    whole_gpus_free = serializers.IntegerField(
        required=False, help_text="Time-sliced and MPS pools: GPUs with no share on them."
    )


TOLERATIONS_HELP = (
    "Kubernetes tolerations of the pool's holder pods, as in a pod spec: objects with key, operator (Exists or "
    "Equal), value, effect (NoSchedule, PreferNoSchedule, NoExecute) and tolerationSeconds (NoExecute only). "
    'Default: [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}].'
)


def tolerations_field() -> serializers.ListField:
    return serializers.ListField(
        child=serializers.DictField(), required=False, max_length=32, help_text=TOLERATIONS_HELP
    )


class PoolCreateSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(max_length=100)
    slug = serializers.CharField(max_length=40)
    gpu_model = serializers.CharField(max_length=100)
    profiles = serializers.ListField(child=serializers.CharField(max_length=32), required=False, max_length=64)
    description = serializers.CharField(required=False, allow_blank=True, max_length=2000, default="")
    tolerations = tolerations_field()
    node_selector = serializers.CharField(
        required=False, allow_blank=True, max_length=1000, default="", help_text=NODE_SELECTOR_HELP
    )
    mig_mode = mig_mode_field(required=False, default=NodePool.MigMode.DYNAMIC)
    kind = serializers.ChoiceField(
        choices=NodePool.Kind.choices, required=False, default=NodePool.Kind.MIG, help_text=KIND_HELP
    )
    sharing_interval = serializers.ChoiceField(
        choices=NodePool.SharingInterval.choices,
        required=False,
        default=NodePool.SharingInterval.DEFAULT,
        help_text=SHARING_INTERVAL_HELP,
    )


class PoolUpdateSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(max_length=100, required=False)
    profiles = serializers.ListField(child=serializers.CharField(max_length=32), required=False, max_length=64)
    description = serializers.CharField(required=False, allow_blank=True, max_length=2000)
    tolerations = tolerations_field()
    node_selector = serializers.CharField(
        required=False, allow_blank=True, max_length=1000, help_text=NODE_SELECTOR_HELP
    )
    mig_mode = mig_mode_field(required=False)
    kind = serializers.ChoiceField(choices=NodePool.Kind.choices, required=False, help_text=KIND_HELP)
    gpu_model = serializers.CharField(max_length=100, required=False, help_text="Changes with the kind, if at all.")
    sharing_interval = serializers.ChoiceField(
        choices=NodePool.SharingInterval.choices, required=False, help_text=SHARING_INTERVAL_HELP
    )
    # Issue 14 (allocations/admission/): validated again by the service (refused in static and shared pools).
    admission = serializers.ChoiceField(choices=NodePool.Admission.choices, required=False, help_text=ADMISSION_HELP)
    max_hold_minutes = serializers.IntegerField(
        min_value=1, max_value=MAX_HOLD_MINUTES_LIMIT, required=False, help_text=MAX_HOLD_HELP
    )


class BalanceSerializer(serializers.Serializer[Balance]):
    id = serializers.IntegerField(source="quota_id")
    tenant = serializers.IntegerField(source="tenant_id")
    tenant_name = serializers.CharField()
    pool = serializers.IntegerField(source="pool_id")
    pool_name = serializers.CharField()
    gpu_model = serializers.CharField()
    compute_slices_limit = serializers.IntegerField(source="compute_limit")
    memory_slices_limit = serializers.IntegerField(source="memory_limit")
    compute_slices_used = serializers.IntegerField(source="compute_used")
    memory_slices_used = serializers.IntegerField(source="memory_used")
    compute_slices_free = serializers.IntegerField(source="compute_free")
    memory_slices_free = serializers.IntegerField(source="memory_free")
    gpu_equivalents_limit = serializers.FloatField()
    gpu_equivalents_used = serializers.FloatField()
    gpu_equivalents_free = serializers.FloatField()
    profile_caps = serializers.DictField(child=serializers.IntegerField())
    # Cohort membership (issue 15): null when the quota is in no cohort; null limits: no limit.
    cohort = serializers.IntegerField(source="cohort_id", allow_null=True)
    cohort_name = serializers.CharField()
    borrowing_compute_limit = serializers.IntegerField(allow_null=True)
    borrowing_memory_limit = serializers.IntegerField(allow_null=True)
    lending_compute_limit = serializers.IntegerField(allow_null=True)
    lending_memory_limit = serializers.IntegerField(allow_null=True)


def _limit_field(help_text: str) -> serializers.IntegerField:
    return serializers.IntegerField(
        min_value=0, max_value=100_000, allow_null=True, required=False, help_text=help_text + "; null: no limit"
    )


class QuotaCohortSerializer(RefusesUnknownFields):
    """PATCH /quotas/<id>/ (issue 15): the cohort of the quota's pool it belongs to, and its limits."""

    unknown_field_message = (
        "Not changed by PATCH, which sets the cohort and its limits; platform admins set a quota's limits with "
        "POST /api/v1/quotas/."
    )

    cohort = serializers.IntegerField(min_value=1, allow_null=True, required=False, help_text="null: leave it")
    borrowing_compute_limit = _limit_field("compute slices it may hold above its guarantee")
    borrowing_memory_limit = _limit_field("memory slots it may hold above its guarantee")
    lending_compute_limit = _limit_field("compute slices of its unused guarantee others may borrow")
    lending_memory_limit = _limit_field("memory slots of its unused guarantee others may borrow")


def cohort_membership(quota: Quota, given: dict[str, Any]) -> dict[str, Any]:
    """The full membership a PATCH asks for: what it gives, the rest as it is (limits cleared when leaving)."""
    cohort_id = given.get("cohort", quota.cohort_id)
    limits: dict[str, int | None] = {}
    for name in LIMIT_FIELDS:
        if name in given:
            limits[name] = given[name]
        else:
            limits[name] = None if cohort_id is None else getattr(quota, name)
    return {"cohort_id": cohort_id, "limits": Limits(**limits)}


@extend_schema_field({"oneOf": [{"type": "integer", "minimum": 1}, {"type": "string", "maxLength": 50}]})
class PoolRefField(serializers.Field):  # type: ignore[type-arg]
    """A pool named by id (a number, or a text of ASCII digits) or by slug; the view finds it (existing_pool)."""

    default_error_messages = {"invalid": "A pool's id (a number) or its slug."}

    def to_internal_value(self, data: Any) -> int | str:
        if isinstance(data, int) and not isinstance(data, bool) and data >= 1:
            return data
        if not isinstance(data, str):
            self.fail("invalid")
        # A slug as any text field takes it: trimmed, no NUL or lone surrogate (PostgreSQL refuses them: a 500).
        text = serializers.CharField(max_length=50).run_validation(data)
        # isascii: str.isdigit also takes "²", which int() refuses.
        return int(text) if text.isascii() and text.isdigit() else text

    def to_representation(self, value: Any) -> Any:
        return value


@extend_schema_field({"oneOf": [{"type": "integer", "minimum": 1}, {"type": "string", "maxLength": 50}]})
class TenantRefField(PoolRefField):
    """A tenant named by id or by slug, read as a pool is; the view finds it among the caller's (visible_tenant)."""

    default_error_messages = {"invalid": "A tenant's id (a number) or its slug."}


class QuotaSetSerializer(serializers.Serializer[Any]):
    tenant = TenantRefField(help_text="The tenant's id or its slug.")
    pool = PoolRefField(help_text="The pool's id or its slug.")
    compute_slices_limit = serializers.IntegerField(min_value=0, max_value=100_000)
    memory_slices_limit = serializers.IntegerField(min_value=0, max_value=100_000)
    profile_caps = serializers.DictField(child=serializers.IntegerField(min_value=0), required=False, default=dict)


class QuotaChangeSerializer(serializers.ModelSerializer[QuotaChangeRequest]):
    requested_by = serializers.CharField(source="requested_by.username", read_only=True)
    decided_by = serializers.CharField(source="decided_by.username", read_only=True, default=None, allow_null=True)

    class Meta:
        model = QuotaChangeRequest
        fields = [
            "id",
            "tenant",
            "pool",
            "requested_by",
            "compute_slices_limit",
            "memory_slices_limit",
            "profile_caps",
            "justification",
            "status",
            "decided_by",
            "decided_at",
            "decision_reason",
            "created_at",
        ]
        read_only_fields = fields


class QuotaChangeCreateSerializer(serializers.Serializer[Any]):
    tenant = serializers.IntegerField(min_value=1)
    pool = serializers.IntegerField(min_value=1)
    compute_slices_limit = serializers.IntegerField(min_value=0, max_value=100_000)
    memory_slices_limit = serializers.IntegerField(min_value=0, max_value=100_000)
    profile_caps = serializers.DictField(child=serializers.IntegerField(min_value=0), required=False, default=dict)
    justification = serializers.CharField(max_length=2000)


class DecisionSerializer(serializers.Serializer[Any]):
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class RejectionSerializer(serializers.Serializer[Any]):
    reason = serializers.CharField(max_length=2000)


class ExtendSerializer(serializers.Serializer[Any]):
    hours = serializers.IntegerField(min_value=1, max_value=24 * 365)
    ask_booking_owner = serializers.BooleanField(
        required=False,
        default=False,
        help_text="When the longer lease would use room a booking holds: ask the booking's owner to agree (the "
        "extension waits, 202) instead of refusing it (400).",
    )


class LeaseExtensionSerializer(serializers.ModelSerializer[LeaseExtension]):
    """A lease extension: `approved` ones were added to the lease; `pending` ones wait for a tenant manager."""

    requested_by = serializers.CharField(source="requested_by.username", read_only=True)
    decided_by = serializers.CharField(source="decided_by.username", read_only=True, allow_null=True, default=None)
    lease_hours_after = serializers.IntegerField(
        read_only=True, help_text="The whole lease with this extension, as it stood when it was asked for or applied."
    )
    waiting_for_bookings = serializers.SerializerMethodField(
        help_text="Bookings whose owners have not answered yet: the extension waits for them before a manager."
    )

    class Meta:
        model = LeaseExtension
        fields = [
            "id",
            "allocation",
            "hours",
            "status",
            "auto_approved",
            "lease_hours_after",
            "waiting_for_bookings",
            "requested_by",
            "decided_by",
            "decided_at",
            "decision_reason",
            "created_at",
        ]
        read_only_fields = fields

    def get_waiting_for_bookings(self, obj: LeaseExtension) -> list[int]:
        return sorted(c.booking_id for c in obj.consents.all() if c.status == ExtensionConsent.Status.PENDING)


class ExtensionConsentSerializer(serializers.ModelSerializer[ExtensionConsent]):
    """A booking owner's answer to a longer lease that would use the booking's room."""

    allocation = serializers.IntegerField(source="extension.allocation_id", read_only=True)
    hours = serializers.IntegerField(source="extension.hours", read_only=True)
    requested_by = serializers.CharField(source="extension.requested_by.username", read_only=True)
    decided_by = serializers.CharField(source="decided_by.username", read_only=True, allow_null=True, default=None)

    class Meta:
        model = ExtensionConsent
        fields = [
            "id",
            "extension",
            "allocation",
            "hours",
            "booking",
            "status",
            "requested_by",
            "decided_by",
            "decided_at",
            "decision_reason",
            "created_at",
        ]
        read_only_fields = fields


class PlacementSerializer(serializers.ModelSerializer[SlicePlacement]):
    node = serializers.CharField(source="gpu.node.name")
    gpu_index = serializers.IntegerField(source="gpu.index")

    class Meta:
        model = SlicePlacement
        fields = ["node", "gpu_index", "profile", "start", "size", "device_name", "memory_mib"]
        read_only_fields = fields


class AuditEventSerializer(serializers.ModelSerializer[AuditEvent]):
    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "created_at",
            "actor_name",
            "tenant",
            "verb",
            "object_type",
            "object_id",
            "before",
            "after",
        ]
        read_only_fields = fields


# A list row's fields in the contract's order (the OpenAPI schema; allocation_row writes them in it too).
ALLOCATION_FIELDS = (
    "id",
    "uuid",
    "tenant",
    "tenant_name",
    "pool",
    "pool_name",
    "requested_by",
    "profile",
    "count",
    "lease_hours",
    "purpose",
    "memory_mib",
    "thread_percentage",
    "movable",
    "compute_slices",
    "memory_slices",
    "gpu_equivalents",
    "pool_kind",
    "isolation_warning",
    "is_borrowed",
    "borrowed_compute_slices",
    "borrowed_memory_slices",
    "reclaim_at",
    "status",
    "held",
    "hold_outcome",
    "hold_ended_at",
    "status_message",
    "auto_approved",
    "decided_at",
    "decision_reason",
    "claim_name",
    "activated_at",
    "lease_expires_at",
    "ended_at",
    "created_at",
    "updated_at",
)
# The fields a row reads through a join or computes; allocation_row builds them.
JOINED_FIELDS = frozenset(
    {
        "tenant",
        "tenant_name",
        "pool",
        "pool_name",
        "requested_by",
        "gpu_equivalents",
        "pool_kind",
        "isolation_warning",
        "is_borrowed",
    }
)
# Plain columns a list row copies as they are; dates are formatted by allocation_row.
ROW_FIELDS = tuple(name for name in ALLOCATION_FIELDS if name not in JOINED_FIELDS)


class AllocationSerializer(serializers.ModelSerializer[Allocation]):
    """One request as lists show it. Its fields (ALLOCATION_FIELDS) are the contract (and the OpenAPI schema);
    `to_representation` builds the same dict directly (allocation_row), because DRF's per-field
    machinery and model instances are most of the list endpoint's CPU time (docs/benchmarks.md, API)."""

    tenant_name = serializers.CharField(source="tenant.name", read_only=True)
    pool_name = serializers.CharField(source="pool.name", read_only=True)
    requested_by = serializers.CharField(source="requested_by.username", read_only=True)
    gpu_equivalents = serializers.SerializerMethodField()
    pool_kind = serializers.CharField(source="pool.kind", read_only=True)
    isolation_warning = serializers.SerializerMethodField(
        help_text="What the pool does not isolate, for requests in time-sliced and MPS pools; empty for MIG."
    )
    is_borrowed = serializers.SerializerMethodField(
        help_text="Holds slices borrowed from its cohort (issue 15): the borrowed_* part above its tenant's guarantee."
    )
    hold_outcome = serializers.ChoiceField(
        choices=Allocation.HoldOutcome.choices,
        allow_blank=True,
        read_only=True,
        help_text="How its hold ended (issue 14): placed after a release, placed at its deadline, or lost (it no "
        "longer fit and waited for room); blank while held or never held.",
    )
    hold_ended_at = serializers.DateTimeField(
        allow_null=True, read_only=True, help_text="When its hold ended; null while held or never held."
    )

    class Meta:
        model = Allocation
        fields = list(ALLOCATION_FIELDS)
        read_only_fields = fields

    def get_gpu_equivalents(self, instance: Allocation) -> float:
        return row_gpu_equivalents(
            instance.pool.gpu_model,
            instance.compute_slices,
            instance.memory_slices,
            instance.memory_mib,
            instance.count,
        )

    def get_isolation_warning(self, instance: Allocation) -> str:
        return weaker_warning(instance.pool.kind)

    def get_is_borrowed(self, instance: Allocation) -> bool:
        return instance.is_borrowed

    def to_representation(self, instance: Allocation) -> dict[str, Any]:
        return allocation_row(
            {
                **{f: getattr(instance, f) for f in ROW_FIELDS},
                "tenant_id": instance.tenant_id,
                "pool_id": instance.pool_id,
                "tenant__name": instance.tenant.name,
                "pool__name": instance.pool.name,
                "pool__gpu_model": instance.pool.gpu_model,
                "pool__kind": instance.pool.kind,
                "requested_by__username": instance.requested_by.username,
            }
        )


# What the list endpoint reads with queryset.values(): no model instances are built for a page.
ROW_COLUMNS = (
    *ROW_FIELDS,
    "tenant_id",
    "pool_id",
    "tenant__name",
    "pool__name",
    "pool__gpu_model",
    "pool__kind",
    "requested_by__username",
)


def row_gpu_equivalents(
    gpu_model: str, compute_slices: int, memory_slices: int, memory_mib: int | None, count: int
) -> float:
    """A request's share of whole GPUs: MIG max(c/C, m/M); a share of a GPU shared whole its exact memory
    fraction (allocations/sharing/units.py)."""
    if memory_mib is not None and is_shared_model(gpu_model):
        return round(memory_mib * count / shared_model(gpu_model).memory_mib, 3)
    return round(gpu_equivalents(gpu_model_for(gpu_model), compute_slices, memory_slices), 3)


def allocation_row(v: dict[str, Any]) -> dict[str, Any]:
    """AllocationSerializer's output from a `.values(*ROW_COLUMNS)` dict, in the declared field order."""
    return {
        "id": v["id"],
        "uuid": str(v["uuid"]),
        "tenant": v["tenant_id"],
        "tenant_name": v["tenant__name"],
        "pool": v["pool_id"],
        "pool_name": v["pool__name"],
        "requested_by": v["requested_by__username"],
        "profile": v["profile"],
        "count": v["count"],
        "lease_hours": v["lease_hours"],
        "purpose": v["purpose"],
        "memory_mib": v["memory_mib"],
        "thread_percentage": v["thread_percentage"],
        "movable": v["movable"],
        "compute_slices": v["compute_slices"],
        "memory_slices": v["memory_slices"],
        "gpu_equivalents": row_gpu_equivalents(
            v["pool__gpu_model"], v["compute_slices"], v["memory_slices"], v["memory_mib"], v["count"]
        ),
        "pool_kind": v["pool__kind"],
        "isolation_warning": weaker_warning(v["pool__kind"]),
        "is_borrowed": is_borrowed(v["status"], v["borrowed_compute_slices"], v["borrowed_memory_slices"]),
        "borrowed_compute_slices": v["borrowed_compute_slices"],
        "borrowed_memory_slices": v["borrowed_memory_slices"],
        "reclaim_at": _iso(v["reclaim_at"]),
        "status": v["status"],
        "held": v["held"],
        "hold_outcome": v["hold_outcome"],
        "hold_ended_at": _iso(v["hold_ended_at"]),
        "status_message": v["status_message"],
        "auto_approved": v["auto_approved"],
        "decided_at": _iso(v["decided_at"]),
        "decision_reason": v["decision_reason"],
        "claim_name": v["claim_name"],
        "activated_at": _iso(v["activated_at"]),
        "lease_expires_at": _iso(v["lease_expires_at"]),
        "ended_at": _iso(v["ended_at"]),
        "created_at": _iso(v["created_at"]),
        "updated_at": _iso(v["updated_at"]),
    }


def is_borrowed(status: str, borrowed_compute: int, borrowed_memory: int) -> bool:
    """Holds a borrowed part now: a queued request gave its back while it waits (allocations/services/cohorts.py)."""
    holding = status in Allocation.QUOTA_HOLDING and status != Allocation.Status.QUEUED
    return holding and bool(borrowed_compute or borrowed_memory)


def _iso(value: datetime | None) -> str | None:
    """The same ISO 8601 form DRF's DateTimeField writes (UTC as 'Z')."""
    if value is None:
        return None
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


class IdleStateSerializer(serializers.Serializer[Any]):
    """Idle reclaim's flag on an active request (docs/agent.md, "Idle reclaim"); null fields when not flagged."""

    idle_since = serializers.DateTimeField(allow_null=True, help_text="Every slice idle since.")
    warned_at = serializers.DateTimeField(allow_null=True)
    release_at = serializers.DateTimeField(
        allow_null=True, help_text="Released then if still idle; POST .../keep/ to keep it."
    )
    snoozed_until = serializers.DateTimeField(allow_null=True, help_text="Kept: not flagged again before.")

    @staticmethod
    def of(allocation: Allocation) -> dict[str, Any]:
        return IdleStateSerializer(
            {
                "idle_since": allocation.idle_since,
                "warned_at": allocation.idle_warned_at,
                "release_at": allocation.idle_release_at,
                "snoozed_until": allocation.idle_snoozed_until,
            }
        ).data


class AllocationDetailSerializer(AllocationSerializer):
    namespace = serializers.CharField(
        read_only=True, help_text="The Kubernetes namespace of the claim (the tenant's): run pods that use it there."
    )
    claim_names = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text=(
            "Every ResourceClaim of the request, in slice order (empty until provisioned): one for up to 32 slices "
            "(claim_name), several for more (a claim holds at most 32 devices). Reference all of them in the pod."
        ),
    )
    placements = PlacementSerializer(many=True, read_only=True)
    timeline = serializers.SerializerMethodField()
    idle = IdleStateSerializer(read_only=True)

    class Meta(AllocationSerializer.Meta):
        fields = [*AllocationSerializer.Meta.fields, "namespace", "claim_names", "placements", "timeline", "idle"]
        read_only_fields = fields

    def to_representation(self, instance: Allocation) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["namespace"] = instance.namespace
        data["claim_names"] = instance.claim_names
        data["placements"] = PlacementSerializer(instance.placements.all(), many=True).data
        data["timeline"] = self.get_timeline(instance)
        data["idle"] = IdleStateSerializer.of(instance)
        return data

    def get_timeline(self, allocation: Allocation) -> list[dict[str, Any]]:
        from allocations.selectors import allocation_timeline

        return AuditEventSerializer(allocation_timeline(allocation), many=True).data  # type: ignore[return-value]


COUNT_MESSAGE = f"Ask for between 1 and {settings.FATIA_MAX_SLICES_PER_REQUEST} slices."
# The longest lease any tenant may allow (tenants.models.Tenant.max_lease_hours).
MAX_LEASE_HOURS = 24 * 365


class AllocationCreateSerializer(serializers.Serializer[Any]):
    tenant = serializers.IntegerField(min_value=1, required=False)
    pool = serializers.IntegerField(min_value=1)
    profile = serializers.CharField(
        max_length=32, required=False, default="", help_text="MIG pools: the profile of each slice."
    )
    memory_mib = serializers.IntegerField(
        min_value=1,
        max_value=1_048_576,
        required=False,
        default=None,
        help_text="Time-sliced and MPS pools: the GPU memory of each share in MiB (at most the GPU's).",
    )
    thread_percentage = serializers.IntegerField(
        min_value=1,
        max_value=100,
        required=False,
        default=None,
        help_text="MPS pools: each share's active-thread percentage (1-100).",
    )
    movable = serializers.BooleanField(
        required=False,
        default=None,
        allow_null=True,
        help_text="Compaction may move the slices (their pods restart); unset: the tenant's policy.",
    )
    namespace = serializers.CharField(
        max_length=63,
        required=False,
        allow_blank=True,
        default="",
        help_text="Where the claims go: one of the tenant's namespaces (GET /api/v1/namespaces/); empty: the "
        "portal-made one.",
    )
    # The schema states the ranges; the messages say what the tenant's policy allows, as the service's do.
    count = serializers.IntegerField(
        min_value=1,
        max_value=settings.FATIA_MAX_SLICES_PER_REQUEST,
        error_messages={
            "min_value": COUNT_MESSAGE,
            "max_value": COUNT_MESSAGE,
        },
        help_text="Between 1 and FATIA_MAX_SLICES_PER_REQUEST (56 by default).",
    )
    lease_hours = serializers.IntegerField(
        min_value=1,
        max_value=MAX_LEASE_HOURS,
        help_text="Between 1 and the tenant's max_lease_hours (at most a year).",
    )
    purpose = serializers.CharField(max_length=500)
