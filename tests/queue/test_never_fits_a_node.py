"""A request that no node of its pool could ever hold (issue 14's users' leftovers) is refused when it is made, in
the words its failure used to give after approval: 400 on `count` from the API, the form again with the message in
the browser, nothing created; a booking the same. A pool that shrank after approval still fails it at provisioning
(test_queue_rules)."""

from __future__ import annotations

import pytest
from django.test import Client

from allocations import services
from allocations.models import Allocation, Booking, Node
from tenants.errors import InvalidInput
from tests.bookings.helpers import book
from tests.conftest import World
from tests.queue.helpers import small_pool

pytestmark = pytest.mark.django_db
WHY = (
    "Queue pool q1 cannot hold 2 x 7g.80gb even with every GPU free: a request's slices go on one node, where at "
    "most 1 x 7g.80gb fit. Try fewer slices or a smaller profile."
)


def body(world: World, pool_id: int, count: int = 2) -> dict[str, object]:
    return {
        "tenant": world.tenant_a.pk,
        "pool": pool_id,
        "profile": "7g.80gb",
        "count": count,
        "lease_hours": 8,
        "purpose": "too big",
    }


def test_the_api_refuses_a_request_no_node_could_hold_with_the_field_message(world: World):
    # given: nodes of one H100 each; two whole GPUs are beyond the auto-approve policy, so it would wait for a
    # manager, who would approve it, and then it would fail
    pool = small_pool(world, nodes=2)
    # when
    response = world.client(world.alice).post("/api/v1/allocations/", body(world, pool.pk), format="json")
    # then
    assert (response.status_code, response.json()["errors"]) == (400, {"count": [WHY]})
    assert not Allocation.objects.filter(pool=pool).exists()
    # and: one whole GPU is taken as before
    fits = world.client(world.alice).post("/api/v1/allocations/", body(world, pool.pk, count=1), format="json")
    assert fits.status_code == 201, fits.content


def test_the_request_form_shows_why_next_to_the_count(world: World):
    pool = small_pool(world)
    client = Client()
    client.force_login(world.alice)
    response = client.post("/requests/new/", body(world, pool.pk))
    assert response.status_code == 400
    assert WHY.replace("'", "&#x27;") in response.content.decode()
    assert not Allocation.objects.filter(pool=pool).exists()


def test_a_pool_with_no_ready_gpu_takes_it_for_when_a_node_comes(world: World):
    # given: the pool's only node is gone: no layout tells what could fit
    pool = small_pool(world)
    Node.objects.filter(pool=pool).update(state=Node.State.GONE)
    # when / then: not refused (the queue waits for a node)
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk, pool_id=pool.pk, profile="7g.80gb", count=2, lease_hours=8, purpose="p",
        actor=world.alice,
    )  # fmt: skip
    assert allocation.status == Allocation.Status.PENDING


def test_the_service_refuses_it_for_every_caller(world: World):
    pool = small_pool(world)
    with pytest.raises(InvalidInput) as refused:
        services.request_allocation(
            tenant_id=world.tenant_a.pk, pool_id=pool.pk, profile="7g.80gb", count=2, lease_hours=8, purpose="p",
            actor=world.alice,
        )  # fmt: skip
    assert refused.value.errors == {"count": [WHY]}


def test_a_booking_no_node_could_hold_is_refused_in_the_same_words(world: World):
    pool = small_pool(world)
    with pytest.raises(InvalidInput) as refused:
        book(world, pool, profile="7g.80gb", count=2)
    assert refused.value.errors == {"count": [WHY]}
    assert not Booking.objects.exists()
