"""Read-only queries for views, the API and the CLI. Every one is scoped to a user."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import (
    BigIntegerField,
    Count,
    ExpressionWrapper,
    F,
    IntegerField,
    Max,
    Q,
    QuerySet,
    Subquery,
    Sum,
)
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from allocations.cohorts.accounting import borrow_room
from allocations.cohorts.members import cohort_admission, member_states
from allocations.costs import gpu_equivalents, gpu_model_for
from allocations.mig.catalog import GpuModel, load_catalog
from allocations.mig.figures import disagreements
from allocations.mig.layout import geometry
from allocations.mig.policies import stranded
from allocations.models import (
    Allocation,
    Booking,
    ClaimedDevice,
    Gpu,
    LeaseExtension,
    Node,
    NodePool,
    Notification,
    Quota,
    QuotaChangeRequest,
    SlicePlacement,
)
from allocations.nodeagent.selectors import SliceUsage, slice_usage
from allocations.nodeagent.usage import UsedHours, used_slice_hours
from allocations.overshare import over_share_counts
from allocations.placement import gpu_model_of, layout_fits, outside_instance, outside_instances
from allocations.share_capacity import shared_capacity
from allocations.share_dashboard import SharedBar
from allocations.sharing.catalog import is_shared_model
from allocations.sharing.isolation import weaker_warning
from allocations.sharing.units import UnitNames, unit_names
from allocations.static_capacity import static_pool_fits
from tenants.models import AuditEvent, Membership, Tenant, member_tenant_ids
from tenants.selectors import can_manage_tenant

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser
    from django.contrib.auth.models import User as AuthUser

    User = AuthUser | AnonymousUser


def get_allocation_for_user(user: User, pk: int) -> Allocation:
    """The allocation if the user may see it; DoesNotExist (a 404) otherwise, also for other tenants'."""
    return Allocation.objects.for_user(user).select_related("tenant", "pool", "requested_by").get(pk=pk)


def allocations_for_user(user: User) -> list[Allocation]:
    return list(Allocation.objects.for_user(user).select_related("tenant", "pool", "requested_by")[:200])


def pending_approvals_for_user(user: User) -> list[Allocation]:
    return list(
        Allocation.objects.managed_by(user)
        .filter(status=Allocation.Status.PENDING)
        .select_related("tenant", "pool", "requested_by")
        .order_by("created_at")
    )


def allocation_timeline(allocation: Allocation) -> list[AuditEvent]:
    return list(
        AuditEvent.objects.filter(object_type="allocation", object_id=str(allocation.pk)).order_by("created_at", "id")
    )


@dataclass(frozen=True, slots=True)
class Balance:
    """A tenant's quota in one pool, with what is used and free, also in GPU-equivalents."""

    quota_id: int
    tenant_id: int
    tenant_name: str
    pool_id: int
    pool_name: str
    gpu_model: str
    compute_limit: int
    memory_limit: int
    compute_used: int
    memory_used: int
    profile_caps: dict[str, int]
    # Its cohort and borrowing / lending limits (issue 15; None: no cohort, no limit).
    cohort_id: int | None = None
    cohort_name: str = ""
    borrowing_compute_limit: int | None = None
    borrowing_memory_limit: int | None = None
    lending_compute_limit: int | None = None
    lending_memory_limit: int | None = None

    @property
    def units(self) -> UnitNames:
        """What the two counters count: MIG slices, or % of a GPU and GiB in time-sliced and MPS pools."""
        return unit_names(shared=is_shared_model(self.gpu_model))

    @property
    def compute_free(self) -> int:
        return max(self.compute_limit - self.compute_used, 0)

    @property
    def memory_free(self) -> int:
        return max(self.memory_limit - self.memory_used, 0)

    @property
    def compute_borrowed(self) -> int:
        """What is used beyond the quota: only a cohort member gets there, by borrowing (issue 15)."""
        return max(self.compute_used - self.compute_limit, 0)

    @property
    def memory_borrowed(self) -> int:
        return max(self.memory_used - self.memory_limit, 0)

    @property
    def gpu_equivalents_limit(self) -> float:
        return round(gpu_equivalents(gpu_model_for(self.gpu_model), self.compute_limit, self.memory_limit), 3)

    @property
    def gpu_equivalents_used(self) -> float:
        return round(gpu_equivalents(gpu_model_for(self.gpu_model), self.compute_used, self.memory_used), 3)

    @property
    def gpu_equivalents_free(self) -> float:
        return round(gpu_equivalents(gpu_model_for(self.gpu_model), self.compute_free, self.memory_free), 3)


def balance_of(quota: Quota) -> Balance:
    return Balance(
        quota_id=quota.pk,
        tenant_id=quota.tenant_id,
        tenant_name=quota.tenant.name,
        pool_id=quota.pool_id,
        pool_name=quota.pool.name,
        gpu_model=quota.pool.gpu_model,
        compute_limit=quota.compute_slices_limit,
        memory_limit=quota.memory_slices_limit,
        compute_used=quota.compute_slices_used,
        memory_used=quota.memory_slices_used,
        profile_caps=dict(quota.profile_caps),
        cohort_id=quota.cohort_id,
        cohort_name=quota.cohort.name if quota.cohort is not None else "",
        borrowing_compute_limit=quota.borrowing_compute_limit,
        borrowing_memory_limit=quota.borrowing_memory_limit,
        lending_compute_limit=quota.lending_compute_limit,
        lending_memory_limit=quota.lending_memory_limit,
    )


def balances_for_user(user: User, tenant_id: int | None = None) -> list[Balance]:
    quotas = Quota.objects.for_user(user).select_related("tenant", "pool", "cohort")
    if tenant_id is not None:
        quotas = quotas.filter(tenant_id=tenant_id)
    return [balance_of(q) for q in quotas]


def quota_shortfall(*, quota: Quota | None, allocation: Allocation) -> str | None:
    """Why the allocation does not fit the (locked) quota right now, or None when it fits."""
    if quota is None:
        return f"The tenant has no quota in {allocation.pool.name}."
    free_compute = quota.compute_slices_limit - quota.compute_slices_used
    free_memory = quota.memory_slices_limit - quota.memory_slices_used
    # Shared and MPS pools count percent of a GPU and GiB in the same two counters (allocations/sharing/units.py).
    names = unit_names(shared=allocation.pool.is_shared)
    over = allocation.compute_slices > free_compute or allocation.memory_slices > free_memory
    lent = (0, 0)
    if over and cohort_admission(quota, compute=allocation.compute_slices, memory=allocation.memory_slices):
        over = False  # beyond the guarantee, within what the cohort lends (issue 15): borrowed
    elif over and quota.cohort_id is not None:
        lent = _borrowable(quota)
    # In a cohort, what could still be borrowed is named too: "...; 0 of 0 are free, and 3 more can be borrowed".
    more = ", and {} more can be borrowed from the cohort" if quota.cohort_id is not None else ""
    if over and allocation.compute_slices > max(free_compute, 0) + lent[0]:
        return (
            f"Needs {allocation.compute_slices} {names.compute}; {max(free_compute, 0)} of "
            f"{quota.compute_slices_limit} are free{more.format(lent[0])}."
        )
    if over and allocation.memory_slices > max(free_memory, 0) + lent[1]:
        return (
            f"Needs {allocation.memory_slices} {names.memory}; {max(free_memory, 0)} of "
            f"{quota.memory_slices_limit} are free{more.format(lent[1])}."
        )
    cap = quota.profile_caps.get(allocation.profile)
    if cap is not None:
        held = (
            Allocation.objects.holding_quota()
            .filter(tenant_id=allocation.tenant_id, pool_id=allocation.pool_id, profile=allocation.profile)
            .exclude(pk=allocation.pk)
            .aggregate(n=Sum("count"))["n"]
            or 0
        )
        if held + allocation.count > cap:
            return f"The tenant may hold at most {cap} x {allocation.profile}; {held} are held."
    return None


def _borrowable(quota: Quota) -> tuple[int, int]:
    """What the quota's cohort would lend its tenant now (compute, memory), for the message."""
    members = member_states(quota.cohort_id) if quota.cohort_id is not None else []
    if all(m.tenant_id != quota.tenant_id for m in members):
        return 0, 0
    return borrow_room(members, quota.tenant_id)


def pools_for_user(user: User) -> list[NodePool]:
    """Pools are visible to every signed-in user; quotas decide who can use them."""
    if not user.is_authenticated:
        return []
    return list(NodePool.objects.all())


