"""Read-only queries for views, the API and the CLI. Every one is scoped to a user."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db.models import BigIntegerField, Count, ExpressionWrapper, F, Max, Q, QuerySet, Sum
from django.utils import timezone

from allocations.costs import gpu_equivalents, gpu_model_for
from allocations.mig.catalog import load_catalog
from allocations.mig.layout import geometry
from allocations.mig.policies import stranded
from allocations.models import Allocation, Gpu, Node, NodePool, Quota, QuotaChangeRequest, SlicePlacement
from tenants.models import AuditEvent, Tenant, member_tenant_ids
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

    @property
    def compute_free(self) -> int:
        return max(self.compute_limit - self.compute_used, 0)

    @property
    def memory_free(self) -> int:
        return max(self.memory_limit - self.memory_used, 0)

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
    )


def balances_for_user(user: User, tenant_id: int | None = None) -> list[Balance]:
    quotas = Quota.objects.for_user(user).select_related("tenant", "pool")
    if tenant_id is not None:
        quotas = quotas.filter(tenant_id=tenant_id)
    return [balance_of(q) for q in quotas]


def quota_shortfall(*, quota: Quota | None, allocation: Allocation) -> str | None:
    """Why the allocation does not fit the (locked) quota right now, or None when it fits."""
    if quota is None:
        return f"The tenant has no quota in pool {allocation.pool.slug}."
    free_compute = quota.compute_slices_limit - quota.compute_slices_used
    free_memory = quota.memory_slices_limit - quota.memory_slices_used
    if allocation.compute_slices > free_compute:
        return (
            f"Needs {allocation.compute_slices} compute slices; {max(free_compute, 0)} of "
            f"{quota.compute_slices_limit} are free."
        )
    if allocation.memory_slices > free_memory:
        return (
            f"Needs {allocation.memory_slices} memory slots; {max(free_memory, 0)} of "
            f"{quota.memory_slices_limit} are free."
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


def search_allocations(user: User, text: str) -> list[Allocation]:
    qs = Allocation.objects.for_user(user).select_related("tenant", "pool", "requested_by")
    if text:
        qs = qs.filter(Q(purpose__icontains=text) | Q(claim_name__icontains=text) | Q(profile__icontains=text))
    return list(qs[:200])


# Shapes for the browser pages.

Status = Allocation.Status
RELEASABLE = (Status.PENDING, Status.APPROVED, Status.PROVISIONING, Status.ACTIVE)


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
    """The share of whole GPUs the request costs: max(compute / GPU's compute, memory / GPU's memory)."""
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


def allocation_actions(user: User, allocation: Allocation) -> AllocationActions:
    manages = can_manage_tenant(user, allocation.tenant_id)
    owner_or_manager = manages or allocation.requested_by_id == user.pk
    extend_max = max(allocation.tenant.max_lease_hours - allocation.lease_hours, 0)
    return AllocationActions(
        can_release=owner_or_manager and allocation.status in RELEASABLE,
        can_extend=owner_or_manager and allocation.status == Status.ACTIVE and extend_max > 0,
        can_decide=manages and allocation.status == Status.PENDING,
        extend_max_hours=extend_max,
    )


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
        for q in Quota.objects.filter(tenant_id__in={a.tenant_id for a in pending}).select_related("tenant", "pool")
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

    @property
    def label(self) -> str:
        return self.tenant_name if self.visible else "occupied"


@dataclass(frozen=True, slots=True)
class GpuView:
    gpu_id: int
    index: int
    slots: int
    slices: list[SliceView]
    free_slots: list[int]


@dataclass(frozen=True, slots=True)
class NodeView:
    node_id: int
    name: str
    state: str
    state_label: str
    gpus: list[GpuView]


@dataclass(frozen=True, slots=True)
class NodePage:
    pool: NodePool
    nodes: list[NodeView]
    total: int
    page: int
    pages: int
    legend: list[TenantUsage]


def _visible_tenant_ids(user: User) -> set[int] | None:
    """The tenants whose slices the user sees in full; None means all of them (staff)."""
    if user.is_staff:
        return None
    if not user.is_authenticated:
        return set()
    return set(member_tenant_ids(user).values_list("tenant_id", flat=True))


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
    slots are occupied (not by whom). Requests that change no slot (pending, rejected, a lease extended) do not
    change it. Three queries whatever the fleet size."""
    parts: dict[int, list[str]] = {pk: [] for pk in NodePool.objects.values_list("pk", flat=True)}
    for row in Node.objects.values("pool_id").annotate(n=Count("pk"), m=Max("updated_at")).order_by():
        parts.setdefault(row["pool_id"], []).append(f"n{row['n']}:{row['m'].isoformat() if row['m'] else ''}")
    held = SlicePlacement.objects.filter(allocation__status__in=Allocation.QUOTA_HOLDING)
    for row in (
        held.values("allocation__pool_id")
        .annotate(n=Count("pk"), s=Sum(_SLOT_MIX), q=Sum(_SLOT_MIX_SQUARED))
        .order_by()
    ):
        parts.setdefault(row["allocation__pool_id"], []).append(f"p{row['n']}:{row['s']}:{row['q']}")
    return {pool_id: _digest(*p) for pool_id, p in parts.items()}


