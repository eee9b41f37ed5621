"""The portal's main pages with something on each, for the layout tests (tests/browser/test_mobile.py,
tests/web/test_table_labels.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.utils import timezone

from allocations import services
from allocations.cohorts.config import Limits, create_cohort, set_quota_cohort
from allocations.models import Allocation, SlicePlacement
from allocations.services.bookings import request_booking
from tenants.services import create_api_token
from tests.conftest import World


@dataclass(frozen=True)
class Ids:
    active: int
    pending: int
    node: int


def seed(world: World) -> Ids:
    """Something on every page: active and pending requests, a quota change, a token per user."""
    active, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="1g.10gb",
        count=2,
        lease_hours=8,
        purpose="Evaluate a 7B model on the nightly benchmark suite with a long description",
        actor=world.alice,
    )
    services.provision_allocation(allocation_id=active.pk)
    pending, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="3g.40gb",
        count=1,
        lease_hours=8,
        purpose="Fine-tune",
        actor=world.alice,
    )
    assert pending.status == Allocation.Status.PENDING
    services.request_quota_change(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        compute_slices_limit=28,
        memory_slices_limit=32,
        justification="The nightly benchmark suite grows",
        actor=world.mallory,
    )
    for user in (world.alice, world.mallory, world.root):
        create_api_token(user=user, name="ci-pipeline-nightly-benchmarks", scope="write", expires_at=None, actor=user)
    # Bookings (issue 15): one pending, from tomorrow for a day, on the bookings pages and this week's calendar.
    start = timezone.now().replace(minute=0, second=0, microsecond=0) + timedelta(days=1)
    request_booking(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="3g.40gb",
        count=2,
        starts_at=start,
        ends_at=start + timedelta(hours=26),
        purpose="Workshop on fine-tuning with a long description",
        actor=world.alice,
    )
    # A cohort (issue 15) with both teams in it, so its page has members to show.
    cohort = create_cohort(pool_id=world.pool.pk, name="research-and-production-teams", actor=world.root)
    for tenant in (world.tenant_a, world.tenant_b):
        quota = tenant.quotas.get(pool=world.pool)
        set_quota_cohort(
            quota_id=quota.pk, cohort_id=cohort.pk, limits=Limits(borrowing_compute_limit=7), actor=world.root
        )
    node = SlicePlacement.objects.filter(allocation=active).values_list("gpu__node_id", flat=True).first()
    assert node is not None
    return Ids(active=active.pk, pending=pending.pk, node=node)


def pages_for(who: str, world: World, ids: Ids) -> list[tuple[str, str]]:
    pages = [
        ("my-requests", "/"),
        ("new-request", "/requests/new/"),
        ("request-detail", f"/requests/{ids.active}/"),
        ("quotas", "/quotas/"),
        ("dashboard", "/dashboard/"),
        ("fleet-overview", "/dashboard/fleet/"),
        ("node-slots", f"/dashboard/nodes/{ids.node}/"),
        ("usage", "/dashboard/usage/"),
        ("tokens", "/tokens/"),
        ("bookings", "/bookings/"),
        ("new-booking", "/bookings/new/"),
        ("inbox", "/inbox/"),
        ("namespaces", f"/tenants/{world.tenant_a.pk}/namespaces/"),
    ]
    if who in ("mallory", "root"):
        pages += [("approvals", "/approvals/"), ("idle-reclaim", f"/tenants/{world.tenant_a.pk}/idle-reclaim/")]
    if who == "root":
        pages += [
            ("admin-tenants", "/manage/tenants/"),
            ("admin-tenant", f"/manage/tenants/{world.tenant_a.pk}/"),
            ("admin-pools", "/manage/pools/"),
            ("admin-fleet", "/manage/fleet/"),
            ("admin-quotas", "/manage/quotas/"),
            ("admin-quota-changes", "/manage/quota-changes/"),
            ("admin-audit-log", "/manage/audit/"),
            ("admin-booking-calendar", "/manage/bookings/"),
            ("admin-what-if", f"/manage/pools/{world.pool.pk}/what-if/?q=add-gpus&count=8&model=&gpus_per_node=8"),
            ("admin-cohorts", f"/manage/pools/{world.pool.pk}/cohorts/"),
            ("admin-compaction", f"/manage/pools/{world.pool.pk}/compaction/"),
            ("admin-admission", f"/manage/pools/{world.pool.pk}/admission/"),
            ("admin-cluster-check", "/manage/cluster-check/"),
            ("admin-sso", "/manage/sso/"),
        ]
    return pages