def quota_changes_for_user(user: User, *, pending_only: bool = False) -> list[QuotaChangeRequest]:
    qs = QuotaChangeRequest.objects.for_user(user).select_related("tenant", "pool", "requested_by")
    if pending_only:
        qs = qs.filter(status=QuotaChangeRequest.Status.PENDING)
    return list(qs)


@dataclass(frozen=True, slots=True)
class QuotaChangeReview:
    """A pending quota change next to the quota it would replace, and what it would cut below usage."""

    change: QuotaChangeRequest
    current: Balance | None
    # One sentence per dimension (or profile cap) the requested limits put below what is in use now.
    below_usage: list[str]


def quota_change_reviews(user: User) -> list[QuotaChangeReview]:
    """Pending quota changes the user may see, oldest first, each with the current limits and usage of its
    tenant in its pool. Three queries whatever the number of changes."""
    changes = list(
        QuotaChangeRequest.objects.for_user(user)
        .filter(status=QuotaChangeRequest.Status.PENDING)
        .select_related("tenant", "pool", "requested_by")
        .order_by("created_at", "id")
    )
    tenant_ids = {c.tenant_id for c in changes}
    quotas = {
        (q.tenant_id, q.pool_id): q
        for q in Quota.objects.filter(tenant_id__in=tenant_ids).select_related("tenant", "pool", "cohort").order_by()
    }
    held: dict[tuple[int, int, str], int] = {
        (row["tenant_id"], row["pool_id"], row["profile"]): row["n"]
        for row in Allocation.objects.holding_quota()
        .filter(tenant_id__in=tenant_ids)
        .values("tenant_id", "pool_id", "profile")
        .annotate(n=Sum("count"))
        .order_by()
    }
    reviews = []
    for change in changes:
        quota = quotas.get((change.tenant_id, change.pool_id))
        below = []
        if quota is not None:
            if change.compute_slices_limit < quota.compute_slices_used:
                below.append(
                    f"{quota.compute_slices_used} compute slices are in use; the new limit is "
                    f"{change.compute_slices_limit}."
                )
            if change.memory_slices_limit < quota.memory_slices_used:
                below.append(
                    f"{quota.memory_slices_used} memory slots are in use; the new limit is "
                    f"{change.memory_slices_limit}."
                )
        for profile, cap in sorted(change.profile_caps.items()):
            n = held.get((change.tenant_id, change.pool_id, profile), 0)
            if n > cap:
                below.append(f"{n} × {profile} are held; the new cap is {cap}.")
        reviews.append(QuotaChangeReview(change, balance_of(quota) if quota is not None else None, below))
    return reviews


def search_allocations(user: User, text: str) -> list[Allocation]:
    qs = Allocation.objects.for_user(user).select_related("tenant", "pool", "requested_by")
    if text:
        qs = qs.filter(Q(purpose__icontains=text) | Q(claim_name__icontains=text) | Q(profile__icontains=text))
    return list(qs[:200])


# Shapes for the browser pages.

Status = Allocation.Status
RELEASABLE = (Status.PENDING, Status.APPROVED, Status.QUEUED, Status.PROVISIONING, Status.ACTIVE)


@dataclass(frozen=True, slots=True)
class StatusFilter:
    value: str
    label: str
    count: int


def requests_for_user(user: User, *, status: str | None = None) -> list[Allocation]:
    """The user's tenants' requests, newest first, optionally of one status (at most 200)."""
    qs = Allocation.objects.for_user(user).select_related("tenant", "pool", "requested_by")
    if status:
        qs = qs.filter(status=status)
    return list(qs[:200])


def status_filters_for_user(user: User) -> list[StatusFilter]:
    """Every status with how many of the user's tenants' requests are in it."""
    visible = Allocation.objects.for_user(user).values("pk")
    counts = {
        row["status"]: row["n"]
        for row in Allocation.objects.filter(pk__in=visible).values("status").annotate(n=Count("pk")).order_by()
    }
    return [StatusFilter(value, str(label), counts.get(value, 0)) for value, label in Status.choices]


def gpu_equivalents_of(allocation: Allocation) -> float:
    """The share of whole GPUs the request costs: max(compute / GPU's compute, memory / GPU's memory); for shares
    of a GPU shared whole, their exact memory fraction (allocations/sharing/units.py)."""
    if allocation.pool.is_shared and allocation.memory_mib:
        return allocation.memory_mib * allocation.count / gpu_model_for(allocation.pool.gpu_model).memory_mib
    return gpu_equivalents(
        gpu_model_for(allocation.pool.gpu_model), allocation.compute_slices, allocation.memory_slices
    )


def placements_of(allocation: Allocation) -> list[SlicePlacement]:
    return list(allocation.placements.select_related("gpu__node").order_by("gpu__node__name", "gpu__index", "start"))


@dataclass(frozen=True, slots=True)
class AllocationActions:
    """Which buttons the detail page offers; the services still decide when they are pressed."""

    can_release: bool
    can_extend: bool
    can_decide: bool
    extend_max_hours: int
    # How many more hours apply without a manager (all of extend_max_hours for a manager).
    extend_at_once_hours: int
    # A lease extension waiting for a manager, and whether this user may decide it.
    pending_extension: LeaseExtension | None
    can_decide_extension: bool
    # Platform admins: the request's work is overdue and its task may be sent again (services/retry.py).
    can_retry: bool = False


# States in which a request waits on a task (provision, claim poll, teardown); see services/requeue.py.
WORKING_STATES = (Status.APPROVED, Status.PROVISIONING, Status.RELEASING)


def is_overdue(allocation: Allocation, *, now: datetime | None = None) -> bool:
    """Waiting on a task for longer than FATIA_OUTBOX_RESEND_S: its task should have moved it on by now, so an
    admin may send it again (services/retry.py)."""
    now = now or timezone.now()
    return allocation.status in WORKING_STATES and allocation.updated_at < now - timedelta(
        seconds=settings.FATIA_OUTBOX_RESEND_S
    )


def allocation_actions(user: User, allocation: Allocation) -> AllocationActions:
    manages = can_manage_tenant(user, allocation.tenant_id)
    owner_or_manager = manages or allocation.requested_by_id == user.pk
    extend_max = max(allocation.tenant.max_lease_hours - allocation.lease_hours, 0)
    at_once = extend_max if manages else max(allocation.tenant.auto_approve_max_lease_hours - allocation.lease_hours, 0)
    pending = (
        LeaseExtension.objects.waiting().filter(allocation_id=allocation.pk).select_related("requested_by").first()
        if allocation.status == Status.ACTIVE
        else None
    )
    return AllocationActions(
        can_release=owner_or_manager and allocation.status in RELEASABLE,
        can_extend=owner_or_manager and allocation.status == Status.ACTIVE and extend_max > 0,
        can_decide=manages and allocation.status == Status.PENDING,
        extend_max_hours=extend_max,
        extend_at_once_hours=min(at_once, extend_max),
        pending_extension=pending,
        can_decide_extension=manages and pending is not None,
        can_retry=bool(user.is_staff) and is_overdue(allocation),
    )


def get_lease_extension_for_user(user: User, pk: int) -> LeaseExtension:
    """The extension if the user may see its allocation; DoesNotExist (a 404) otherwise."""
    return LeaseExtension.objects.for_user(user).select_related("allocation__tenant", "requested_by").get(pk=pk)


def pending_extensions_for_manager(user: User) -> list[LeaseExtension]:
    """Lease extensions the user may decide that still wait (their lease still runs), oldest first."""
    return list(
        LeaseExtension.objects.managed_by(user)
        .waiting()
        .select_related("allocation__tenant", "allocation__pool", "requested_by")
        .order_by("created_at", "id")
    )


@dataclass(frozen=True, slots=True)
class NavCounts:
    """What the header shows on every page: the manager links, unread notifications, what waits for
    the user's decision (pending requests plus lease extensions of the tenants they manage)."""

    is_manager: bool
    unread: int
    pending_approvals: int


class _Count(Subquery):
    """COUNT(*) of a queryset as a scalar subquery, so several counts travel in one SELECT."""

    template = "(SELECT COUNT(*) FROM (%(subquery)s) _counted)"
    output_field = IntegerField()


