"""Node pools, the fleet, tenant quotas and slice allocations.

Quota is size-aware: a slice costs its profile's compute slices (of 7 on most GPUs) and memory
slots (of 8), as the DRA counters count them. A tenant's quota per pool bounds both dimensions.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import models
from django.db.models import Q

from tenants.models import Tenant, managed_tenant_ids_subquery, member_tenant_ids, slug_validator

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User


# The `profile` of a request in a shared or MPS pool: such a request names a memory size, not a MIG profile.
SHARE_PROFILE = "share"


def default_tolerations() -> list[dict[str, object]]:
    """What a holder pod tolerates unless a pool says otherwise: the taint GPU nodes usually carry so that only
    GPU workloads land there (GKE, AKS and most GPU operator set-ups put `nvidia.com/gpu` NoSchedule on them)."""
    return [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


class NodePool(models.Model):
    """A set of nodes with one GPU model, and the MIG profiles offered on it.

    Invariants: every name in `profiles` is a profile of `gpu_model` in the MIG catalog, and `tolerations`
    are valid Kubernetes tolerations in the API's JSON form (validated by `create_node_pool` /
    `update_node_pool`); the holder pods of the pool's requests carry them.
    """

    name = models.CharField(max_length=100, unique=True)
    slug = models.CharField(max_length=40, unique=True, validators=[slug_validator])
    gpu_model = models.CharField(max_length=100)
    profiles = models.JSONField(default=list, help_text="Offered MIG profile names.")
    description = models.TextField(blank=True)
    tolerations = models.JSONField(
        default=default_tolerations, blank=True, help_text="Tolerations of the holder pods on this pool's nodes."
    )
    # Kubernetes: the GPU nodes whose labels match join the pool by themselves (allocations/cluster/discovery.py).
    # Label selector syntax (allocations/cluster/labels.py), validated by the pool services; blank: no discovered
    # node joins (nodes registered by hand, as on the simulated backend).
    node_selector = models.CharField(max_length=1000, blank=True)

    class MigMode(models.TextChoices):
        # NVIDIA's DynamicMIG: the driver creates the instance at prepare time and picks the slot (first fit).
        DYNAMIC = "dynamic", "Dynamic (DynamicMIG)"
        # Pre-created MIG devices; Fatia's node agent creates and destroys instances at the slots Fatia chooses.
        STATIC_AGENT = "static-agent", "Static, node agent"
        # Pre-created MIG devices; NVIDIA's MIG manager applies a mig-parted config Fatia writes (counts, no slots).
        STATIC_MANAGER = "static-manager", "Static, MIG manager"

    mig_mode = models.CharField(max_length=16, choices=MigMode.choices, default=MigMode.DYNAMIC)

    class Kind(models.TextChoices):
        # Hardware partitions: memory, cache and SMs isolated per slice (the pool's `profiles`, `mig_mode`).
        MIG = "mig", "MIG"
        # Whole GPUs shared by memory size; the driver's time-slicing: no isolation at all (issue 13).
        SHARED = "shared", "Time-sliced"
        # Whole GPUs shared through CUDA MPS: a pinned memory limit and an active-thread share, one fault domain.
        MPS = "mps", "MPS"

    # Database default too: rows written by code that predates the field still insert (rolling deploys, tests).
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.MIG, db_default=Kind.MIG)

    class SharingInterval(models.TextChoices):
        # NVIDIA's TimeSlicingConfig.interval values (the driver's opaque GpuConfig); only time-sliced pools use it.
        DEFAULT = "Default", "Default"
        SHORT = "Short", "Short"
        MEDIUM = "Medium", "Medium"
        LONG = "Long", "Long"

    sharing_interval = models.CharField(
        max_length=8, choices=SharingInterval.choices, default=SharingInterval.DEFAULT, db_default="Default"
    )

    class Admission(models.TextChoices):
        # Whatever fits is placed (the engine's `ours`).
        OFF = "off", "Off: place whatever fits"
        # Issue 14 (allocations/admission/): a request whose every placement would strand room waits in the queue,
        # at most `max_hold_minutes`, then is placed wherever it fits (the engine's `ours-hold`, forced).
        HOLD = "hold", "Hold requests that would strand room"

    admission = models.CharField(max_length=8, choices=Admission.choices, default=Admission.OFF, db_default="off")
    max_hold_minutes = models.PositiveIntegerField(default=15, db_default=15)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def holds_requests(self) -> bool:
        """Admission is on (issue 14): a request that would strand room may wait (allocations/admission/)."""
        return self.admission == self.Admission.HOLD

    @property
    def is_static(self) -> bool:
        """Static MIG: the driver publishes pre-created MIG devices with a `uuid`, so a claim can pin one."""
        return self.mig_mode != self.MigMode.DYNAMIC

    @property
    def is_shared(self) -> bool:
        """Whole GPUs shared by memory size (time-sliced or MPS) instead of MIG slices."""
        return self.kind != self.Kind.MIG


class Node(models.Model):
    """A GPU node, as the workers (simulated backend) or fleet discovery (Kubernetes) last saw it.

    `pool` is None for a GPU node that discovery found but that matches no pool's node selector (or several, or
    whose GPUs are not the pool's model: `pool_note` says which); the admin's fleet page lists those. Discovery
    keeps `labels`, `driver_version` and `dynamic_mig` as the cluster publishes them; `discovered_at` is None
    for a node registered by hand.
    """

    class State(models.TextChoices):
        READY = "ready", "Ready"
        CORDONED = "cordoned", "Cordoned"
        RECONFIGURING = "reconfiguring", "Reconfiguring"
        AGENT_SILENT = "agent-silent", "Agent silent"
        GONE = "gone", "Gone from the cluster"

    pool = models.ForeignKey(NodePool, on_delete=models.PROTECT, related_name="nodes", null=True, blank=True)
    name = models.CharField(max_length=253, unique=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.READY)
    labels = models.JSONField(default=dict, blank=True)
    driver_version = models.CharField(max_length=64, blank=True)
    # On: the driver publishes every MIG profile x placement with counters (DynamicMIG); off: static MIG devices
    # or whole GPUs only; None: no complete set of slices seen yet.
    dynamic_mig = models.BooleanField(null=True, blank=True)
    pool_note = models.CharField(max_length=300, blank=True)
    discovered_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class GpuFigures(models.Model):
    """What NVIDIA's DRA driver publishes for one GPU, stripped of what names that GPU: its counter set and its
    MIG devices (profile x placement, each with the counters it consumes). GPUs that publish the same figures
    (every GPU of one model and driver, usually) share one row, found by `digest`; rows are never changed.

    `counters`: {counter name: value}, memory in MiB, memory-slice-<i> included. `devices`: one entry per MIG
    device in the driver's order, {"suffix": "mig-1g10gb-19-0" (the name after "gpu-<minor>-"), "profile",
    "profile_id", "start", "size" (memory slots consumed), "counters": {name: value} without memory slices}.
    """

    digest = models.CharField(max_length=64, unique=True)
    product = models.CharField(max_length=100, blank=True)
    counters = models.JSONField(default=dict)
    devices = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.product or 'GPU'} figures {self.digest[:8]}"


class Gpu(models.Model):
    """One physical GPU of a node; `index` is its minor number (gpu-<index> in DRA device names).

    Discovered GPUs carry what the driver publishes: UUID (the parentUUID of its MIG devices), product, memory,
    PCI bus id and `figures` (None: no slices seen, the catalog's figures apply)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=64, blank=True)
    product = models.CharField(max_length=100, blank=True)
    memory_mib = models.PositiveIntegerField(null=True, blank=True)
    pci_bus_id = models.CharField(max_length=32, blank=True)
    figures = models.ForeignKey(GpuFigures, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    # Static MIG: the MIG devices that exist on this GPU as its node last published them, in start order:
    # [{"profile", "start", "size", "uuid", "device"}] (device: the driver's name). Empty with DynamicMIG.
    static_instances = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["node__name", "index"]
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="gpu_unique_node_index"),
        ]

    def __str__(self) -> str:
        return f"{self.node.name}/gpu-{self.index}"


