"""What-if over the API and on its page (issue 14): answers from the pool's recorded layouts and queue, who
may ask, bad input as field messages, and nothing written."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from allocations import services
from allocations.models import Allocation, NodePool
from tenants.models import AuditEvent, Membership
from tests.conftest import H100, World

pytestmark = pytest.mark.django_db

EMPTY_H100_FITS = {
    "1g.10gb": 7,
    "1g.10gb+me": 1,
    "1g.20gb": 4,
    "2g.20gb": 3,
    "3g.40gb": 2,
    "4g.40gb": 1,
    "7g.80gb": 1,
}


def request(world: World, pool: NodePool, profile: str) -> Allocation:
    """alice asks, mallory approves past the auto-approve policy, the simulated backend places or queues it."""
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=pool.pk,
        profile=profile,
        count=1,
        lease_hours=4,
        purpose="what-if",
        actor=world.alice,
    )
    if allocation.status == Allocation.Status.PENDING:
        services.approve_allocation(allocation_id=allocation.pk, actor=world.mallory)
    return services.provision_allocation(allocation_id=allocation.pk)


def one_gpu_pool(world: World) -> NodePool:
    """One H100 taken whole by tenant A's 7g, and A's 3g queued behind it."""
    pool = services.create_node_pool(name="One GPU", slug="one", gpu_model=H100, actor=world.root)
    services.register_node(pool_id=pool.pk, name="one-node-0", gpu_count=1, actor=world.root)
    services.set_tenant_quota(
        tenant_id=world.tenant_a.pk, pool_id=pool.pk, compute_slices_limit=14, memory_slices_limit=16, actor=world.root
    )
    assert request(world, pool, "7g.80gb").status == Allocation.Status.ACTIVE
    assert request(world, pool, "3g.40gb").status == Allocation.Status.QUEUED
    return pool


def state() -> tuple[Any, ...]:
    return AuditEvent.objects.count(), list(Allocation.objects.order_by("pk").values_list("pk", "status"))


def test_adding_a_gpu_serves_the_queued_request_and_writes_nothing(world: World):
    # given
    pool = one_gpu_pool(world)
    before = state()
    # when
    response = world.client(world.mallory).get(f"/api/v1/pools/{pool.pk}/what-if/add-gpus/", {"count": 1})
    # then
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["model"] == H100 and (body["gpus_added"], body["nodes_added"]) == (1, 1)
    assert body["before"] == {
        "gpus": 1,
        "whole_gpus_free": 0,
        "compute_total": 7,
        "compute_held": 7,
        "compute_free": 0,
        "memory_total": 8,
        "memory_held": 8,
        "memory_free": 0,
        "fits": dict.fromkeys(EMPTY_H100_FITS, 0),
    }
    assert body["after"]["fits"] == EMPTY_H100_FITS
    assert (body["after"]["whole_gpus_free"], body["after"]["compute_free"], body["after"]["memory_free"]) == (1, 7, 8)
    assert body["queued_before"] == {"requests": 1, "slices": 1, "served_requests": 0, "served_slices": 0}
    assert body["queued_after"] == {"requests": 1, "slices": 1, "served_requests": 1, "served_slices": 1}
    assert body["refused_after"] == {"requests": 0, "slices": 0, "served_requests": 0, "served_slices": 0}
    assert state() == before


def test_doubling_the_quota_shows_capacity_binds_and_the_queued_request_still_waits(world: World):
    # given: tenant A holds 10 of 14 compute slices and 12 of 16 memory slots (the 7g and the queued 3g)
    pool = one_gpu_pool(world)
    # when
    response = world.client(world.mallory).get(f"/api/v1/pools/{pool.pk}/what-if/quota/", {"tenant": "team-a"})
    # then
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["tenant"], body["tenant_id"]) == ("team-a", world.tenant_a.pk)
    assert (body["before"], body["after"]) == ({"compute": 14, "memory": 16}, {"compute": 28, "memory": 32})
    rooms = {
        r["profile"]: (r["quota_before"], r["quota_after"], r["more_after"], r["bound_after"]) for r in body["rooms"]
    }
    assert rooms["1g.10gb"] == (4, 18, 0, "capacity")
    assert rooms["7g.80gb"] == (0, 2, 0, "capacity")
    assert (body["queued"], body["queued_admitted_before"], body["queued_admitted_after"]) == (1, 0, 0)
    assert (body["first_position_before"], body["first_position_after"]) == (1, 1)
    assert (body["others_queued"], body["pending"], body["pending_within_quota_after"]) == (0, 0, 0)


def test_the_best_mix_of_an_empty_pool_needs_no_move(world: World):
    response = world.client(world.root).get(f"/api/v1/pools/{world.pool.pk}/what-if/mix/")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["gpus"] == 16 and body["current"] == [{"counts": {}, "gpus": 16}]
    assert sum(m["gpus"] for m in body["target"]) == 16
    assert (body["moves"], body["gpus_without_moves"], body["optimal"]) == (0, 16, True)
    assert body["served_compute"] <= body["demand_compute"]
    assert body["creates"] == sum(m["gpus"] * sum(m["counts"].values()) for m in body["target"])


def test_only_admins_and_managers_of_a_tenant_with_quota_there_may_ask(world: World):
    # given: charlie manages tenant B, which has quota in the shared fixture pool but not in the one-GPU pool
    pool = one_gpu_pool(world)
    Membership.objects.filter(user=world.charlie).update(role=Membership.Role.MANAGER)
    before = state()
    url = f"/api/v1/pools/{pool.pk}/what-if/mix/"
    # when / then
    assert world.client(world.charlie).get(url).status_code == 403
    assert world.client(world.charlie).get(f"/api/v1/pools/{world.pool.pk}/what-if/mix/").status_code == 200
    assert world.client(world.alice).get(url).status_code == 403
    assert world.client(None).get(url).status_code == 401
    assert world.client(world.mallory).get("/api/v1/pools/99999/what-if/mix/").status_code == 404
    # charlie may not ask about tenant A, and learns nothing about it (the same answer as an unknown tenant)
    other = world.client(world.charlie).get(f"/api/v1/pools/{world.pool.pk}/what-if/quota/", {"tenant": "team-a"})
    unknown = world.client(world.charlie).get(f"/api/v1/pools/{world.pool.pk}/what-if/quota/", {"tenant": "nope"})
    assert other.status_code == unknown.status_code == 400
    assert other.json()["errors"] == {"tenant": ["No tenant 'team-a' that you manage."]}
    assert unknown.json()["errors"] == {"tenant": ["No tenant 'nope' that you manage."]}
    assert state() == before


@pytest.mark.parametrize(
    ("path", "params", "errors"),
    [
        ("add-gpus", {}, {"count": ["This field is required."]}),
        ("add-gpus", {"count": 0}, {"count": ["Ensure this value is greater than or equal to 1."]}),
        ("add-gpus", {"count": "eight"}, {"count": ["A valid integer is required."]}),
        (
            "add-gpus",
            {"count": 1, "model": "NVIDIA Z9"},
            {"model": ["no GPU model 'NVIDIA Z9' in the MIG catalog; known models: "]},
        ),
        (
            "add-gpus",
            {"count": 1, "model": "NVIDIA A30"},
            {"model": ["NVIDIA A30 has no 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb: a "]},
        ),
        ("add-gpus", {"count": 1, "gpus_per_node": 17}, {"gpus_per_node": ["Ensure this value is less than or "]}),
        ("quota", {}, {"tenant": ["This field is required."]}),
        (
            "quota",
            {"tenant": "99999999999999999999"},
            {"tenant": ["No tenant '99999999999999999999' that you manage."]},
        ),
        ("quota", {"tenant": "²"}, {"tenant": ["No tenant '²' that you manage."]}),
        ("quota", {"tenant": "team-a", "factor": 2, "compute": 3}, {"factor": ["Give a factor or new limits, "]}),
        ("quota", {"tenant": "team-a", "factor": 0}, {"factor": ["The factor must be above 0 and at most 100."]}),
        # an empty optional number is no number (the schema's word), not the default
        ("add-gpus", {"count": 1, "gpus_per_node": ""}, {"gpus_per_node": ["A valid integer is required."]}),
        ("quota", {"tenant": "team-a", "factor": ""}, {"factor": ["A valid number is required."]}),
        (
            "quota",
            {"tenant": "team-a", "compute": "", "memory": ""},
            {"compute": ["A valid integer is required."], "memory": ["A valid integer is required."]},
        ),
    ],
)
def test_bad_input_is_a_400_naming_the_field(world: World, path: str, params: dict[str, Any], errors: dict[str, Any]):
    before = state()
    response = world.client(world.mallory).get(f"/api/v1/pools/{world.pool.pk}/what-if/{path}/", params)
    assert response.status_code == 400, response.content
    got = response.json()["errors"]
    assert set(got) == set(errors)
    for field, (start,) in errors.items():
        assert got[field][0].startswith(start), got
    assert state() == before


def test_a_time_sliced_pool_is_refused_with_a_message(world: World):
    l4 = services.create_node_pool(name="L4", slug="l4", gpu_model="NVIDIA L4", kind="shared", actor=world.root)
    response = world.client(world.root).get(f"/api/v1/pools/{l4.pk}/what-if/mix/")
    assert response.status_code == 400
    assert response.json()["errors"] == {"pool": ["L4 shares whole GPUs; the what-if covers MIG pools only."]}


# --- the page ---------------------------------------------------------------------------------------------


def page(world: World, who: str) -> Client:
    client = Client()
    client.force_login(getattr(world, who))
    return client


def test_the_page_answers_each_question_and_shows_bad_input_on_the_form(world: World):
    pool = one_gpu_pool(world)
    root = page(world, "root")
    url = f"/manage/pools/{pool.pk}/what-if/"
    blank = root.get(url)
    assert blank.status_code == 200 and "If we add GPUs" in blank.content.decode()
    added = root.get(url, {"q": "add-gpus", "count": 1, "model": "", "gpus_per_node": 8}).content.decode()
    assert f"1 × {H100} on 1 new node: whole GPUs free 0 &rarr; 1" in added
    assert "Queued requests served now: 0 of 1 &rarr; 1 of 1" in added
    unknown = root.get(url, {"q": "add-gpus", "count": 1, "model": "NVIDIA Z9", "gpus_per_node": 8})
    # bad input is a field error on the page, answered 400 like every form of the portal
    assert unknown.status_code == 400
    assert "no GPU model &#x27;NVIDIA Z9&#x27; in the MIG catalog" in unknown.content.decode()
    no_count = root.get(url, {"q": "add-gpus", "count": "", "model": "", "gpus_per_node": 8})
    assert no_count.status_code == 400 and list(no_count.context["add_form"].errors) == ["count"]
    no_tenant = root.get(url, {"q": "quota", "tenant": "", "factor": "2"})
    assert no_tenant.status_code == 400 and "tenant" in no_tenant.context["quota_form"].errors
    quota = root.get(url, {"q": "quota", "tenant": world.tenant_a.pk, "factor": "", "compute": "", "memory": ""})
    assert "Team A: 14 compute slices / 16 memory slots &rarr; 28 / 32." in quota.content.decode()
    mix = root.get(url, {"q": "mix"}).content.decode()
    assert "The best layout mix serves" in mix and "From today's layouts: " in mix


def test_a_manager_asks_on_the_page_about_their_own_tenants_only(world: World):
    # given: mallory manages Team A, which has quota in the one-GPU pool; charlie manages Team B, which has none there
    pool = one_gpu_pool(world)
    Membership.objects.filter(user=world.charlie).update(role=Membership.Role.MANAGER)
    url = f"/manage/pools/{pool.pk}/what-if/"
    mallory = page(world, "mallory")
    before = state()
    # when / then: the API's rule, on the page
    blank = mallory.get(url)
    assert blank.status_code == 200
    assert blank.context["quota_form"].fields["tenant"].choices == [(str(world.tenant_a.pk), "Team A")]
    mine = mallory.get(url, {"q": "quota", "tenant": world.tenant_a.pk, "factor": "2"})
    assert "Team A: 14 compute slices / 16 memory slots &rarr; 28 / 32." in mine.content.decode()
    # another tenant's quota is not hers to ask about (a field error, as for an unknown tenant)
    theirs = mallory.get(url, {"q": "quota", "tenant": world.tenant_b.pk, "factor": "2"})
    assert theirs.status_code == 400 and list(theirs.context["quota_form"].errors) == ["tenant"]
    assert mallory.get(url, {"q": "mix"}).status_code == 200
    # members, and managers of tenants without quota in the pool, are refused; an unknown pool is a 404
    assert page(world, "alice").get(url).status_code == 403
    assert page(world, "charlie").get(url).status_code == 403
    assert mallory.get("/manage/pools/99999/what-if/").status_code == 404
    assert state() == before
    # and the quotas page links managers to the pools they may ask about
    assert f'href="{url}"' in mallory.get("/quotas/").content.decode()
    assert "what-if-links" not in page(world, "alice").get("/quotas/").content.decode()