def nav_counts(user: User) -> NavCounts:
    """One query whatever the data: four scalar subqueries on the user's own row. Platform admins manage
    every tenant, so they count every tenant's pending approvals."""
    if not user.is_authenticated:
        return NavCounts(False, 0, 0)
    if user.is_staff:
        managed: QuerySet[Any] = Tenant.objects.order_by().values("pk")
        requests = Allocation.objects.filter(status=Status.PENDING)
        extensions = LeaseExtension.objects.waiting()
    else:
        managed = Membership.objects.filter(user_id=user.pk, role=Membership.Role.MANAGER).order_by().values("pk")
        requests = Allocation.objects.managed_by(user).filter(status=Status.PENDING)
        extensions = LeaseExtension.objects.managed_by(user).waiting()
    row = (
        get_user_model()
        .objects.filter(pk=user.pk)
        .annotate(
            managed=_Count(managed),
            unread=_Count(Notification.objects.for_user(user).unread().order_by().values("pk")),
            pending=_Count(requests.order_by().values("pk")),
            extensions=_Count(extensions.order_by().values("pk")),
        )
        .values("managed", "unread", "pending", "extensions")
        .first()
    )
    if row is None:
        return NavCounts(False, 0, 0)
    is_manager = row["managed"] > 0
    return NavCounts(is_manager, row["unread"], row["pending"] + row["extensions"] if is_manager else 0)


def notifications_for_user(user: User) -> QuerySet[Notification]:
    """The user's inbox, newest first."""
    return Notification.objects.for_user(user).order_by("-created_at", "-id")


@dataclass(frozen=True, slots=True)
class PendingApproval:
    allocation: Allocation
    balance: Balance | None
    gpu_equivalents: float
    shortfall: str | None


def pending_approvals_with_balances(user: User) -> list[PendingApproval]:
    """Pending requests the user may decide, each with its tenant's balance in the pool and why it
    would not fit right now (None when approving it would succeed as far as quota goes)."""
    pending = list(
        Allocation.objects.managed_by(user)
        .filter(status=Status.PENDING)
        .select_related("tenant", "pool", "requested_by")
        .order_by("created_at", "id")
    )
    quotas = {
        (q.tenant_id, q.pool_id): q
        for q in Quota.objects.filter(tenant_id__in={a.tenant_id for a in pending}).select_related(
            "tenant", "pool", "cohort"
        )
    }
    rows = []
    for allocation in pending:
        quota = quotas.get((allocation.tenant_id, allocation.pool_id))
        rows.append(
            PendingApproval(
                allocation=allocation,
                balance=balance_of(quota) if quota is not None else None,
                gpu_equivalents=gpu_equivalents_of(allocation),
                shortfall=quota_shortfall(quota=quota, allocation=allocation),
            )
        )
    return rows


def request_form_tenants(user: User) -> QuerySet[Tenant]:
    return Tenant.objects.for_user(user).order_by("name")


def request_form_pools(user: User) -> QuerySet[NodePool]:
    if not user.is_authenticated:
        return NodePool.objects.none()
    return NodePool.objects.order_by("name")


def request_form_data(user: User) -> dict[str, Any]:
    """What the new-request page's script needs to show the cost of a request as it is typed: each
    pool's GPU model and offered profiles (with their compute and memory slices), each tenant's policy,
    and each tenant's remaining quota per pool with the slices it holds per profile (for profile caps)."""
    tenants = list(request_form_tenants(user))
    pools = list(request_form_pools(user))
    quotas = Quota.objects.filter(tenant__in=tenants).select_related("tenant", "pool")
    held: dict[tuple[int, int, str], int] = {
        (row["tenant_id"], row["pool_id"], row["profile"]): row["n"]
        for row in Allocation.objects.holding_quota()
        .filter(tenant__in=tenants)
        .values("tenant_id", "pool_id", "profile")
        .annotate(n=Sum("count"))
    }
    pool_data = []
    for pool in pools:
        model = gpu_model_for(pool.gpu_model)
        pool_data.append(
            {
                "id": pool.pk,
                "name": pool.name,
                "gpu_model": model.name,
                "kind": pool.kind,
                # Time-sliced and MPS pools: the GPU's memory and what the kind does not isolate (shown before submit).
                "gpu_memory_mib": model.memory_mib if pool.is_shared else None,
                "isolation_warning": weaker_warning(pool.kind),
                "compute_slices": model.compute_slices,
                "memory_slices": model.memory_slices,
                "profiles": [
                    {
                        "name": p.name,
                        "compute_slices": p.compute_slices,
                        "memory_slices": p.memory_slices,
                        "memory_gib": round(p.memory_mib / 1024, 1) if p.memory_mib else None,
                    }
                    for p in model.profiles
                    if p.name in pool.profiles
                ],
            }
        )
    quota_data: dict[str, dict[str, Any]] = {}
    for q in quotas:
        quota_data.setdefault(str(q.tenant_id), {})[str(q.pool_id)] = {
            "compute_limit": q.compute_slices_limit,
            "memory_limit": q.memory_slices_limit,
            "compute_used": q.compute_slices_used,
            "memory_used": q.memory_slices_used,
            "profile_caps": q.profile_caps,
            "held": {profile: n for (t, p, profile), n in held.items() if t == q.tenant_id and p == q.pool_id},
        }
    return {
        "max_count": settings.FATIA_MAX_SLICES_PER_REQUEST,
        "pools": pool_data,
        "tenants": [
            {
                "id": t.pk,
                "name": t.name,
                "max_lease_hours": t.max_lease_hours,
                "auto_approve_max_compute_slices": t.auto_approve_max_compute_slices,
                "auto_approve_max_lease_hours": t.auto_approve_max_lease_hours,
                "quotas": quota_data.get(str(t.pk), {}),
            }
            for t in tenants
        ],
    }


@dataclass(frozen=True, slots=True)
class GpuModelChoice:
    name: str
    profiles: tuple[str, ...]


def gpu_model_choices() -> list[GpuModelChoice]:
    catalog = load_catalog()
    return [GpuModelChoice(name, catalog.model(name).profile_names()) for name in catalog.model_names()]


def pools_overview() -> QuerySet[NodePool]:
    """Every pool with its node and GPU counts (the admin's pool list)."""
    return NodePool.objects.annotate(
        node_count=Count("nodes", distinct=True), gpu_count=Count("nodes__gpus", distinct=True)
    ).order_by("name")


# --- Fleet dashboard (allocations/dashboard.py) ---------------------------------------------------------
#
# Every read below runs a fixed number of SQL queries whatever the fleet size: rows come back as values()
# and are grouped in Python, never one query per node or GPU. Tenancy is applied here, not in templates:
# a slice of a tenant the viewer does not belong to comes out as an anonymous "occupied" slice (no
# tenant, claim, purpose, requester or lease), so no template can leak it.

DASHBOARD_PAGE_SIZE = 20
# Requests of the last this-many days make a pool's "requested mix" for the fragmentation measure.
DASHBOARD_MIX_DAYS = 30
# Profiles with less than this share of the mix do not count (as in the placement policy).
DASHBOARD_MIX_THRESHOLD = 0.02
# Slot colours: eight fills that all keep >= 9.8:1 contrast with the #111 label text, ordered so that
# neighbours differ in lightness as well as hue (Okabe-Ito inspired); the slot label carries the name too.
TENANT_COLOURS = ("#9ecae1", "#f4b183", "#a1d99b", "#d4b9da", "#fdd86a", "#c7c1a8", "#80cdc1", "#f1a7b5")


@dataclass(frozen=True, slots=True)
class DashboardFilters:
    pool_id: int | None = None
    tenant_id: int | None = None
    state: str = ""
    search: str = ""
    page: int = 1


@dataclass(frozen=True, slots=True)
class TenantUsage:
    label: str
    colour: str
    slices: int
    compute_slices: int
    mine: bool
    # Of compute_slices, those borrowed from the pool's cohort (issue 15): the slot view's dashed frames, summed.
    borrowed_compute: int = 0


@dataclass(frozen=True, slots=True)
class PoolSummary:
    pool_id: int
    name: str
    slug: str
    gpu_model: str
    node_count: int
    gpu_count: int
    states: dict[str, int]
    usage: list[TenantUsage]
    slices_in_use: int
    compute_used: int
    compute_total: int
    fits_now: dict[str, int]
    fragmentation_stranded: int
    fragmentation_free: int
    pending: int
    version: str
    # Static MIG: fits_now counts free pre-created instances, this what fits after a layout change
    # (allocations/static_capacity.py); None on DynamicMIG.
    fits_after_reconfiguration: dict[str, int] | None = None
    mig_mode: str = NodePool.MigMode.DYNAMIC

    @property
    def static_fits(self) -> list[tuple[str, int, int]]:
        """(profile, free now, after a layout change) per profile: the dashboard's table for a static pool."""
        after = self.fits_after_reconfiguration or {}
        return [(profile, n, after.get(profile, 0)) for profile, n in self.fits_now.items()]

    # Time-sliced or MPS pools: the sharing mode; `fits_now` then counts shares per size ("4 GiB") and whole GPUs.
    sharing: str = ""
    # Slices waiting in the pool's queue per profile (issue 15), every tenant's; of them, those its admission holds
    # (issue 14: they fit now, which is why "fits now" and "queued" can both count them).
    queued: dict[str, int] = field(default_factory=dict)
    queued_held: dict[str, int] = field(default_factory=dict)

    @property
    def fits_and_queued(self) -> list[tuple[str, int, int, int]]:
        """(profile, fits now, slices queued, of them held) per profile: the dashboard's table for a DynamicMIG
        pool."""
        return [
            (profile, n, self.queued.get(profile, 0), self.queued_held.get(profile, 0))
            for profile, n in self.fits_now.items()
        ]

    @property
    def fragmentation_percent(self) -> int:
        if not self.fragmentation_free:
            return 0
        return round(100 * self.fragmentation_stranded / self.fragmentation_free)

    @property
    def used_percent(self) -> int:
        return round(100 * self.compute_used / self.compute_total) if self.compute_total else 0