class Cohort(models.Model):
    """Tenants of one pool that lend each other unused guarantee (Kueue's cohort, per pool; issue 15).

    A member's quota is its guarantee. It may borrow the unused guarantee other members lend, up to its borrowing
    limit, and lend at most its lending limit (both on `Quota`). When a lender needs its guarantee back, borrowed
    allocations get `reclaim_grace_minutes` of notice and are then taken back (allocations/services/cohorts*).
    """

    pool = models.ForeignKey(NodePool, on_delete=models.CASCADE, related_name="cohorts")
    name = models.CharField(max_length=100)
    reclaim_grace_minutes = models.PositiveIntegerField(default=30)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["pool__name", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["pool", "name"],
                name="cohort_unique_pool_name",
                violation_error_message="This pool already has a cohort with this name.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} in {self.pool}"


class QuotaQuerySet(models.QuerySet["Quota"]):
    def for_user(self, user: User | AnonymousUser) -> QuotaQuerySet:
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        return self.filter(tenant_id__in=member_tenant_ids(user))


class Quota(models.Model):
    """A tenant's quota in one pool, in compute slices and memory slots, with usage counters.

    Invariants: used counters never go negative (schema); they only move with F() inside services
    that hold this row's lock (`lock_quota`), so usage can never pass the limit through a race.
    A limit may be lowered below current usage: running slices keep running, new ones wait.
    `profile_caps` optionally bounds the number of held slices per profile name.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="quotas")
    pool = models.ForeignKey(NodePool, on_delete=models.CASCADE, related_name="quotas")
    compute_slices_limit = models.PositiveIntegerField(default=0)
    memory_slices_limit = models.PositiveIntegerField(default=0)
    compute_slices_used = models.IntegerField(default=0)
    memory_slices_used = models.IntegerField(default=0)
    profile_caps = models.JSONField(default=dict, blank=True)
    # Borrowing and lending (issue 15, Kueue's borrowingLimit / lendingLimit): the cohort of this pool the tenant
    # belongs to, if any (same pool: checked by the services). NULL limits: borrow whatever the cohort lends, lend all
    # unused guarantee.
    cohort = models.ForeignKey(Cohort, on_delete=models.SET_NULL, null=True, blank=True, related_name="quotas")
    borrowing_compute_limit = models.PositiveIntegerField(null=True, blank=True)
    borrowing_memory_limit = models.PositiveIntegerField(null=True, blank=True)
    lending_compute_limit = models.PositiveIntegerField(null=True, blank=True)
    lending_memory_limit = models.PositiveIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = QuotaQuerySet.as_manager()

    class Meta:
        ordering = ["tenant__name", "pool__name"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "pool"],
                name="quota_unique_tenant_pool",
                violation_error_message="This tenant already has a quota in this pool.",
            ),
            models.CheckConstraint(
                condition=Q(compute_slices_used__gte=0) & Q(memory_slices_used__gte=0),
                name="quota_usage_not_negative",
                violation_error_message="Quota usage cannot be negative.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant} in {self.pool}"


class QuotaChangeRequestQuerySet(models.QuerySet["QuotaChangeRequest"]):
    def for_user(self, user: User | AnonymousUser) -> QuotaChangeRequestQuerySet:
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        return self.filter(tenant_id__in=member_tenant_ids(user))


class QuotaChangeRequest(models.Model):
    """A tenant manager's request for new quota limits in a pool, decided by a platform admin."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="quota_change_requests")
    pool = models.ForeignKey(NodePool, on_delete=models.CASCADE, related_name="+")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    compute_slices_limit = models.PositiveIntegerField()
    memory_slices_limit = models.PositiveIntegerField()
    profile_caps = models.JSONField(default=dict, blank=True)
    justification = models.TextField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = models.TextField(blank=True)
    # NULL, not "", when absent: the unique constraint must let many requests go without a key.
    idempotency_key = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = QuotaChangeRequestQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "requested_by", "idempotency_key"],
                name="quota_change_unique_idempotency_key",
            ),
        ]

    def __str__(self) -> str:
        return f"Quota change #{self.pk} for {self.tenant} in {self.pool}"


