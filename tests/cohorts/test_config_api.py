"""Cohort configuration over the API (issue 15): /api/v1/cohorts/ and PATCH /api/v1/quotas/<id>/. Platform admins
write; members read the cohorts of pools where their tenants have quota, with only their own tenants' rows; bad
input is a 400 with field messages, and a refused call changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from allocations import services
from allocations.cohorts.config import Limits, create_cohort, set_quota_cohort
from allocations.models import Allocation, Cohort, NodePool, Quota
from tenants.models import AuditEvent
from tests.conftest import World

H100 = "NVIDIA H100 80GB HBM3"


def other_pool(world: World) -> NodePool:
    """A second pool where only tenant B has quota."""
    pool = services.create_node_pool(name="Other pool", slug="other", gpu_model=H100, actor=world.root)
    services.set_tenant_quota(
        tenant_id=world.tenant_b.pk, pool_id=pool.pk, compute_slices_limit=7, memory_slices_limit=8, actor=world.root
    )
    return pool


def quota_of(world: World, tenant: Any, pool: NodePool | None = None) -> Quota:
    return Quota.objects.get(tenant=tenant, pool=pool or world.pool)


def state() -> tuple[Any, ...]:
    return (
        list(Cohort.objects.order_by("pk").values_list("pk", "name", "reclaim_grace_minutes", "pool_id")),
        list(
            Quota.objects.order_by("pk").values_list(
                "pk",
                "cohort_id",
                "borrowing_compute_limit",
                "borrowing_memory_limit",
                "lending_compute_limit",
                "lending_memory_limit",
            )
        ),
        AuditEvent.objects.count(),
    )


def test_an_admin_creates_a_cohort_and_puts_both_tenants_in_it(world: World):
    # given
    root = world.client(world.root)
    # when
    created = root.post("/api/v1/cohorts/", {"pool": world.pool.pk, "name": "research", "reclaim_grace_minutes": 10})
    cohort_id = created.json()["id"]
    joined_a = root.patch(
        f"/api/v1/quotas/{quota_of(world, world.tenant_a).pk}/",
        {"cohort": cohort_id, "borrowing_compute_limit": 7, "lending_compute_limit": 0},
        format="json",
    )
    joined_b = root.patch(f"/api/v1/quotas/{quota_of(world, world.tenant_b).pk}/", {"cohort": cohort_id})
    # then
    assert created.status_code == 201, created.content
    assert (joined_a.status_code, joined_b.status_code) == (200, 200)
    assert {k: joined_a.json()[k] for k in ("cohort", "cohort_name", "borrowing_compute_limit")} == {
        "cohort": cohort_id,
        "cohort_name": "research",
        "borrowing_compute_limit": 7,
    }
    assert (joined_a.json()["lending_compute_limit"], joined_a.json()["borrowing_memory_limit"]) == (0, None)
    listed = root.get("/api/v1/cohorts/").json()
    assert [(c["name"], c["pool_slug"], c["reclaim_grace_minutes"], c["member_count"]) for c in listed] == [
        ("research", "h100", 10, 2)
    ]
    rows = {m["tenant_name"]: m for m in listed[0]["members"]}
    assert set(rows) == {"Team A", "Team B"}
    assert (rows["Team A"]["guarantee_compute"], rows["Team A"]["lendable_compute"]) == (14, 0)  # lends nothing
    assert (rows["Team B"]["lendable_compute"], rows["Team B"]["lendable_memory"]) == (14, 16)  # all it has unused
    verbs = list(AuditEvent.objects.filter(verb__contains="cohort").order_by("pk").values_list("verb", "tenant_id"))
    assert verbs == [
        ("create_cohort", None),
        ("set_quota_cohort", world.tenant_a.pk),
        ("set_quota_cohort", world.tenant_b.pk),
    ]


def test_a_patch_keeps_what_it_does_not_name_and_leaving_clears_the_limits(world: World):
    # given
    cohort = create_cohort(pool_id=world.pool.pk, name="research", actor=world.root)
    quota = quota_of(world, world.tenant_a)
    set_quota_cohort(quota_id=quota.pk, cohort_id=cohort.pk, limits=Limits(borrowing_compute_limit=3), actor=world.root)
    root = world.client(world.root)
    # when
    kept = root.patch(f"/api/v1/quotas/{quota.pk}/", {"lending_memory_limit": 4}, format="json").json()
    left = root.patch(f"/api/v1/quotas/{quota.pk}/", {"cohort": None}, format="json").json()
    # then
    assert (kept["cohort"], kept["borrowing_compute_limit"], kept["lending_memory_limit"]) == (cohort.pk, 3, 4)
    assert (left["cohort"], left["cohort_name"], left["borrowing_compute_limit"], left["lending_memory_limit"]) == (
        None,
        "",
        None,
        None,
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "", "pool": "POOL"}, "name"),
        ({"name": "x" * 101, "pool": "POOL"}, "name"),
        ({"name": "r", "pool": 999999}, "pool"),
        ({"name": "r", "pool": "POOL", "reclaim_grace_minutes": -1}, "reclaim_grace_minutes"),
        ({"name": "r", "pool": "POOL", "reclaim_grace_minutes": 10081}, "reclaim_grace_minutes"),
        ({"name": "r", "pool": "POOL", "reclaim_grace_minutes": "soon"}, "reclaim_grace_minutes"),
        ({"name": "research", "pool": "POOL"}, "name"),  # taken in this pool
    ],
)
def test_bad_cohort_input_is_a_400_naming_the_field_and_changes_nothing(world: World, body, field):
    # given
    create_cohort(pool_id=world.pool.pk, name="research", actor=world.root)
    before = state()
    # when
    payload = {k: (world.pool.pk if v == "POOL" else v) for k, v in body.items()}
    response = world.client(world.root).post("/api/v1/cohorts/", payload, format="json")
    # then
    assert response.status_code == 400, response.content
    assert list(response.json()["errors"]) == [field]
    assert state() == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"cohort": "OTHER"}, "cohort"),  # a cohort of another pool
        ({"cohort": 999999}, "cohort"),
        ({"cohort": "MINE", "borrowing_compute_limit": -1}, "borrowing_compute_limit"),
        ({"cohort": "MINE", "lending_memory_limit": 100001}, "lending_memory_limit"),
        ({"cohort": "MINE", "lending_compute_limit": "all"}, "lending_compute_limit"),
        ({"cohort": None, "borrowing_memory_limit": 2}, "borrowing_memory_limit"),  # limits without a cohort
        ({"compute_slices_limit": 99}, "compute_slices_limit"),  # set with POST, not here: not silently dropped
        ({"cohort": "MINE", "borrow_compute": 3}, "borrow_compute"),  # a misspelt limit
    ],
)
def test_bad_membership_input_is_a_400_naming_the_field_and_changes_nothing(world: World, body, field):
    # given
    mine = create_cohort(pool_id=world.pool.pk, name="research", actor=world.root)
    other = create_cohort(pool_id=other_pool(world).pk, name="elsewhere", actor=world.root)
    before = state()
    # when
    payload = {k: {"MINE": mine.pk, "OTHER": other.pk}.get(v, v) if isinstance(v, str) else v for k, v in body.items()}
    response = world.client(world.root).patch(
        f"/api/v1/quotas/{quota_of(world, world.tenant_a).pk}/", payload, format="json"
    )
    # then
    assert response.status_code == 400, response.content
    assert list(response.json()["errors"]) == [field]
    assert state() == before


def test_a_member_sees_only_the_cohorts_of_its_pools_and_only_its_own_tenants_rows(world: World):
    # given: a cohort in the shared pool with both tenants, and one in a pool where only tenant B has quota
    shared = create_cohort(pool_id=world.pool.pk, name="research", actor=world.root)
    hidden = create_cohort(pool_id=other_pool(world).pk, name="elsewhere", actor=world.root)
    for tenant in (world.tenant_a, world.tenant_b):
        set_quota_cohort(quota_id=quota_of(world, tenant).pk, cohort_id=shared.pk, limits=Limits(), actor=world.root)
    alice = world.client(world.alice)
    # when
    listed = alice.get("/api/v1/cohorts/").json()
    hidden_one = alice.get(f"/api/v1/cohorts/{hidden.pk}/")
    # then: the shared cohort, with tenant A's row only (the count says there are two members)
    assert [(c["id"], c["member_count"], [m["tenant_name"] for m in c["members"]]) for c in listed] == [
        (shared.pk, 2, ["Team A"])
    ]
    assert hidden_one.status_code == 404
    # and charlie (tenant B) sees both
    assert [c["name"] for c in world.client(world.charlie).get("/api/v1/cohorts/").json()] == [
        "research",
        "elsewhere",
    ]  # by pool name: H100 pool, Other pool


@pytest.mark.parametrize("who", ["alice", "mallory", "charlie"])
def test_no_member_creates_changes_deletes_or_joins_a_cohort(world: World, who: str):
    # given
    cohort = create_cohort(pool_id=world.pool.pk, name="research", actor=world.root)
    client = world.client(getattr(world, who))
    quota = quota_of(world, world.tenant_a)
    before = state()
    # when
    answers = [
        client.post("/api/v1/cohorts/", {"pool": world.pool.pk, "name": "mine"}).status_code,
        client.patch(f"/api/v1/cohorts/{cohort.pk}/", {"reclaim_grace_minutes": 0}).status_code,
        client.delete(f"/api/v1/cohorts/{cohort.pk}/").status_code,
        client.patch(f"/api/v1/quotas/{quota.pk}/", {"cohort": cohort.pk}).status_code,
    ]
    # then: 403 everywhere, except that charlie cannot even see tenant A's quota (404)
    assert answers == [403, 403, 403, 404 if who == "charlie" else 403]
    assert state() == before


def test_a_tenant_holding_borrowed_slices_cannot_leave_and_its_cohort_cannot_be_deleted(world: World):
    # given: tenant A is in a cohort and holds an allocation with a borrowed part
    cohort = create_cohort(pool_id=world.pool.pk, name="research", actor=world.root)
    quota = quota_of(world, world.tenant_a)
    set_quota_cohort(quota_id=quota.pk, cohort_id=cohort.pk, limits=Limits(), actor=world.root)
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="1g.10gb",
        count=1,
        lease_hours=1,
        purpose="borrowing",
        actor=world.alice,
    )
    Allocation.objects.filter(pk=allocation.pk).update(borrowed_compute_slices=1, borrowed_memory_slices=1)
    root = world.client(world.root)
    before = state()
    # when
    leave = root.patch(f"/api/v1/quotas/{quota.pk}/", {"cohort": None}, format="json")
    delete = root.delete(f"/api/v1/cohorts/{cohort.pk}/")
    # then
    assert (leave.status_code, delete.status_code) == (409, 409)
    assert leave.json()["code"] == "cohort_in_use"
    assert "borrowed slices" in delete.json()["detail"]
    assert state() == before
    # and once the borrowed part is given back, the cohort goes and its members leave it
    Allocation.objects.filter(pk=allocation.pk).update(borrowed_compute_slices=0, borrowed_memory_slices=0)
    assert root.delete(f"/api/v1/cohorts/{cohort.pk}/").status_code == 204
    assert Cohort.objects.count() == 0
    assert quota_of(world, world.tenant_a).cohort_id is None


def test_renaming_and_changing_the_grace(world: World):
    # given
    cohort = create_cohort(pool_id=world.pool.pk, name="research", actor=world.root)
    create_cohort(pool_id=world.pool.pk, name="taken", actor=world.root)
    root = world.client(world.root)
    # when
    changed = root.patch(f"/api/v1/cohorts/{cohort.pk}/", {"name": "science", "reclaim_grace_minutes": 0})
    clash = root.patch(f"/api/v1/cohorts/{cohort.pk}/", {"name": "taken"})
    # then
    assert (changed.status_code, changed.json()["name"], changed.json()["reclaim_grace_minutes"]) == (
        200,
        "science",
        0,
    )
    assert (clash.status_code, list(clash.json()["errors"])) == (400, ["name"])
    assert Cohort.objects.get(pk=cohort.pk).name == "science"
    # and: a form (the browsable API's, with its CSRF token) is no field it refuses
    form = root.patch(
        f"/api/v1/cohorts/{cohort.pk}/",
        "name=biology&csrfmiddlewaretoken=x",
        content_type="application/x-www-form-urlencoded",
    )
    assert (form.status_code, form.json()["name"]) == (200, "biology")


def test_a_cohort_patch_naming_what_it_cannot_change_is_a_400_not_a_silent_200(world: World):
    # given: a cohort, and another pool it could be mistaken to move to
    cohort = create_cohort(pool_id=world.pool.pk, name="research", actor=world.root)
    elsewhere = other_pool(world)
    before = state()
    # when: root asks to move it (and rename it) in one PATCH
    response = world.client(world.root).patch(
        f"/api/v1/cohorts/{cohort.pk}/", {"pool": elsewhere.pk, "name": "moved"}, format="json"
    )
    # then: 400 on the field it cannot change, and nothing changes
    assert response.status_code == 400, response.content
    assert list(response.json()["errors"]) == ["pool"]
    assert "stays in its pool" in response.json()["errors"]["pool"][0]
    assert state() == before


@pytest.mark.parametrize("pool", ["h100", "\u00b2", "-1", "999999", "99999999999999999999"])  # "²": see id_query_param
def test_the_pool_filter_takes_a_number(world: World, pool: str):
    response = world.client(world.alice).get("/api/v1/cohorts/", {"pool": pool})
    assert (response.status_code, list(response.json()["errors"])) == (400, ["pool"])


def test_on_kubernetes_a_change_of_membership_reapplies_every_members_cluster_fence(
    world: World, settings, django_capture_on_commit_callbacks
):
    # given: tenant B in a cohort; the cluster's device quota counts what the cohort could lend each member
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    cohort = create_cohort(pool_id=world.pool.pk, name="research", actor=world.root)
    set_quota_cohort(
        quota_id=quota_of(world, world.tenant_b).pk, cohort_id=cohort.pk, limits=Limits(), actor=world.root
    )
    # when: tenant A joins
    with django_capture_on_commit_callbacks() as callbacks:
        set_quota_cohort(
            quota_id=quota_of(world, world.tenant_a).pk, cohort_id=cohort.pk, limits=Limits(), actor=world.root
        )
    # then: both tenants' namespaces are onboarded again, once each
    assert [(c.func.__self__.name, c.args) for c in callbacks] == [
        ("allocations.tasks.onboard_tenant_task", (t,)) for t in sorted([world.tenant_a.pk, world.tenant_b.pk])
    ]