@dataclass(frozen=True, slots=True)
class SliceView:
    """One instance on a GPU as the viewer may see it. `visible` False: only "occupied" is known."""

    placement_id: int
    profile: str
    start: int
    size: int
    visible: bool
    colour: str
    tenant_name: str = ""
    allocation_id: int | None = None
    claim_name: str = ""
    status: str = ""
    requested_by: str = ""
    lease_expires_at: datetime | None = None
    device_name: str = ""
    # A device held by a claim the portal did not make (fleet discovery); `namespace` and `claim_name` only for
    # staff: members learn nothing of who holds it.
    outside: bool = False
    namespace: str = ""
    # What the node's agent last reported for the MIG device in this slot (allocations/nodeagent/); None without one.
    usage: SliceUsage | None = None
    # Runs on slices borrowed from its cohort (issue 15), and when they are taken back: shown to every viewer.
    borrowed: bool = False
    reclaim_at: datetime | None = None

    @property
    def label(self) -> str:
        if self.outside:
            return "outside Fatia"
        return self.tenant_name if self.visible else "occupied"

    @property
    def dom_id(self) -> str:
        return f"o{self.placement_id}" if self.outside else str(self.placement_id)

    @property
    def profile_parts(self) -> list[str]:
        """The profile cut where a one-slot-wide instance may wrap it, so it is never cut off:
        "1g.10gb+me" -> "1g.", "10gb", "+me"."""
        return [part for part in re.split(r"(?<=\.)|(?=[+-])", self.profile) if part]

    @property
    def profile_html(self) -> SafeString:
        """The profile with <wbr> line-break opportunities between its parts (one string rather than a
        template loop per slice: the node list draws hundreds of slices)."""
        return mark_safe("<wbr>".join(escape(part) for part in self.profile_parts))  # noqa: S308 - escaped parts


@dataclass(frozen=True, slots=True)
class PrecreatedView:
    """A static-MIG device that exists and no request holds."""

    profile: str
    start: int
    size: int

    @property
    def profile_html(self) -> SafeString:
        """As SliceView.profile_html: line-break opportunities, so a one-slot-wide instance is never cut off."""
        parts = [part for part in re.split(r"(?<=\.)|(?=[+-])", self.profile) if part]
        return mark_safe("<wbr>".join(escape(part) for part in parts))  # noqa: S308 - escaped parts


@dataclass(frozen=True, slots=True)
class GpuView:
    gpu_id: int
    index: int
    slots: int
    slices: list[SliceView]
    free_slots: list[int]
    # Static MIG: pre-created MIG devices no request holds: free slots of their profile.
    precreated: tuple[PrecreatedView, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeView:
    node_id: int
    name: str
    state: str
    state_label: str
    gpus: list[GpuView]
    # Where this node's published figures and the catalog disagree: the cluster's figures apply to it.
    cluster_figures: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodePage:
    pool: NodePool
    nodes: list[NodeView]
    total: int
    page: int
    pages: int
    legend: list[TenantUsage]
    # Some slice on the page is borrowed from its cohort (issue 15): the legend explains the marker.
    borrowed: bool = False


def _visible_tenant_ids(user: User) -> set[int] | None:
    """The tenants whose slices the user sees in full; None means all of them (staff)."""
    if user.is_staff:
        return None
    if not user.is_authenticated:
        return set()
    return set(member_tenant_ids(user).values_list("tenant_id", flat=True))


def visible_tenant_ids(user: User) -> set[int] | None:
    """The tenants whose slices the user sees in full (None: all, for platform admins)."""
    return _visible_tenant_ids(user)


def _tenant_colours() -> dict[int, str]:
    """A stable colour per tenant (by id), the same on every page and for every viewer."""
    ids = Tenant.objects.order_by("pk").values_list("pk", flat=True)
    return {pk: TENANT_COLOURS[n % len(TENANT_COLOURS)] for n, pk in enumerate(ids)}


def dashboard_tenant_choices(user: User) -> list[Tenant]:
    """Tenants the user may filter by: all for staff, their own for members (no probing where others sit)."""
    return list(Tenant.objects.for_user(user).order_by("name"))


# The live stream's versions (allocations/live.py). Every value is an opaque hash: a viewer learns that something
# it may see changed, never how many requests there are or when another tenant's changed.
_MIX_PRIME = 2_147_483_647
# One placement as a number that changes when it moves (GPU or slot); summed with its square per pool, so a
# placement that moves, appears or goes changes the pool's layout hash (two moves that cancel out in both sums
# at once are practically impossible).
_SLOT_MIX = ExpressionWrapper(
    (F("pk") * 48_271 + F("gpu_id") * 8 + F("start")) % _MIX_PRIME, output_field=BigIntegerField()
)
_SLOT_MIX_SQUARED = ExpressionWrapper(_SLOT_MIX * _SLOT_MIX % _MIX_PRIME, output_field=BigIntegerField())


def _digest(*parts: object) -> str:
    return hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).hexdigest()


def _pool_versions() -> dict[int, str]:
    """Per pool, an opaque hash of what every viewer sees of it anyway: its nodes with their states and which
    slots are occupied (not by whom), and which are borrowed. Requests that change no slot (pending, rejected, a
    lease extended) do not change it. Five queries whatever the fleet size."""
    parts: dict[int, list[str]] = {pk: [] for pk in NodePool.objects.values_list("pk", flat=True)}
    # Discovery saves a node's updated_at whenever it changes it or its GPUs (cluster/discovery.py).
    nodes = Node.objects.filter(pool__isnull=False)
    for row in nodes.values("pool_id").annotate(n=Count("pk"), m=Max("updated_at")).order_by():
        parts.setdefault(row["pool_id"], []).append(f"n{row['n']}:{row['m'].isoformat() if row['m'] else ''}")
    held = SlicePlacement.objects.filter(allocation__status__in=Allocation.QUOTA_HOLDING)
    for row in (
        held.values("allocation__pool_id")
        .annotate(n=Count("pk"), s=Sum(_SLOT_MIX), q=Sum(_SLOT_MIX_SQUARED))
        .order_by()
    ):
        parts.setdefault(row["allocation__pool_id"], []).append(f"p{row['n']}:{row['s']}:{row['q']}")
    # Devices held outside Fatia occupy slots every viewer sees as "outside Fatia".
    outside = ClaimedDevice.objects.outside_fatia().filter(gpu__node__pool__isnull=False)
    for row in (
        outside.values("gpu__node__pool_id")
        .annotate(n=Count("pk"), s=Sum(_SLOT_MIX), q=Sum(_SLOT_MIX_SQUARED))
        .order_by()
    ):
        parts.setdefault(row["gpu__node__pool_id"], []).append(f"o{row['n']}:{row['s']}:{row['q']}")
    # Borrowed slices and their reclaim deadlines (issue 15): every viewer's slot view marks them, so a notice given
    # or called off on another tenant's request is an event for all. No owner in it, as above.
    for row in (
        Allocation.objects.filter(status__in=Allocation.QUOTA_HOLDING)
        .exclude(status=Allocation.Status.QUEUED)
        .filter(Q(borrowed_compute_slices__gt=0) | Q(borrowed_memory_slices__gt=0) | Q(reclaim_at__isnull=False))
        .values("pool_id")
        .annotate(n=Count("pk"), s=Sum("pk"), r=Count("reclaim_at"), m=Max("reclaim_at"))
        .order_by()
    ):
        when = row["m"].isoformat() if row["m"] else ""
        parts.setdefault(row["pool_id"], []).append(f"b{row['n']}:{row['s']}:{row['r']}:{when}")
    # The queue (issue 15): its length and last change (joined, admitted, withdrawn, reordered), no owner: every
    # viewer's pool card shows queued demand per profile, and positions move with other tenants' requests.
    for row in _queue_versions():
        parts.setdefault(row["pool_id"], []).append(f"w{row['n']}:{row['m'].isoformat() if row['m'] else ''}")
    return {pool_id: _digest(*p) for pool_id, p in parts.items()}


