"""Every page and list endpoint still answers with time-sliced and MPS pools in the fleet (their GPU models are
not in the MIG catalog), and the new views say what each kind isolates."""

from __future__ import annotations

import pytest
from django.test import Client

from allocations import services
from allocations.models import Allocation, NodePool
from tenants import services as tenant_services
from tests.sharing.conftest import Shared

PAGES = [
    "/",
    "/requests/new/",
    "/approvals/",
    "/quotas/",
    "/dashboard/",
    "/dashboard/usage/",
    "/dashboard/usage.csv",
    "/dashboard/fleet/",
    "/manage/pools/",
    "/manage/fleet/",
    "/manage/quotas/",
    "/api/v1/pools/",
    "/api/v1/quotas/",
    "/api/v1/allocations/",
]


def browser(user: object) -> Client:
    client = Client()
    client.force_login(user)  # type: ignore[arg-type]
    return client


def active_share(shared: Shared) -> int:
    world = shared.world
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=shared.l4.pk,
        profile="",
        memory_mib=6144,
        count=1,
        lease_hours=3,
        purpose="a notebook",
        actor=world.alice,
    )
    return services.provision_allocation(allocation_id=allocation.pk).pk


@pytest.mark.parametrize("who", ["alice", "root"])
def test_every_page_answers_with_shared_pools_in_the_fleet(shared: Shared, who: str) -> None:
    allocation_id = active_share(shared)
    user = getattr(shared.world, who)
    client = browser(user)
    pages = [
        *PAGES,
        f"/requests/{allocation_id}/",
        f"/dashboard/pools/{shared.l4.pk}/summary/",
        f"/dashboard/pools/{shared.l4.pk}/nodes/",
        f"/api/v1/pools/{shared.l4.pk}/capacity/",
        f"/api/v1/allocations/{allocation_id}/",
    ]
    for page in pages:
        response = client.get(page)
        assert response.status_code in (200, 302, 403), (page, response.status_code)


def test_prometheus_figures_render_with_shared_pools(shared: Shared) -> None:
    from portal.metrics.collector import render

    active_share(shared)
    assert b"l4-shared" in render()


def test_the_request_form_takes_a_memory_size_and_warns_before_submit(shared: Shared) -> None:
    world = shared.world
    client = browser(world.alice)
    # the form, before submit, says what time-slicing does not isolate
    page = client.get("/requests/new/").content.decode()
    assert 'id="isolation-warning"' in page
    assert "a crash or a memory hog hurts every tenant on the GPU" in page
    # when
    response = client.post(
        "/requests/new/",
        {
            "tenant": world.tenant_a.pk,
            "pool": shared.l4.pk,
            "memory_gib": "4",
            "count": "1",
            "lease_hours": "2",
            "purpose": "a notebook",
            "idempotency_key": "k1",
        },
    )
    # then
    assert response.status_code == 302
    allocation = Allocation.objects.get(pool=shared.l4)
    assert (allocation.memory_mib, allocation.profile) == (4096, "share")
    detail = client.get(response["Location"]).content.decode()
    assert "4 GiB share" in detail
    assert "No isolation" in detail
    assert "% of a GPU" in detail
    assert "asked for 1 × 4096 MiB share" in detail  # the timeline


def test_a_bad_memory_size_on_the_form_is_a_friendly_page(shared: Shared) -> None:
    world = shared.world
    response = browser(world.alice).post(
        "/requests/new/",
        {
            "tenant": world.tenant_a.pk,
            "pool": shared.l4.pk,
            "memory_gib": "99",
            "count": "1",
            "lease_hours": "2",
            "purpose": "too big",
            "idempotency_key": "k2",
        },
    )
    assert response.status_code == 400
    assert "between 1 and 23034 MiB" in response.content.decode()
    assert not Allocation.objects.filter(pool=shared.l4).exists()


def test_a_mig_only_tenant_gets_a_friendly_refusal_on_the_form(shared: Shared) -> None:
    world = shared.world
    tenant_services.update_tenant_policy(tenant_id=world.tenant_a.pk, actor=world.root, weakest_isolation="mig")
    response = browser(world.alice).post(
        "/requests/new/",
        {
            "tenant": world.tenant_a.pk,
            "pool": shared.l4.pk,
            "memory_gib": "2",
            "count": "1",
            "lease_hours": "2",
            "purpose": "refused",
            "idempotency_key": "k3",
        },
    )
    assert response.status_code == 400
    assert "accepts no GPU sharing weaker than MIG" in response.content.decode()


def test_an_admin_creates_a_time_sliced_pool_on_the_pools_page(shared: Shared) -> None:
    client = browser(shared.world.root)
    response = client.post(
        "/manage/pools/",
        {
            "name": "T4 shared",
            "slug": "t4-shared",
            "kind": "shared",
            "gpu_model": "NVIDIA T4",
            "sharing_interval": "Long",
            "tolerations": "",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    pool = NodePool.objects.get(slug="t4-shared")
    assert (pool.kind, pool.sharing_interval, pool.profiles) == ("shared", "Long", [])
    page = client.get("/manage/pools/").content.decode()
    assert "Time-sliced, slice Long" in page
    # and a MIG profile ticked for a shared pool is a field message, not a 500
    bad = client.post(
        "/manage/pools/",
        {"name": "Bad", "slug": "bad", "kind": "mps", "gpu_model": "NVIDIA H100 80GB HBM3", "tolerations": ""},
    )
    assert bad.status_code == 400
    assert "Unknown GPU model" in bad.content.decode()


def test_an_admin_sets_the_isolation_policy_on_the_tenant_page(shared: Shared) -> None:
    world = shared.world
    client = browser(world.root)
    url = f"/manage/tenants/{world.tenant_a.pk}/"
    page = client.get(url)
    assert page.status_code == 200 and "Weakest GPU sharing accepted" in page.content.decode()
    response = client.post(
        url,
        {
            "name": "Team A",
            "max_lease_hours": 168,
            "auto_approve_max_compute_slices": 2,
            "auto_approve_max_lease_hours": 24,
            "weakest_isolation": "mps",
            "avoid_co_tenants": "on",
        },
    )
    assert response.status_code == 302
    world.tenant_a.refresh_from_db()
    assert (world.tenant_a.weakest_isolation, world.tenant_a.avoid_co_tenants) == ("mps", True)


def test_the_pool_card_tells_what_fits_in_gib(shared: Shared) -> None:
    active_share(shared)
    page = browser(shared.world.alice).get(f"/dashboard/pools/{shared.l4.pk}/summary/").content.decode()
    assert "<strong>Time-sliced</strong>" in page
    assert "% of GPUs in use" in page
    assert 'data-profile="16 GiB"' in page and 'data-profile="whole GPU"' in page
    # a tenant's use is counted in shares there (a share has no compute slices: "(0 compute)" said nothing)
    assert "Team A: 1 share</li>" in page


def test_quota_balances_of_a_shared_pool_read_in_percent_and_gib(shared: Shared) -> None:
    page = browser(shared.world.alice).get("/quotas/").content.decode()
    assert "<dt>% of a GPU</dt>" in page and "<dt>GiB</dt>" in page
    assert "<dt>Compute slices</dt>" in page  # the MIG pool's card as before