class AllocationQuerySet(models.QuerySet["Allocation"]):
    def for_user(self, user: User | AnonymousUser) -> AllocationQuerySet:
        """Allocations of the tenants the user belongs to (all of them for staff)."""
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        return self.filter(tenant_id__in=member_tenant_ids(user))

    def holding_quota(self) -> AllocationQuerySet:
        return self.filter(status__in=Allocation.QUOTA_HOLDING)

    def managed_by(self, user: User | AnonymousUser) -> AllocationQuerySet:
        """Allocations the user may approve or reject: their managed tenants' (all for staff)."""
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        return self.filter(tenant_id__in=managed_tenant_ids_subquery(user))


class Allocation(models.Model):
    """A request for `count` MIG slices of one profile in one pool, and its whole life.

    PENDING -> APPROVED -> PROVISIONING -> ACTIVE -> RELEASING -> RELEASED (or EXPIRED when the
    lease ran out); APPROVED -> QUEUED when no layout of the pool fits it, QUEUED -> PROVISIONING or ACTIVE
    when the queue admits it (services/queue.py); PENDING -> REJECTED; PENDING, APPROVED or QUEUED ->
    WITHDRAWN (no slice was ever created); any live state -> FAILED. Quota is held from APPROVED until the
    slices are gone (RELEASED, EXPIRED, FAILED) or the request is withdrawn, QUEUED included: a queued
    request is admitted without a second quota check, and a tenant cannot queue past its quota (docs/queue.md).
    `compute_slices` / `memory_slices` are the request's total cost, fixed at creation.
    """

    class Status(models.TextChoices):
        PENDING = "pending", "Pending approval"
        APPROVED = "approved", "Approved"
        PROVISIONING = "provisioning", "Provisioning"
        ACTIVE = "active", "Active"
        RELEASING = "releasing", "Releasing"
        RELEASED = "released", "Released"
        # A request given up before any slice existed: its own state, so lists and counts do not call it
        # Released (issue 9). Terminal and never quota-holding, like the other end states.
        WITHDRAWN = "withdrawn", "Withdrawn"
        REJECTED = "rejected", "Rejected"
        EXPIRED = "expired", "Expired"
        FAILED = "failed", "Failed"
        # Approved, but the pool has no layout that fits it yet (issue 15): waits in the pool's queue and is
        # admitted when a release, expiry, compaction or new node makes room.
        QUEUED = "queued", "Queued"

    QUOTA_HOLDING = (Status.APPROVED, Status.QUEUED, Status.PROVISIONING, Status.ACTIVE, Status.RELEASING)
    TERMINAL = (Status.RELEASED, Status.WITHDRAWN, Status.REJECTED, Status.EXPIRED, Status.FAILED)

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="allocations")
    pool = models.ForeignKey(NodePool, on_delete=models.PROTECT, related_name="allocations")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    profile = models.CharField(max_length=32)
    count = models.PositiveIntegerField()
    lease_hours = models.PositiveIntegerField()
    purpose = models.CharField(max_length=500)
    compute_slices = models.PositiveIntegerField()
    memory_slices = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING, db_index=True)
    auto_approved = models.BooleanField(default=False)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = models.TextField(blank=True)
    claim_name = models.CharField(max_length=253, blank=True)
    status_message = models.TextField(blank=True)
    activated_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True, db_index=True)
    expiry_warning_sent_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    # What RELEASING ends in: RELEASED for a release by a person, EXPIRED when the lease ran out.
    end_state = models.CharField(max_length=16, choices=Status.choices, blank=True)
    # NULL, not "", when absent: the unique constraint must let many requests go without a key.
    idempotency_key = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001
    # Idle reclaim (allocations/services/reclaim.py): set together when every slice has been idle for the tenant's
    # idle time and the owner was warned; cleared by any use, by "Keep it" and when telemetry stops.
    idle_since = models.DateTimeField(null=True, blank=True)
    # Shared and MPS pools (issue 13; `profile` is SHARE_PROFILE there): the GPU memory of each share, and for MPS
    # its active-thread percentage (1-100). NULL in MIG pools.
    memory_mib = models.PositiveIntegerField(null=True, blank=True)
    thread_percentage = models.PositiveSmallIntegerField(null=True, blank=True)
    idle_warned_at = models.DateTimeField(null=True, blank=True)
    idle_release_at = models.DateTimeField(null=True, blank=True)
    # "Keep it": not flagged idle again before this.
    idle_snoozed_until = models.DateTimeField(null=True, blank=True)
    # The owner accepts that a compaction move restarts their pods (issue 14); defaults to the tenant's policy.
    movable = models.BooleanField(default=False, db_default=False)
    # Queueing (issue 15): order inside a tenant (higher first, set by its managers) and when it started waiting.
    priority = models.SmallIntegerField(default=0, db_default=0)
    queued_at = models.DateTimeField(null=True, blank=True)
    # The namespace its claims go to, chosen from the tenant's list (issue 17); empty: the portal-made one. Read
    # it through `namespace`.
    namespace_name = models.CharField(max_length=63, blank=True, default="", db_default="")
    # Borrowing (issue 15): the part of this allocation above its tenant's guarantee when it was admitted (0: none),
    # shown as "borrowed" to everyone. Under reclaim: notice given at `reclaim_notice_at`, taken back at `reclaim_at`,
    # for the lender's request `reclaimed_for`.
    borrowed_compute_slices = models.PositiveIntegerField(default=0, db_default=0)
    borrowed_memory_slices = models.PositiveIntegerField(default=0, db_default=0)
    reclaim_notice_at = models.DateTimeField(null=True, blank=True)
    reclaim_at = models.DateTimeField(null=True, blank=True)
    reclaimed_for = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    # A lender's request while its notices run (issue 15, allocations/cohorts/fence.py): the slots planned for it in
    # the room its reclaim frees, as [{"gpu", "node", "index", "start", "size"}], held from every other request
    # until it is admitted, withdrawn or its notices are called off. Empty: nothing held.
    reclaim_room = models.JSONField(default=list, blank=True)
    # Kubernetes compaction (issue 14): how many times a move replaced its claim and holder pod. A move makes the
    # new claim before deleting the old one, so the two need different names: generation n > 0 adds "-m<n>".
    claim_generation = models.PositiveSmallIntegerField(default=0, db_default=0)
    # Admission (issue 14, allocations/admission/): held in the queue because every placement would strand room,
    # until this time at the latest; then placed wherever it fits. Set when first held, kept until it starts.
    held_until = models.DateTimeField(null=True, blank=True)
    # Waits in the queue by the pool's choice now (admission/hold.py `is_held`): set with the hold, cleared in the
    # same transaction as whatever ends it (placed, forced, waiting for room instead, withdrawn, failed). Not
    # `held_until` itself: the deadline outlives the hold (a forced request that no longer fits waits for room,
    # still planned forced, so a later pass cannot hold it anew and restart its bound). Only a QUEUED request is
    # held (constraint below).
    held = models.BooleanField(default=False, db_default=False)

    class HoldOutcome(models.TextChoices):
        PLACED = "placed", "placed on a retry"
        FORCED = "forced", "placed forced at its deadline"
        LOST = "lost", "no longer fit: waits for room"

    # How its hold ended, and when (issue 14): set once, in the transaction that ends it (services/admission.py
    # `end_hold`); blank and null while held or never held. The pool's hold policy prices its next holds of the
    # profile by these (allocations/admission/outcomes.py); a withdrawn or failed hold records nothing.
    hold_outcome = models.CharField(max_length=8, choices=HoldOutcome.choices, blank=True, default="", db_default="")
    hold_ended_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = AllocationQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # A tenant's newest requests first: the list endpoint's page query.
            models.Index(fields=["tenant", "-created_at", "-id"], name="allocation_tenant_recent_idx"),
            # A pool's requests since a hold ended (admission/outcomes.py: the decay of its outcome, per decision).
            models.Index(fields=["pool", "created_at"], name="allocation_pool_recent_idx"),
            # The pool's ended holds (few rows).
            models.Index(
                fields=["pool", "hold_ended_at"],
                name="allocation_pool_hold_end_idx",
                condition=Q(hold_ended_at__isnull=False),
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "requested_by", "idempotency_key"],
                name="allocation_unique_idempotency_key",
            ),
            models.CheckConstraint(
                condition=Q(count__gte=1),
                name="allocation_count_positive",
                violation_error_message="Count must be at least 1.",
            ),
            models.CheckConstraint(
                condition=Q(held=False) | Q(status="queued"),
                name="allocation_held_only_queued",
                violation_error_message="Only a queued request can be held.",
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.count}x {self.profile} for {self.tenant}"

    @property
    def is_borrowed(self) -> bool:
        """Holds slices borrowed from its cohort now (issue 15); a queued request gave its borrowed part back."""
        holding = self.status in self.QUOTA_HOLDING and self.status != self.Status.QUEUED
        return holding and bool(self.borrowed_compute_slices or self.borrowed_memory_slices)

    @property
    def kube_name(self) -> str:
        """Deterministic Kubernetes name for this allocation's holder pod, and its claim when it has one."""
        return kube_name_for(self.uuid, self.claim_generation)

    @property
    def kube_claim_names(self) -> list[str]:
        """The names of the allocation's ResourceClaims (see claim_names_for), whether they exist or not."""
        if self.profile == SHARE_PROFILE:
            return share_claim_names_for(self.kube_name, self.count)
        return claim_names_for(self.kube_name, self.count)

    @property
    def claim_names(self) -> list[str]:
        """The claims users put in their pod specs, once provisioning made them (empty before)."""
        return self.kube_claim_names if self.claim_name else []

    @property
    def namespace(self) -> str:
        """The Kubernetes namespace of this allocation's claim: the one the request named from its tenant's list
        (tenants.TenantNamespace), else the tenant's portal-made one."""
        return self.namespace_name or tenant_namespace(self.tenant)