def _queue_versions() -> QuerySet[Allocation, dict[str, Any]]:
    return (
        Allocation.objects.filter(status=Allocation.Status.QUEUED)
        .values("pool_id")
        .annotate(n=Count("pk"), m=Max("updated_at"))
        .order_by()
    )


def _tenant_versions() -> dict[int, dict[int, str]]:
    """Per pool and tenant, an opaque hash of that tenant's requests in the pool: it changes when one is
    created or changes state (every service saves `updated_at`). One query."""
    out: dict[int, dict[int, str]] = {}
    rows = Allocation.objects.values("pool_id", "tenant_id").annotate(n=Count("pk"), m=Max("updated_at")).order_by()
    for row in rows:
        out.setdefault(row["pool_id"], {})[row["tenant_id"]] = _digest(row["n"], row["m"].isoformat())
    # Bookings (issue 15) are events on the same stream: a booking made, decided, started or ended changes its
    # tenant's version in its pool. One more query.
    booked = Booking.objects.values("pool_id", "tenant_id").annotate(n=Count("pk"), m=Max("updated_at")).order_by()
    for row in booked:
        by_tenant = out.setdefault(row["pool_id"], {})
        by_tenant[row["tenant_id"]] = _digest(by_tenant.get(row["tenant_id"], ""), "b", row["n"], row["m"].isoformat())
    return out


@dataclass(frozen=True, slots=True)
class ViewerVersions:
    """What the live stream tells one viewer: per pool, a hash of its layout and of the viewer's tenants'
    requests there; and one hash of all the viewer's tenants' requests (the request pages follow it)."""

    pools: dict[int, str]
    requests: str


@dataclass(frozen=True, slots=True)
class FleetVersions:
    """One read of everything the live stream watches, before it is cut down to a viewer."""

    layouts: dict[int, str]
    tenants: dict[int, dict[int, str]]

    def for_viewer(self, scope: frozenset[int] | None) -> ViewerVersions:
        """The versions a viewer whose visible tenants are `scope` (None: all, for staff) may be told."""
        pools = {}
        mine: list[str] = []
        for pool_id, layout in sorted(self.layouts.items()):
            by_tenant = self.tenants.get(pool_id, {})
            own = [f"{t}={v}" for t, v in sorted(by_tenant.items()) if scope is None or t in scope]
            pools[pool_id] = _digest(layout, *own)
            mine += (f"{pool_id}/{part}" for part in own)
        # Requests in a pool that is gone (no layout) still count for the request pages.
        for pool_id, by_tenant in sorted(self.tenants.items()):
            if pool_id not in self.layouts:
                mine += (f"{pool_id}/{t}={v}" for t, v in sorted(by_tenant.items()) if scope is None or t in scope)
        return ViewerVersions(pools=pools, requests=_digest("requests", *mine))


def fleet_versions() -> FleetVersions:
    """Aggregate queries (bookings and queues included) over the whole fleet, whatever its size or the number of
    viewers."""
    return FleetVersions(layouts=_pool_versions(), tenants=_tenant_versions())


def viewer_scope(user: User) -> frozenset[int] | None:
    """The tenants whose requests the live stream may tell the user about; None: all of them (staff)."""
    visible = _visible_tenant_ids(user)
    return None if visible is None else frozenset(visible)


def dashboard_versions(user: User) -> ViewerVersions:
    """The user's live-stream versions, read now (the stream itself shares one read per second per process)."""
    return fleet_versions().for_viewer(viewer_scope(user))


#: A GPU layout as the dashboard and /metrics group them: (id of its GpuModel, its sorted (profile, start, idle)).
LayoutKeyByModel = tuple[int, tuple[tuple[str, int, bool], ...]]


def layout_figures(
    gpu_models: dict[int, GpuModel], layouts: dict[LayoutKeyByModel, int], mix: dict[str, float]
) -> tuple[dict[str, int], int, int]:
    """For `layouts` (distinct GPU layouts -> how many ready GPUs have each) of one pool: how many more of each
    profile fit (each alone, layout_fits), the compute slices no mix of the pool's requested profiles can use
    (the placement policy's stranded measure) and the free compute slices. Each distinct layout is computed once.
    Returns (fits, stranded, free)."""
    total_mix = sum(mix.values()) or 1.0
    fits: dict[str, int] = {}
    lost = free = 0
    for (model_id, instances_key), n in layouts.items():
        gpu_model = gpu_models[model_id]
        geom = geometry(gpu_model)
        allowed = frozenset(
            geom.index[name]
            for name, count in mix.items()
            if name in geom.index and count / total_mix >= DASHBOARD_MIX_THRESHOLD
        )
        try:
            layout_key = geom.named_key(instances_key)
        except ValueError:
            continue  # the database and the cluster disagree on this GPU: placement leaves it out too
        for name, f in layout_fits(gpu_model, instances_key).items():
            fits[name] = fits.get(name, 0) + n * f
        free += n * (gpu_model.compute_slices - geom.info(layout_key).allocated_compute)
        lost += n * stranded(geom, layout_key, allowed)
    return fits, lost, free


def requested_mix(pools: list[NodePool]) -> dict[int, dict[str, float]]:
    since = timezone.now() - timedelta(days=DASHBOARD_MIX_DAYS)
    mix: dict[int, dict[str, float]] = {}
    for row in (
        Allocation.objects.filter(Q(created_at__gte=since) | Q(status=Allocation.Status.PENDING))
        .values("pool_id", "profile")
        .annotate(n=Sum("count"))
        .order_by()
    ):
        mix.setdefault(row["pool_id"], {})[row["profile"]] = float(row["n"])
    for pool in pools:
        if not mix.get(pool.pk):
            mix[pool.pk] = {name: 1.0 for name in pool.profiles}
    return mix


def dashboard_overview(user: User, filters: DashboardFilters | None = None) -> list[PoolSummary]:
    """Per pool: nodes by state, GPUs, slices in use in all (the fleet's fill) and by tenant, how many
    more of each offered profile fit now (ready nodes, exactly, by the placement engine), fragmentation
    (free compute slices on ready GPUs that no mix of the pool's requested profiles can use), pending
    requests.

    Tenancy: a member's usage lines and pending count cover only their own tenants; other tenants
    exist for them only as occupied slots (in the totals and the slot view), never counted apart.
    Staff see every tenant.

    Seven queries whatever the fleet size (pools, tenants, memberships, GPUs, placements, pending,
    mix) plus three for the versions."""
    if not user.is_authenticated:
        return []
    return _pool_summaries(visible=_visible_tenant_ids(user), filters=filters or DashboardFilters(), versions=True)


def fleet_pool_summaries() -> list[PoolSummary]:
    """Every pool's summary as a platform admin sees it, without the live stream's versions. GET /metrics computes
    the same figures its own way (allocations/metrics.py, pool_figures; tests/web/test_metrics.py holds them equal)."""
    return _pool_summaries(visible=None, filters=DashboardFilters(), versions=False)


