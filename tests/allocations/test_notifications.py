from __future__ import annotations

from django.core import mail

from allocations import notifications, services
from tests.conftest import World


def pending(world: World):
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="4g.40gb",
        count=1,
        lease_hours=8,
        purpose="sweep",
        actor=world.alice,
    )
    return allocation


def test_managers_hear_about_a_request_that_waits_for_them(world: World):
    # given
    allocation = pending(world)
    # when
    sent_to = notifications.notify_managers_of_pending_request(allocation_id=allocation.pk)
    # then
    assert sent_to == 1
    assert mail.outbox[0].to == ["mallory@example.test"]
    assert mail.outbox[0].subject == "[Fatia] alice asks for 1 x 4g.40gb in H100 pool"
    assert f"/requests/{allocation.pk}/" in mail.outbox[0].body


def test_nobody_is_mailed_about_a_request_already_decided(world: World):
    allocation = pending(world)
    services.reject_allocation(allocation_id=allocation.pk, actor=world.mallory, reason="later")
    assert notifications.notify_managers_of_pending_request(allocation_id=allocation.pk) == 0
    assert mail.outbox == []


def test_the_requester_hears_the_decision_with_its_reason(world: World):
    allocation = pending(world)
    services.reject_allocation(allocation_id=allocation.pk, actor=world.mallory, reason="use 2g slices")
    assert notifications.notify_requester_of_decision(allocation_id=allocation.pk) == 1
    assert mail.outbox[0].to == ["alice@example.test"]
    assert mail.outbox[0].subject == f"[Fatia] Your request #{allocation.pk} (1 x 4g.40gb) was rejected"
    assert "Reason: use 2g slices" in mail.outbox[0].body