def kube_name_for(allocation_uuid: uuid.UUID | str, generation: int) -> str:
    """`mig-alloc-<uuid>`, then `mig-alloc-<uuid>-m<n>` once n moves (issue 14) replaced the claim."""
    return f"mig-alloc-{allocation_uuid}" + (f"-m{generation}" if generation else "")


#: A ResourceClaim holds at most this many device requests (resource.k8s.io/v1 DeviceRequestsMaxSize; the API
#: server refuses more with 422), while a request may ask for FATIA_MAX_SLICES_PER_REQUEST slices.
MAX_REQUESTS_PER_CLAIM = 32


def claim_names_for(kube_name: str, count: int) -> list[str]:
    """The claims of an allocation of `count` slices: `<kube_name>` for up to MAX_REQUESTS_PER_CLAIM (the name
    claims had before requests were split, so existing objects keep theirs), else `<kube_name>-0`, `-1`, ...,
    each with up to MAX_REQUESTS_PER_CLAIM of the slices in order."""
    if count <= MAX_REQUESTS_PER_CLAIM:
        return [kube_name]
    return [f"{kube_name}-{k}" for k in range(-(-count // MAX_REQUESTS_PER_CLAIM))]


def share_claim_names_for(kube_name: str, count: int) -> list[str]:
    """The claims of a request for `count` shares of whole GPUs (shared and MPS pools): one claim per share, so
    that each share can go to a pod of its own (allocations/cluster/shared_claims.py); `<kube_name>` for one."""
    if count == 1:
        return [kube_name]
    return [f"{kube_name}-share-{k}" for k in range(count)]


def tenant_namespace(tenant: Tenant) -> str:
    """A tenant's Kubernetes namespace, where its claims live: FATIA_KUBE_NAMESPACE_PREFIX + slug.

    The one definition: the Kubernetes backend creates the namespace under this name, and the pages, the
    API and the CLI tell users to put it in their pod specs."""
    return f"{settings.FATIA_KUBE_NAMESPACE_PREFIX}{tenant.slug}"


class SlicePlacement(models.Model):
    """Where one slice of an allocation sits: a GPU and the memory-slot range of its instance."""

    allocation = models.ForeignKey(Allocation, on_delete=models.CASCADE, related_name="placements")
    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="placements")
    profile = models.CharField(max_length=32)
    start = models.PositiveSmallIntegerField()
    size = models.PositiveSmallIntegerField()
    device_name = models.CharField(max_length=253, blank=True)
    # Kubernetes: the slot is not first fit, so the devices the scheduler would take first are tainted until the
    # claim is allocated (allocations/mig/scheduler.py: steer); the start of each tainted device.
    blocked_starts = models.JSONField(default=list, blank=True)
    # Static MIG: the uuid of the pre-created MIG device this slice is pinned to (the claim selects it by uuid).
    mig_uuid = models.CharField(max_length=64, blank=True)
    # Shared and MPS pools: the memory this share takes on its GPU (`start`/`size` are 0 there).
    memory_mib = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["allocation_id", "gpu_id", "start"]

    def __str__(self) -> str:
        return f"{self.profile} at {self.gpu}:{self.start}+{self.size}"


class SliceDevice(models.Model):
    """Which MIG device (by the UUID its node's agent reports) held a slice of an allocation, recorded while the
    allocation is active (allocations/services/reclaim.py: record_slice_devices). Placements are deleted at
    release; this row stays, so the agent's history can be charged to the request afterwards (showback "used").
    With static MIG one device serves many allocations over time, so history is read within the allocation's
    active window only."""

    allocation = models.ForeignKey(Allocation, on_delete=models.CASCADE, related_name="slice_devices")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    uuid = models.CharField(max_length=64)
    gpu = models.ForeignKey(Gpu, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    start = models.PositiveSmallIntegerField()
    first_seen_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["allocation", "uuid"], name="slice_device_unique_allocation_uuid")
        ]
        indexes = [models.Index(fields=["node", "uuid"])]

    def __str__(self) -> str:
        return f"{self.uuid} for allocation {self.allocation_id}"


class ClaimedDeviceQuerySet(models.QuerySet["ClaimedDevice"]):
    def outside_fatia(self) -> ClaimedDeviceQuerySet:
        """Devices held by claims the portal did not make, or made for a request that no longer holds quota
        (a stray claim reconcile has not deleted yet): real occupancy that no SlicePlacement records."""
        live = Allocation.objects.filter(status__in=Allocation.QUOTA_HOLDING).values("uuid")
        return self.filter(Q(allocation_uuid__isnull=True) | ~Q(allocation_uuid__in=live))


class ClaimedDevice(models.Model):
    """One device of the `gpu.nvidia.com` driver that an allocated ResourceClaim holds, in any namespace, as
    fleet discovery last listed it. `allocation_uuid` is the portal's label on its own claims (in the
    namespaces it manages); every other claim is "outside Fatia". `gpu` is None while the node or GPU is not
    known; `profile` is empty for a whole GPU (`start` 0, `size` every memory slot)."""

    namespace = models.CharField(max_length=253)
    claim_name = models.CharField(max_length=253)
    claim_uid = models.CharField(max_length=64)
    allocation_uuid = models.UUIDField(null=True, blank=True)
    node_name = models.CharField(max_length=253)
    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, null=True, blank=True, related_name="claimed_devices")
    device = models.CharField(max_length=253)
    profile = models.CharField(max_length=32, blank=True)
    start = models.PositiveSmallIntegerField(default=0)
    size = models.PositiveSmallIntegerField(default=0)
    # Consumable capacity (shared GPUs): the allocation's share ID and the memory it consumed on the device.
    share_id = models.CharField(max_length=64, blank=True)
    consumed_memory_mib = models.PositiveIntegerField(null=True, blank=True)
    seen_at = models.DateTimeField(auto_now=True)

    objects = ClaimedDeviceQuerySet.as_manager()

    class Meta:
        ordering = ["node_name", "device"]
        constraints = [
            models.UniqueConstraint(fields=["namespace", "claim_name", "device"], name="claimed_device_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.node_name}/{self.device} ({self.namespace}/{self.claim_name})"


class LeaseExtensionQuerySet(models.QuerySet["LeaseExtension"]):
    def for_user(self, user: User | AnonymousUser) -> LeaseExtensionQuerySet:
        """Extensions of the allocations of the user's tenants (all for staff)."""
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        return self.filter(allocation__tenant_id__in=member_tenant_ids(user))

    def managed_by(self, user: User | AnonymousUser) -> LeaseExtensionQuerySet:
        """Extensions the user may approve or reject: their managed tenants' (all for staff)."""
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        return self.filter(allocation__tenant_id__in=managed_tenant_ids_subquery(user))

    def waiting(self) -> LeaseExtensionQuerySet:
        """Pending extensions of leases that still run: what a manager can still decide."""
        return self.filter(status=LeaseExtension.Status.PENDING, allocation__status=Allocation.Status.ACTIVE)


class LeaseExtension(models.Model):
    """A request to add `hours` to an ACTIVE allocation's lease (services/extensions.py).

    Applied at once (APPROVED, `auto_approved`) while the whole lease stays within the tenant's
    auto_approve_max_lease_hours, or when a tenant manager asks; otherwise PENDING until a manager
    approves (the hours are added then) or rejects it. PENDING -> CANCELLED when the lease ends first.
    Invariant: at most one PENDING extension per allocation (schema). Rows are locked after their
    allocation's row, never before.
    """

    class Status(models.TextChoices):
        PENDING = "pending", "Pending approval"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        CANCELLED = "cancelled", "Cancelled (the lease ended first)"

    allocation = models.ForeignKey(Allocation, on_delete=models.CASCADE, related_name="extensions")
    hours = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    auto_approved = models.BooleanField(default=False)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = models.TextField(blank=True)
    # The whole lease once this extension is applied, as it stood when it was asked for / applied.
    lease_hours_after = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = LeaseExtensionQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["allocation"],
                condition=Q(status="pending"),
                name="lease_extension_one_pending_per_allocation",
                violation_error_message="An extension of this lease already waits for a manager.",
            ),
            models.CheckConstraint(
                condition=Q(hours__gte=1),
                name="lease_extension_hours_positive",
                violation_error_message="Extend by at least one hour.",
            ),
        ]

    def __str__(self) -> str:
        return f"+{self.hours} h for allocation #{self.allocation_id} ({self.status})"