def _tenant_versions() -> dict[int, dict[int, str]]:
    """Per pool and tenant, an opaque hash of that tenant's requests in the pool: it changes when one is
    created or changes state (every service saves `updated_at`). One query."""
    out: dict[int, dict[int, str]] = {}
    rows = Allocation.objects.values("pool_id", "tenant_id").annotate(n=Count("pk"), m=Max("updated_at")).order_by()
    for row in rows:
        out.setdefault(row["pool_id"], {})[row["tenant_id"]] = _digest(row["n"], row["m"].isoformat())
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
    """Four aggregate queries over the whole fleet, whatever its size or the number of viewers."""
    return FleetVersions(layouts=_pool_versions(), tenants=_tenant_versions())


def viewer_scope(user: User) -> frozenset[int] | None:
    """The tenants whose requests the live stream may tell the user about; None: all of them (staff)."""
    visible = _visible_tenant_ids(user)
    return None if visible is None else frozenset(visible)


def dashboard_versions(user: User) -> ViewerVersions:
    """The user's live-stream versions, read now (the stream itself shares one read per second per process)."""
    return fleet_versions().for_viewer(viewer_scope(user))


def _requested_mix(pools: list[NodePool]) -> dict[int, dict[str, float]]:
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
    """Per pool: nodes by state, GPUs, slices in use by tenant, how many more of each offered profile
    fit now (ready nodes, exactly, by the placement engine), fragmentation (free compute slices on
    ready GPUs that no mix of the pool's requested profiles can use), pending requests.

    Seven queries whatever the fleet size (pools, tenants, memberships, GPUs, placements, pending,
    mix) plus three for the versions."""
    filters = filters or DashboardFilters()
    if not user.is_authenticated:
        return []
    pools = list(NodePool.objects.order_by("name"))
    colours = _tenant_colours()
    tenant_names = dict(Tenant.objects.values_list("pk", "name"))
    visible = _visible_tenant_ids(user)
    models = {pool.pk: gpu_model_for(pool.gpu_model) for pool in pools}
    compute_of: dict[tuple[int, str], int] = {}
    # No ORDER BY on these two: the layouts are grouped in Python, sorting thousands of rows would be waste.
    gpus = Gpu.objects.order_by().values_list("pk", "node_id", "node__state", "node__pool_id")
    held: dict[int, list[tuple[str, int, bool]]] = {}
    usage: dict[int, dict[int | None, list[int]]] = {}
    for gpu_id, profile, start, tenant_id, pool_id in (
        SlicePlacement.objects.filter(allocation__status__in=Allocation.QUOTA_HOLDING)
        .order_by()
        .values_list("gpu_id", "profile", "start", "allocation__tenant_id", "allocation__pool_id")
    ):
        held.setdefault(gpu_id, []).append((profile, start, False))
        compute = compute_of.get((pool_id, profile))
        if compute is None:
            model = models.get(pool_id)
            names = {p.name: p.compute_slices for p in model.profiles} if model else {}
            compute = compute_of[(pool_id, profile)] = names.get(profile, 0)
        shown = tenant_id if visible is None or tenant_id in visible else None
        counts = usage.setdefault(pool_id, {}).setdefault(shown, [0, 0])
        counts[0] += 1
        counts[1] += compute
    pending = {
        row["pool_id"]: row["n"]
        for row in Allocation.objects.filter(status=Allocation.Status.PENDING)
        .values("pool_id")
        .annotate(n=Count("pk"))
        .order_by()
    }
    mix = _requested_mix(pools)
    versions = _pool_versions()
    by_pool: dict[int, list[tuple[int, int, str, int]]] = {}
    for gpu_row in gpus:
        by_pool.setdefault(gpu_row[3], []).append(gpu_row)
    out = []
    for pool in pools:
        if filters.pool_id is not None and pool.pk != filters.pool_id:
            continue
        model = models[pool.pk]
        geom = geometry(model)
        rows = by_pool.get(pool.pk, [])
        states: dict[str, int] = {}
        seen_nodes: set[int] = set()
        # Ready GPUs grouped by layout: fits-now and fragmentation are computed once per distinct layout,
        # exactly as the placement engine's fits_now does.
        layouts: dict[tuple[tuple[str, int, bool], ...], int] = {}
        for gpu_id, node_id, state, _ in rows:
            if node_id not in seen_nodes:
                seen_nodes.add(node_id)
                states[state] = states.get(state, 0) + 1
            if state == Node.State.READY:
                layout = tuple(sorted(held.get(gpu_id, ())))
                layouts[layout] = layouts.get(layout, 0) + 1
        total_mix = sum(mix[pool.pk].values()) or 1.0
        allowed = frozenset(
            geom.index[name]
            for name, n in mix[pool.pk].items()
            if name in geom.index and n / total_mix >= DASHBOARD_MIX_THRESHOLD
        )
        fits: dict[str, int] = {}
        lost = free = 0
        for layout, n in layouts.items():
            layout_key = geom.named_key(layout)
            for prof, f in zip(geom.profiles, geom.fit(layout_key), strict=True):
                fits[prof.name] = fits.get(prof.name, 0) + n * f
            free += n * (model.compute_slices - geom.info(layout_key).allocated_compute)
            lost += n * stranded(geom, layout_key, allowed)
        pool_usage = usage.get(pool.pk, {})
        tenants = [
            TenantUsage(tenant_names.get(t, "?"), colours.get(t, TENANT_COLOURS[0]), v[0], v[1], True)
            for t, v in sorted(pool_usage.items(), key=lambda kv: tenant_names.get(kv[0] or 0, ""))
            if t is not None
        ]
        if None in pool_usage:
            tenants.append(TenantUsage("Other tenants", "", pool_usage[None][0], pool_usage[None][1], False))
        gpu_total = len(rows)
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
                fits_now={name: fits.get(name, 0) for name in pool.profiles},
                fragmentation_stranded=lost,
                fragmentation_free=free,
                pending=pending.get(pool.pk, 0),
                version=versions.get(pool.pk, ""),
            )
        )
    return out