def _pool_summaries(*, visible: set[int] | None, filters: DashboardFilters, versions: bool) -> list[PoolSummary]:
    """dashboard_overview for the tenants in `visible` (None: all); `versions` False leaves them empty."""
    pools = list(NodePool.objects.order_by("name"))
    colours = _tenant_colours()
    tenant_names = dict(Tenant.objects.values_list("pk", "name"))
    models = {pool.pk: gpu_model_for(pool.gpu_model) for pool in pools}
    compute_of: dict[tuple[int, str], int] = {}
    # No ORDER BY on these two: the layouts are grouped in Python, sorting thousands of rows would be waste.
    gpus = (
        Gpu.objects.filter(node__pool__isnull=False)
        .order_by()
        .values_list("pk", "node_id", "node__state", "node__pool_id", "figures_id")
    )
    held: dict[int, list[tuple[str, int, bool]]] = {}
    # Per pool and shown tenant: [slices, compute slices, compute slices borrowed from the cohort].
    usage: dict[int, dict[int | None, list[int]]] = {}
    counted_borrowed: set[int] = set()
    for gpu_id, profile, start, tenant_id, pool_id, allocation_id, borrowed in (
        SlicePlacement.objects.filter(allocation__status__in=Allocation.QUOTA_HOLDING)
        .order_by()
        .values_list(
            "gpu_id",
            "profile",
            "start",
            "allocation__tenant_id",
            "allocation__pool_id",
            "allocation_id",
            "allocation__borrowed_compute_slices",
        )
    ):
        held.setdefault(gpu_id, []).append((profile, start, False))
        compute = compute_of.get((pool_id, profile))
        if compute is None:
            model = models.get(pool_id)
            names = {p.name: p.compute_slices for p in model.profiles} if model else {}
            compute = compute_of[(pool_id, profile)] = names.get(profile, 0)
        shown = tenant_id if visible is None or tenant_id in visible else None
        counts = usage.setdefault(pool_id, {}).setdefault(shown, [0, 0, 0])
        counts[0] += 1
        counts[1] += compute
        # An allocation's borrowed part is recorded once for all its slices.
        if borrowed and allocation_id not in counted_borrowed:
            counted_borrowed.add(allocation_id)
            counts[2] += borrowed
    pending_requests = Allocation.objects.filter(status=Allocation.Status.PENDING)
    if visible is not None:
        pending_requests = pending_requests.filter(tenant_id__in=visible)
    pending = {
        row["pool_id"]: row["n"] for row in pending_requests.values("pool_id").annotate(n=Count("pk")).order_by()
    }
    # Queued slices per pool and profile, every tenant's (counts only, as fits-now is): one query for all the cards.
    queued: dict[int, dict[str, int]] = {}
    queued_held: dict[int, dict[str, int]] = {}
    for pool_id, profile, n, n_held in (
        Allocation.objects.filter(status=Allocation.Status.QUEUED)
        .values("pool_id", "profile")
        .annotate(n=Sum("count"), h=Sum("count", filter=Q(held=True), default=0))
        .order_by()
        .values_list("pool_id", "profile", "n", "h")
    ):
        queued.setdefault(pool_id, {})[profile] = n
        if n_held:
            queued_held.setdefault(pool_id, {})[profile] = n_held
    mix = requested_mix(pools)
    pool_versions = _pool_versions() if versions else {}
    outside = outside_instances()
    static_fits = static_pool_fits(pools)
    by_pool: dict[int, list[tuple[int, int, str, int, int | None]]] = {}
    for gpu_row in gpus:
        by_pool.setdefault(gpu_row[3], []).append(gpu_row)
    out = []
    for pool in pools:
        if filters.pool_id is not None and pool.pk != filters.pool_id:
            continue
        model = models[pool.pk]
        rows = by_pool.get(pool.pk, [])
        states: dict[str, int] = {}
        seen_nodes: set[int] = set()
        # Ready GPUs grouped by model (the catalog's, or the one a node publishes) and layout, devices held
        # outside the portal included: fits-now and fragmentation are computed once per distinct pair.
        layouts: dict[LayoutKeyByModel, int] = {}
        gpu_models: dict[int, GpuModel] = {}
        for gpu_id, node_id, state, _, figures_id in rows:
            if node_id not in seen_nodes:
                seen_nodes.add(node_id)
                states[state] = states.get(state, 0) + 1
            gpu_model = gpu_model_of(model, figures_id)
            if state == Node.State.READY and gpu_model is not None:
                instances = list(held.get(gpu_id, ())) + [
                    (i.profile, i.start, False)
                    for i in (outside_instance(gpu_model, p, start, "o") for p, start in outside.get(gpu_id, []))
                ]
                gpu_models[id(gpu_model)] = gpu_model
                layout = (id(gpu_model), tuple(sorted(instances)))
                layouts[layout] = layouts.get(layout, 0) + 1
        fits, lost, free = layout_figures(gpu_models, layouts, mix[pool.pk])
        pool_usage = usage.get(pool.pk, {})
        # Slices of tenants the viewer does not belong to are counted in the totals only (key None).
        tenants = [
            TenantUsage(tenant_names.get(t, "?"), colours.get(t, TENANT_COLOURS[0]), v[0], v[1], True, v[2])
            for t, v in sorted(pool_usage.items(), key=lambda kv: tenant_names.get(kv[0] or 0, ""))
            if t is not None
        ]
        gpu_total = len(rows)
        static = None if pool.is_shared else static_fits.get(pool.pk)
        out.append(
            PoolSummary(
                pool_id=pool.pk,
                name=pool.name,
                slug=pool.slug,
                gpu_model=model.name,
                node_count=len(seen_nodes),
                gpu_count=gpu_total,
                states=states,
                usage=tenants,
                slices_in_use=sum(v[0] for v in pool_usage.values()),
                compute_used=sum(v[1] for v in pool_usage.values()),
                compute_total=gpu_total * model.compute_slices,
                fits_now=(
                    shared_capacity(pool).fits_now
                    if pool.is_shared
                    else {name: fits.get(name, 0) for name in pool.profiles}
                    if static is None
                    else static.free
                ),
                sharing=pool.get_kind_display() if pool.is_shared else "",
                fragmentation_stranded=lost,
                fragmentation_free=free,
                pending=pending.get(pool.pk, 0),
                version=pool_versions.get(pool.pk, ""),
                fits_after_reconfiguration=None if static is None else static.after_reconfiguration,
                mig_mode=pool.mig_mode,
                queued=queued.get(pool.pk, {}),
                queued_held=queued_held.get(pool.pk, {}),
            )
        )
    return out


_NOTES: dict[tuple[str, int], tuple[str, ...]] = {}


def figures_disagreements(pool_model: GpuModel, figures_id: int | None) -> tuple[str, ...]:
    """Where a GPU's published figures and the catalog's model disagree (empty when they agree or nothing is
    published); figures rows never change, so once per row and model per process."""
    if figures_id is None:
        return ()
    key = (pool_model.name, figures_id)
    if key not in _NOTES:
        published = gpu_model_of(pool_model, figures_id)
        _NOTES[key] = (
            tuple(disagreements(pool_model, published))
            if published is not None
            else ("The driver publishes no MIG device on this GPU (MIG off).",)
        )
    return _NOTES[key]


def dashboard_node(user: User, node_id: int) -> NodePage:
    """One node drawn slot by slot (what a cell of the fleet overview opens): dashboard_nodes of its
    pool, kept to that node. Raises Node.DoesNotExist, also for a node in no pool (nothing to draw it in)."""
    pool_id = Node.objects.filter(pool__isnull=False).values_list("pool_id", flat=True).get(pk=node_id)
    return dashboard_nodes(user, pool_id, DashboardFilters(pool_id=pool_id), node_id=node_id)