class NotificationQuerySet(models.QuerySet["Notification"]):
    def for_user(self, user: User | AnonymousUser) -> NotificationQuerySet:
        """The user's own notifications; nobody, staff included, reads another user's inbox."""
        if not user.is_authenticated:
            return self.none()
        return self.filter(recipient_id=user.pk)

    def unread(self) -> NotificationQuerySet:
        return self.filter(read_at__isnull=True)


class Notification(models.Model):
    """One message in a user's in-app inbox, written in the same transaction as the event it reports
    (services/notifications.py), so a rolled-back change never leaves a notification behind.

    Unread while `read_at` is NULL; marking read only ever sets it (idempotent).
    """

    class Kind(models.TextChoices):
        REQUEST_PENDING = "request_pending", "A request waits for approval"
        REQUEST_DECIDED = "request_decided", "A request was decided"
        EXTENSION_PENDING = "extension_pending", "A lease extension waits for approval"
        EXTENSION_DECIDED = "extension_decided", "A lease extension was decided"
        LEASE_EXPIRING = "lease_expiring", "A lease ends soon"
        IDLE_RECLAIM = "idle_reclaim", "Idle slices will be released"
        QUOTA_CHANGE_DECIDED = "quota_change_decided", "A quota change was decided"
        # Compaction (issue 14): a movable request's slice is about to move, or has moved.
        ALLOCATION_MOVE = "allocation_move", "A slice moves to make room"
        # Cohorts (issue 15): borrowed slices are taken back for a lender, or the notice is called off.
        BORROW_RECLAIM = "borrow_reclaim", "Borrowed slices are taken back"

    recipient = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=32, choices=Kind.choices)
    text = models.CharField(max_length=500)
    # A path on this site that shows what the notification is about.
    link = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    read_at = models.DateTimeField(null=True, blank=True)

    objects = NotificationQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["recipient", "-created_at", "-id"], name="notification_inbox_idx"),
            # The header's unread count on every page: a small partial index, unread rows only.
            models.Index(fields=["recipient"], condition=Q(read_at__isnull=True), name="notification_unread_idx"),
        ]

    def __str__(self) -> str:
        return f"To {self.recipient_id}: {self.text[:40]}"