def dashboard_nodes(user: User, pool_id: int, filters: DashboardFilters) -> NodePage:
    """One page of a pool's nodes, each GPU with its instances at their recorded slots.

    Filters: node state; tenant (only among the tenants the user may see); search by node name or by
    claim name (claims of visible tenants only). Five queries whatever the pool size (pool, visible
    tenants, count, node page, GPUs, placements). Raises NodePool.DoesNotExist."""
    pool = NodePool.objects.get(pk=pool_id)
    visible = _visible_tenant_ids(user)
    nodes = Node.objects.filter(pool_id=pool.pk)
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
    width = gpu_model_for(pool.gpu_model).memory_slices
    gpus: dict[int, list[tuple[int, int]]] = {}
    for gpu_id, node_id, index in (
        Gpu.objects.filter(node_id__in=node_ids).order_by("index").values_list("pk", "node_id", "index")
    ):
        gpus.setdefault(node_id, []).append((gpu_id, index))
    colours = _tenant_colours()
    slices: dict[int, list[SliceView]] = {}
    legend: dict[str, TenantUsage] = {}
    for row in (
        SlicePlacement.objects.filter(gpu__node_id__in=node_ids, allocation__status__in=Allocation.QUOTA_HOLDING)
        .order_by("gpu_id", "start")
        .values(
            "pk",
            "gpu_id",
            "profile",
            "start",
            "size",
            "device_name",
            "allocation_id",
            "allocation__tenant_id",
            "allocation__tenant__name",
            "allocation__claim_name",
            "allocation__status",
            "allocation__requested_by__username",
            "allocation__lease_expires_at",
        )
    ):
        tenant_id = row["allocation__tenant_id"]
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
            )
            legend.setdefault("", TenantUsage("Occupied (another tenant)", "", 0, 0, False))
        slices.setdefault(row["gpu_id"], []).append(view)
    states = dict(Node.State.choices)
    views = []
    for node_id, name, state in node_rows:
        gpu_views = []
        for gpu_id, index in gpus.get(node_id, []):
            on_gpu = slices.get(gpu_id, [])
            taken = {s for v in on_gpu for s in range(v.start, v.start + v.size)}
            gpu_views.append(GpuView(gpu_id, index, width, on_gpu, [s for s in range(width) if s not in taken]))
        views.append(NodeView(node_id, name, state, str(states.get(state, state)), gpu_views))
    return NodePage(
        pool=pool,
        nodes=views,
        total=total,
        page=page,
        pages=pages,
        legend=sorted(legend.values(), key=lambda u: (not u.mine, u.label)),
    )


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