def dashboard_nodes(user: User, pool_id: int, filters: DashboardFilters, *, node_id: int | None = None) -> NodePage:
    """One page of a pool's nodes, each GPU with its instances at their recorded slots.

    Filters: node state; tenant (only among the tenants the user may see); search by node name or by
    claim name (claims of visible tenants only); `node_id` keeps that one node (the fleet overview's
    slot view). Five queries whatever the pool size (pool, visible tenants, count, node page, GPUs,
    placements). Raises NodePool.DoesNotExist."""
    pool = NodePool.objects.get(pk=pool_id)
    visible = _visible_tenant_ids(user)
    nodes = Node.objects.filter(pool_id=pool.pk)
    if node_id is not None:
        nodes = nodes.filter(pk=node_id)
    if filters.state:
        nodes = nodes.filter(state=filters.state)
    placements = SlicePlacement.objects.filter(allocation__status__in=Allocation.QUOTA_HOLDING)
    if visible is not None:
        placements = placements.filter(allocation__tenant_id__in=visible)
    if filters.tenant_id is not None:
        nodes = nodes.filter(pk__in=placements.filter(allocation__tenant_id=filters.tenant_id).values("gpu__node_id"))
    if filters.search:
        nodes = nodes.filter(
            Q(name__icontains=filters.search)
            | Q(pk__in=placements.filter(allocation__claim_name__icontains=filters.search).values("gpu__node_id"))
        )
    total = nodes.count()
    pages = max((total + DASHBOARD_PAGE_SIZE - 1) // DASHBOARD_PAGE_SIZE, 1)
    page = min(max(filters.page, 1), pages)
    node_rows = list(
        nodes.order_by("name").values_list("pk", "name", "state")[
            (page - 1) * DASHBOARD_PAGE_SIZE : page * DASHBOARD_PAGE_SIZE
        ]
    )
    node_ids = [row[0] for row in node_rows]
    pool_model = gpu_model_for(pool.gpu_model)
    gpus: dict[int, list[tuple[int, int, int]]] = {}
    notes: dict[int, list[str]] = {}
    static: dict[int, list[dict[str, Any]]] = {}
    for gpu_id, node_id, index, figures_id, instances in (
        Gpu.objects.filter(node_id__in=node_ids)
        .order_by("index")
        .values_list("pk", "node_id", "index", "figures_id", "static_instances")
    ):
        if instances:
            static[gpu_id] = instances
        gpu_model = gpu_model_of(pool_model, figures_id)
        gpus.setdefault(node_id, []).append((gpu_id, index, (gpu_model or pool_model).memory_slices))
        for note in figures_disagreements(pool_model, figures_id):
            if note not in notes.setdefault(node_id, []):
                notes[node_id].append(note)
    colours = _tenant_colours()
    slices: dict[int, list[SliceView]] = {}
    legend: dict[str, TenantUsage] = {}
    # Time-sliced and MPS GPUs are drawn as a memory bar of one cell per GiB, each share stacked after the last.
    shared_bar = SharedBar() if pool.is_shared else None
    for row in (
        SlicePlacement.objects.filter(gpu__node_id__in=node_ids, allocation__status__in=Allocation.QUOTA_HOLDING)
        .order_by("gpu_id", "start", "pk")
        .values(
            "pk",
            "gpu_id",
            "profile",
            "start",
            "size",
            "memory_mib",
            "device_name",
            "allocation_id",
            "allocation__tenant_id",
            "allocation__tenant__name",
            "allocation__claim_name",
            "allocation__status",
            "allocation__requested_by__username",
            "allocation__lease_expires_at",
            "allocation__borrowed_compute_slices",
            "allocation__borrowed_memory_slices",
            "allocation__reclaim_at",
        )
    ):
        tenant_id = row["allocation__tenant_id"]
        # Borrowed slices are marked to everyone (issue 15), other tenants' included: not who, only that they may go.
        borrowed = bool(row["allocation__borrowed_compute_slices"] or row["allocation__borrowed_memory_slices"])
        reclaim_at = row["allocation__reclaim_at"]
        if shared_bar is not None:
            row["start"], row["size"], row["profile"] = shared_bar.cells(
                row["gpu_id"], row["memory_mib"], pool_model.memory_slices
            )
        if visible is None or tenant_id in visible:
            colour = colours.get(tenant_id, TENANT_COLOURS[0])
            view = SliceView(
                placement_id=row["pk"],
                profile=row["profile"],
                start=row["start"],
                size=row["size"],
                visible=True,
                colour=colour,
                tenant_name=row["allocation__tenant__name"],
                allocation_id=row["allocation_id"],
                claim_name=row["allocation__claim_name"],
                status=row["allocation__status"],
                requested_by=row["allocation__requested_by__username"],
                lease_expires_at=row["allocation__lease_expires_at"],
                device_name=row["device_name"],
                borrowed=borrowed,
                reclaim_at=reclaim_at,
            )
            legend.setdefault(view.tenant_name, TenantUsage(view.tenant_name, colour, 0, 0, True))
        else:
            view = SliceView(
                placement_id=row["pk"],
                profile=row["profile"],
                start=row["start"],
                size=row["size"],
                visible=False,
                colour="",
                borrowed=borrowed,
                reclaim_at=reclaim_at,
            )
            legend.setdefault("", TenantUsage("Occupied (another tenant)", "", 0, 0, False))
        slices.setdefault(row["gpu_id"], []).append(view)
    widths = {gpu_id: width for found in gpus.values() for gpu_id, _, width in found}
    for device in (
        ClaimedDevice.objects.outside_fatia().filter(gpu__node_id__in=node_ids).order_by("gpu_id", "start", "pk")
    ):
        whole = not device.profile
        gpu_id = device.gpu_id or 0
        slices.setdefault(gpu_id, []).append(
            SliceView(
                placement_id=device.pk,
                profile=device.profile or "whole GPU",
                start=0 if whole else device.start,
                size=widths.get(gpu_id, 0) if whole else device.size,
                visible=visible is None,
                colour="",
                outside=True,
                namespace=device.namespace if visible is None else "",
                claim_name=device.claim_name if visible is None else "",
                device_name=device.device,
            )
        )
        legend.setdefault("outside", TenantUsage("Outside Fatia (a claim the portal did not make)", "", 0, 0, False))
    # Per-slice telemetry is keyed by MIG slot; every share on a GPU starts at 0 (share use: allocations/overshare.py).
    usage = slice_usage(widths) if shared_bar is None else {}
    if usage:
        for gpu_id, on_gpu in slices.items():
            # Usage shows only on slices the viewer may see in full: another tenant's activity is not theirs to see.
            on_gpu[:] = [dataclasses.replace(v, usage=usage.get((gpu_id, v.start))) if v.visible else v for v in on_gpu]
    states = dict(Node.State.choices)
    views = []
    for node_id, name, state in node_rows:
        gpu_views = []
        for gpu_id, index, width in gpus.get(node_id, []):
            on_gpu = sorted(slices.get(gpu_id, []), key=lambda v: v.start)
            taken = {s for v in on_gpu for s in range(v.start, v.start + v.size)}
            precreated = tuple(
                PrecreatedView(str(i["profile"]), int(i["start"]), int(i["size"]))
                for i in static.get(gpu_id, [])
                if int(i["start"]) not in taken
            )
            taken |= {s for p in precreated for s in range(p.start, p.start + p.size)}
            free = [s for s in range(width) if s not in taken]
            gpu_views.append(GpuView(gpu_id, index, width, on_gpu, free, precreated))
        views.append(
            NodeView(node_id, name, state, str(states.get(state, state)), gpu_views, tuple(notes.get(node_id, ())))
        )
    return NodePage(
        pool=pool,
        nodes=views,
        total=total,
        page=page,
        pages=pages,
        legend=sorted(legend.values(), key=lambda u: (not u.mine, u.label)),
        borrowed=any(v.borrowed for on_gpu in slices.values() for v in on_gpu),
    )


# --- Fleet overview: one cell per GPU ------------------------------------------------------------------

# How the overview orders nodes: by name, most free slots first, or fullest first.
FLEET_SORTS = ("name", "free", "full")


def _eighths(used: int, slots: int) -> int:
    """Fill in eighths, rounded up so that a GPU with anything on it never reads as empty."""
    if slots <= 0:
        return 8
    return min(-(-8 * used // slots), 8)


@dataclass(frozen=True, slots=True)
class FleetGpu:
    """A GPU as the overview draws it: how many of its memory slots are held, by anyone. Whose they
    are is never part of it, so the overview is the same for every viewer."""

    gpu_id: int
    index: int
    used: int
    slots: int

    @property
    def free(self) -> int:
        return max(self.slots - self.used, 0)

    @property
    def level(self) -> int:
        return _eighths(self.used, self.slots)


@dataclass(frozen=True, slots=True)
class FleetNode:
    node_id: int
    name: str
    state: str
    state_label: str
    gpus: list[FleetGpu]
    # Sums over the GPUs, kept as fields: sorting and drawing read them thousands of times.
    used: int
    slots: int
    free: int

    @property
    def ready(self) -> bool:
        return self.state == Node.State.READY

    @property
    def level(self) -> int:
        return _eighths(self.used, self.slots)


@dataclass(frozen=True, slots=True)
class FleetPool:
    pool_id: int
    name: str
    gpu_model: str
    nodes: list[FleetNode]

    @property
    def gpu_count(self) -> int:
        return sum(len(n.gpus) for n in self.nodes)

    @property
    def used(self) -> int:
        return sum(n.used for n in self.nodes)

    @property
    def slots(self) -> int:
        return sum(n.slots for n in self.nodes)

    @property
    def free_ready(self) -> int:
        """Free memory slots on ready nodes: what new slices can use."""
        return sum(n.free for n in self.nodes if n.ready)


def _fleet_sort_key(sort: str) -> Callable[[FleetNode], tuple[Any, ...]]:
    if sort == "free":
        # Most free slots first; nodes that take no new slices (not ready) after every ready one.
        return lambda n: (not n.ready, -n.free, n.name)
    if sort == "full":
        return lambda n: (-(n.used / n.slots if n.slots else 1.0), n.name)
    return lambda n: (n.name,)


def dashboard_fleet(user: User, *, sort: str = "name", pool_id: int | None = None) -> list[FleetPool]:
    """Every pool (or one) with each node's GPUs and how many memory slots each GPU has in use: the
    dense fleet overview. Occupancy only, never whose, so it needs no tenancy masking. Nodes ordered
    by `sort` (FLEET_SORTS; unknown values sort by name), GPUs by index. Five queries whatever the
    fleet size (pools, nodes, GPUs, slots in use per GPU, devices held outside Fatia)."""
    if not user.is_authenticated:
        return []
    pools = NodePool.objects.order_by("name")
    nodes_qs = Node.objects.order_by("name")
    gpus_qs = Gpu.objects.order_by()
    if pool_id is not None:
        pools = pools.filter(pk=pool_id)
        nodes_qs = nodes_qs.filter(pool_id=pool_id)
        gpus_qs = gpus_qs.filter(node__pool_id=pool_id)
    pool_rows = list(pools)
    used = dict(
        SlicePlacement.objects.filter(allocation__status__in=Allocation.QUOTA_HOLDING)
        .values("gpu_id")
        .annotate(n=Sum("size"))
        .order_by()
        .values_list("gpu_id", "n")
    )
    slots = {pool.pk: gpu_model_for(pool.gpu_model).memory_slices for pool in pool_rows}
    # Devices held by claims the portal did not make occupy slots too (a whole GPU: every slot of it).
    for gpu_id, size, pool_of_gpu in (
        ClaimedDevice.objects.outside_fatia()
        .filter(gpu__isnull=False)
        .order_by()
        .values_list("gpu_id", "size", "gpu__node__pool_id")
    ):
        if gpu_id is not None:
            used[gpu_id] = used.get(gpu_id, 0) + (size or slots.get(pool_of_gpu or 0, 0))
    gpus: dict[int, list[tuple[int, int]]] = {}
    for gpu_id, node_id, index in gpus_qs.values_list("pk", "node_id", "index"):
        gpus.setdefault(node_id, []).append((index, gpu_id))
    labels = dict(Node.State.choices)
    by_pool: dict[int, list[FleetNode]] = {}
    for node_id, name, state, node_pool_id in nodes_qs.filter(pool__isnull=False).values_list(
        "pk", "name", "state", "pool_id"
    ):
        width = slots.get(node_pool_id, 0)
        node_gpus = [
            FleetGpu(gpu_id, index, min(used.get(gpu_id, 0), width), width)
            for index, gpu_id in sorted(gpus.get(node_id, []))
        ]
        by_pool.setdefault(node_pool_id, []).append(
            FleetNode(
                node_id=node_id,
                name=name,
                state=state,
                state_label=str(labels.get(state, state)),
                gpus=node_gpus,
                used=sum(g.used for g in node_gpus),
                slots=sum(g.slots for g in node_gpus),
                free=sum(g.free for g in node_gpus),
            )
        )
    key = _fleet_sort_key(sort)
    return [
        FleetPool(
            pool_id=pool.pk,
            name=pool.name,
            gpu_model=pool.gpu_model,
            nodes=sorted(by_pool.get(pool.pk, []), key=key),
        )
        for pool in pool_rows
    ]


@dataclass(frozen=True, slots=True)
class TenantShowback:
    tenant_id: int
    tenant_name: str
    colour: str
    slice_hours: float
    gpu_equivalent_hours: float
    # GPU-equivalent-hours and slice-hours per day of the window, oldest first.
    daily: list[float]
    daily_slice_hours: list[float]
    # "Used" (allocations/nodeagent/usage.py): slice-hours with a process or memory in use, and slice-hours the
    # agents reported at all; None (no data) without any report, per period and per day.
    used_slice_hours: float | None = None
    observed_slice_hours: float = 0.0
    daily_used_slice_hours: list[float | None] = field(default_factory=list)
    # Time-sliced GPUs it shares whose memory in use passes what their shares hold, now (allocations/overshare.py).
    over_shares: int = 0

    @property
    def used_share(self) -> int | None:
        """Used as a whole percentage of the observed slice-hours; None without data."""
        if self.used_slice_hours is None or not self.observed_slice_hours:
            return None
        return round(100 * self.used_slice_hours / self.observed_slice_hours)


@dataclass(frozen=True, slots=True)
class Showback:
    days: list[date]
    tenants: list[TenantShowback]

    @property
    def daily_totals(self) -> list[float]:
        """GPU-equivalent-hours of all the shown tenants together, per day."""
        return [round(sum(t.daily[i] for t in self.tenants), 2) for i in range(len(self.days))]

    @property
    def daily_max(self) -> float:
        return max(self.daily_totals, default=0.0)


def allocation_used(allocation: Allocation, *, now: datetime | None = None) -> UsedHours | None:
    """A request's reported and used slice-hours over its whole active time (allocations/nodeagent/usage.py);
    None before activation and without any report ("no data")."""
    if allocation.activated_at is None:
        return None
    end = allocation.ended_at or now or timezone.now()
    hours = used_slice_hours({allocation.pk: (allocation.activated_at, end)}).get(allocation.pk, {})
    observed = sum(h.observed for h in hours.values())
    if not observed:
        return None
    return UsedHours(round(observed, 2), round(sum(h.used for h in hours.values()), 2))


def _used_by_tenant_day(
    windows: dict[int, tuple[datetime, datetime]], tenant_of: dict[int, int], since: datetime, days: int
) -> dict[int, tuple[list[float], list[float]]]:
    """Observed and used slice-hours per tenant and day of the window (allocations/nodeagent/usage.py)."""
    out: dict[int, tuple[list[float], list[float]]] = {}
    for allocation_id, by_hour in used_slice_hours(windows).items():
        observed, used = out.setdefault(tenant_of[allocation_id], ([0.0] * days, [0.0] * days))
        for hour, figures in by_hour.items():
            n = (hour - since) // timedelta(days=1)
            if 0 <= n < days:
                observed[n] += figures.observed
                used[n] += figures.used
    return out


def showback_for_user(user: User, *, days: int, now: datetime | None = None) -> Showback:
    """Per tenant the user may see (all for staff): slice-hours and GPU-equivalent-hours held over the
    last `days` whole UTC days up to now, from each allocation's activated_at to its ended_at (or now
    while it still holds slices). GPU-equivalents: max(compute / GPU's compute, memory / GPU's memory)
    of the request. "Used" beside "held": see allocations/nodeagent/usage.py. Five queries whatever the number
    of allocations."""
    now = now or timezone.now()
    first = (now - timedelta(days=days - 1)).astimezone(UTC).date()
    since = datetime.combine(first, time.min, tzinfo=UTC)
    day_starts = [since + timedelta(days=n) for n in range(days)]
    colours = _tenant_colours()
    rows = (
        Allocation.objects.for_user(user)
        .filter(activated_at__isnull=False, activated_at__lt=now)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=since))
        .values_list(
            "pk",
            "tenant_id",
            "tenant__name",
            "pool__gpu_model",
            "count",
            "compute_slices",
            "memory_slices",
            "status",
            "activated_at",
            "ended_at",
            "updated_at",
        )
    )
    totals: dict[int, tuple[str, list[float], list[float]]] = {}
    windows: dict[int, tuple[datetime, datetime]] = {}
    tenant_of: dict[int, int] = {}
    for pk, tenant_id, name, gpu_model, count, compute, memory, status, start, ended, updated in rows:
        if start is None:
            continue
        end = ended or (now if status in Allocation.QUOTA_HOLDING else updated)
        windows[pk], tenant_of[pk] = (max(start, since), min(end, now)), tenant_id
        try:
            share = gpu_equivalents(gpu_model_for(gpu_model), compute, memory)
        except KeyError:
            share = 0.0
        slice_daily, gpu_daily = totals.setdefault(tenant_id, (name, [0.0] * days, [0.0] * days))[1:]
        for n, day_start in enumerate(day_starts):
            day_end = min(day_start + timedelta(days=1), now)
            hours = (min(end, day_end) - max(start, day_start)).total_seconds() / 3600
            if hours > 0:
                slice_daily[n] += count * hours
                gpu_daily[n] += share * hours
    used = _used_by_tenant_day(windows, tenant_of, since, days)
    over = over_share_counts(set(totals))
    tenants = []
    for tenant_id, (name, slice_daily, gpu_daily) in sorted(totals.items(), key=lambda kv: kv[1][0]):
        observed_daily, used_daily = used.get(tenant_id, ([0.0] * days, [0.0] * days))
        observed = sum(observed_daily)
        tenants.append(
            TenantShowback(
                tenant_id=tenant_id,
                tenant_name=name,
                colour=colours.get(tenant_id, TENANT_COLOURS[0]),
                slice_hours=round(sum(slice_daily), 2),
                gpu_equivalent_hours=round(sum(gpu_daily), 2),
                daily=[round(h, 2) for h in gpu_daily],
                daily_slice_hours=[round(h, 2) for h in slice_daily],
                used_slice_hours=round(sum(used_daily), 2) if observed else None,
                observed_slice_hours=round(observed, 2),
                daily_used_slice_hours=[
                    round(u, 2) if o else None for o, u in zip(observed_daily, used_daily, strict=True)
                ],
                over_shares=over.get(tenant_id, 0),
            )
        )
    return Showback(days=[d.date() for d in day_starts], tenants=tenants)