class MigReconfiguration(models.Model):
    """One change of a static-MIG GPU's layout (issue 12), advanced one step at a time by a Celery task.

    PENDING -> APPLYING (the pool mode's applier: node agent commands, or the MIG manager) -> RESTARTING (the
    DRA kubelet plugin restarted, waiting for the republished slices) -> DONE. A failed apply is retried once
    (`attempts`), then the creates that were made are destroyed (ROLLING_BACK) and it ends FAILED. The node is
    `reconfiguring` while one is live (placement skips it). `plan`: the planner's operations in order,
    [{"action", "profile", "start"}]; `targets`: the GPU's layout once the plan is applied, [[profile, start]];
    `step_started_at` bounds each wait (FATIA_RECONFIGURATION_STEP_TIMEOUT_S).
    """

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        APPLYING = "applying", "Applying"
        RESTARTING = "restarting", "Restarting the DRA plugin"
        ROLLING_BACK = "rolling-back", "Rolling back"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    LIVE = (Status.PENDING, Status.APPLYING, Status.RESTARTING, Status.ROLLING_BACK)

    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="reconfigurations")
    allocation = models.ForeignKey(
        Allocation, on_delete=models.SET_NULL, null=True, blank=True, related_name="reconfigurations"
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    reason = models.CharField(max_length=500)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    plan = models.JSONField(default=list)
    targets = models.JSONField(default=list, blank=True)
    step = models.CharField(max_length=64, blank=True)  # the applier batch (or restart) in progress
    attempts = models.PositiveSmallIntegerField(default=0)
    pool_generation = models.BigIntegerField(null=True, blank=True)  # the driver pool's generation at restart
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    step_started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # One live change per GPU: two plans from the same layout would contradict each other.
            models.UniqueConstraint(
                fields=["gpu"],
                condition=Q(status__in=["pending", "applying", "restarting", "rolling-back"]),
                name="mig_reconfiguration_one_live_per_gpu",
            ),
        ]

    def __str__(self) -> str:
        return f"reconfiguration #{self.pk} of {self.gpu_id} ({self.status})"

    @property
    def batch_key(self) -> str:
        """The agent command batch of the current attempt (allocations/nodeagent/commands.py)."""
        return f"reconfiguration:{self.pk}:{self.step}" if self.step else f"reconfiguration:{self.pk}"