@dataclass(frozen=True, slots=True)
class Showback:
    days: list[date]
    tenants: list[TenantShowback]

    @property
    def daily_max(self) -> float:
        totals = [sum(t.daily[i] for t in self.tenants) for i in range(len(self.days))]
        return max(totals, default=0.0)


def showback_for_user(user: User, *, days: int, now: datetime | None = None) -> Showback:
    """Per tenant the user may see (all for staff): slice-hours and GPU-equivalent-hours held over the
    last `days` whole UTC days up to now, from each allocation's activated_at to its ended_at (or now
    while it still holds slices). GPU-equivalents: max(compute / GPU's compute, memory / GPU's memory)
    of the request. Two queries whatever the number of allocations."""
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
    for tenant_id, name, gpu_model, count, compute, memory, status, start, ended, updated in rows:
        if start is None:
            continue
        end = ended or (now if status in Allocation.QUOTA_HOLDING else updated)
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
    tenants = [
        TenantShowback(
            tenant_id=tenant_id,
            tenant_name=name,
            colour=colours.get(tenant_id, TENANT_COLOURS[0]),
            slice_hours=round(sum(slice_daily), 2),
            gpu_equivalent_hours=round(sum(gpu_daily), 2),
            daily=[round(h, 2) for h in gpu_daily],
            daily_slice_hours=[round(h, 2) for h in slice_daily],
        )
        for tenant_id, (name, slice_daily, gpu_daily) in sorted(totals.items(), key=lambda kv: kv[1][0])
    ]
    return Showback(days=[d.date() for d in day_starts], tenants=tenants)