class OutboxMessage(models.Model):
    """A Celery task that is due because a state change committed (issue 16; allocations/services/outbox.py).

    Written in the same transaction as the change, so the broker being down, restarted empty or a worker dying can
    delay the work but never lose it: after commit the row is sent (`sent_count`, `last_sent_at`); a beat sweep sends
    again every row that is not `done_at` once `due_at` passes; a task that ran to the end marks its rows done.
    """

    task_name = models.CharField(max_length=200)
    args = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    due_at = models.DateTimeField()
    last_sent_at = models.DateTimeField(null=True, blank=True)
    sent_count = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=500, blank=True)
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            # The sweep's and the tasks' lookups touch only rows not done: a small partial index.
            models.Index(fields=["due_at"], condition=Q(done_at__isnull=True), name="outbox_due_idx"),
            models.Index(fields=["task_name"], condition=Q(done_at__isnull=True), name="outbox_open_task_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.task_name}{tuple(self.args)}"


class MovePlan(models.Model):
    """A compaction of one pool (issue 14; allocations/services/compaction.py): movable slices moved one after
    the other so that whole GPUs, or room for one refused request, come free.

    APPLYING until every move is DONE or SKIPPED (-> DONE), or a move can no longer be made (-> FAILED). `summary`
    keeps what the planner promised (whole GPUs and fits before and after) for the pages and the audit.
    """

    class Status(models.TextChoices):
        APPLYING = "applying", "Applying"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    class Trigger(models.TextChoices):
        BEAT = "beat", "Periodic compaction"
        ADMIN = "admin", "Platform admin"
        RESCUE = "rescue", "Room for a refused request"

    pool = models.ForeignKey(NodePool, on_delete=models.CASCADE, related_name="move_plans")
    trigger = models.CharField(max_length=16, choices=Trigger.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.APPLYING)
    # Rescue: the request the plan makes room for; provisioned again once the plan ends.
    for_allocation = models.ForeignKey(
        Allocation, on_delete=models.CASCADE, null=True, blank=True, related_name="rescue_plans"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    summary = models.JSONField(default=dict, blank=True)
    status_message = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # One plan at a time per pool: two plans would each check their destinations against a layout the
            # other is changing.
            models.UniqueConstraint(
                fields=["pool"], condition=Q(status="applying"), name="moveplan_one_applying_per_pool"
            ),
        ]

    def __str__(self) -> str:
        return f"Move plan #{self.pk} in {self.pool_id} ({self.status})"


class SliceMove(models.Model):
    """One slice of a movable request moved from one slot to another, step by step, each step its own
    transaction: PENDING -> NOTIFIED (owner told) -> PLACED (new claim or placement at the destination) -> DONE
    (old one deleted, owner told); SKIPPED when the request ended or stopped being movable first."""

    class Step(models.TextChoices):
        PENDING = "pending", "Pending"
        NOTIFIED = "notified", "Owner told"
        PLACED = "placed", "Placed at the destination"
        DONE = "done", "Done"
        SKIPPED = "skipped", "Skipped"
        # Kubernetes: the new claim failed or landed elsewhere; it was deleted and the old one kept (`reason`).
        FAILED = "failed", "Failed"

    plan = models.ForeignKey(MovePlan, on_delete=models.CASCADE, related_name="moves")
    position = models.PositiveSmallIntegerField()
    allocation = models.ForeignKey(Allocation, on_delete=models.CASCADE, related_name="moves")
    profile = models.CharField(max_length=32)
    # CASCADE, not PROTECT: fleet discovery deletes a GPU that left once no slice sits on it, and a finished move
    # must not stop that (the audit log keeps where slices went).
    from_gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="+")
    from_start = models.PositiveSmallIntegerField()
    to_gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="+")
    to_start = models.PositiveSmallIntegerField()
    step = models.CharField(max_length=16, choices=Step.choices, default=Step.PENDING)
    reason = models.CharField(max_length=500, blank=True, default="", db_default="")
    # Kubernetes: the claim generation (Allocation.claim_generation) of the new claim, fixed when the destination
    # is reserved, so that every step names the old and the new claim the same way whatever ran before.
    claim_generation = models.PositiveSmallIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["plan_id", "position"]
        constraints = [
            models.UniqueConstraint(fields=["plan", "position"], name="slicemove_unique_position"),
        ]

    def __str__(self) -> str:
        return f"{self.profile} of #{self.allocation_id}: {self.from_gpu_id}:{self.from_start} -> {self.to_gpu_id}"


# Bookings live in their own module (issue 15); imported here so Django registers the model with this app.
from allocations.booking_model import Booking as Booking  # noqa: E402
from allocations.booking_model import BookingQuerySet as BookingQuerySet  # noqa: E402
from allocations.booking_model import ExtensionConsent as ExtensionConsent  # noqa: E402
