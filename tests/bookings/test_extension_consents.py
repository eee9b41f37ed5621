"""A lease extension that would use a booking's room waits for the booking's owner to agree (issue 15): asked of
the booking's requester and its tenant's managers, applied once they agree, rejected when they refuse."""

from __future__ import annotations

import pytest
from django.core import mail
from django.urls import reverse

from allocations import notifications, services
from allocations.models import Allocation, ExtensionConsent, LeaseExtension, Notification, OutboxMessage
from allocations.services import extension_consents
from tenants.errors import InvalidInput, InvalidTransition, NotAllowed
from tenants.models import AuditEvent
from tests.bookings.helpers import active_lease, book, small_pool
from tests.conftest import World

Consent = ExtensionConsent.Status


def asked_extension(world: World, *, hours: int = 2) -> tuple[LeaseExtension, int, int]:
    """Alice's 2 h 4g.40gb lease on a one-GPU pool asks for `hours` more, into Team B's booking of the same GPU
    from 3.1 h, and asks the booking's owner. Returns the extension, the lease's and the booking's ids."""
    small = small_pool(world, gpus=1)
    lease = active_lease(world, small.pool, profile="4g.40gb", hours=2)
    booking = book(world, small.pool, profile="4g.40gb", start=3.1, end=5, actor=world.charlie)
    extension = services.request_lease_extension(
        allocation_id=lease.pk, hours=hours, actor=world.alice, ask_booking_owner=True
    )
    return extension, lease.pk, booking.pk


def test_the_bookings_owner_is_asked_and_the_lease_grows_once_they_agree(world: World):
    extension, lease_id, booking_id = asked_extension(world)
    # then: the extension waits for Charlie, who booked the room; the managers are not asked yet
    consent = ExtensionConsent.objects.get()
    assert (extension.status, consent.booking_id, consent.status) == ("pending", booking_id, Consent.PENDING)
    note = Notification.objects.get(recipient=world.charlie)
    assert f"booking #{booking_id}" in note.text and "Agree or refuse" in note.text
    assert not Notification.objects.filter(recipient=world.mallory, kind=Notification.Kind.EXTENSION_PENDING).exists()
    assert OutboxMessage.objects.filter(
        task_name="allocations.tasks.notify_booking_owners_of_extension_task", args=[consent.pk]
    ).exists()
    audit = AuditEvent.objects.get(verb="request_extension")
    assert audit.after["bookings"] == [booking_id]
    # a manager of the lease's tenant cannot skip the booking's owner, nor can the requester answer for them
    with pytest.raises(InvalidInput) as waiting:
        services.approve_lease_extension(extension_id=extension.pk, actor=world.mallory)
    assert f"booking #{booking_id}" in waiting.value.errors["non_field_errors"][0]
    with pytest.raises(NotAllowed):
        extension_consents.agree_to_extension(consent_id=consent.pk, actor=world.alice)
    # when: Charlie agrees
    extension_consents.agree_to_extension(consent_id=consent.pk, actor=world.charlie, reason="we start late")
    # then: the lease grows now (4 h is within Team A's auto-approve lease), and Alice is told
    extension.refresh_from_db()
    lease = Allocation.objects.get(pk=lease_id)
    assert (extension.status, extension.decided_by, lease.lease_hours) == ("approved", world.charlie, 4)
    assert Notification.objects.filter(recipient=world.alice, text__contains="agreed to extending").exists()
    assert AuditEvent.objects.filter(verb="agree_to_extension", object_id=str(booking_id)).exists()
    # and answering twice is refused
    with pytest.raises(InvalidTransition):
        extension_consents.agree_to_extension(consent_id=consent.pk, actor=world.charlie)


def test_a_refusal_rejects_the_extension_with_the_reason(world: World):
    extension, lease_id, booking_id = asked_extension(world)
    consent = ExtensionConsent.objects.get()
    with pytest.raises(InvalidInput) as no_reason:
        extension_consents.refuse_extension(consent_id=consent.pk, actor=world.charlie, reason=" ")
    assert "reason" in no_reason.value.errors
    extension_consents.refuse_extension(consent_id=consent.pk, actor=world.charlie, reason="workshop at 9")
    extension.refresh_from_db()
    assert extension.status == "rejected"
    assert f"booking #{booking_id}" in extension.decision_reason and "workshop at 9" in extension.decision_reason
    assert LeaseExtension.objects.get(pk=extension.pk).allocation.lease_hours == 2
    assert Notification.objects.filter(recipient=world.alice, text__contains="refused").exists()


def test_after_the_owner_agrees_a_long_extension_still_needs_a_manager(world: World):
    world.tenant_a.auto_approve_max_lease_hours = 2
    world.tenant_a.save()
    extension, lease_id, _ = asked_extension(world, hours=3)
    consent = ExtensionConsent.objects.get()
    extension_consents.agree_to_extension(consent_id=consent.pk, actor=world.charlie)
    extension.refresh_from_db()
    assert extension.status == "pending"
    assert Notification.objects.filter(recipient=world.mallory, text__contains="waits for a manager").exists()
    # the manager approves: the booking that agreed no longer stands in the way
    services.approve_lease_extension(extension_id=extension.pk, actor=world.mallory)
    extension.refresh_from_db()
    assert (extension.status, extension.allocation.lease_hours) == ("approved", 5)


def test_without_asking_the_extension_is_refused_and_nothing_is_written(world: World):
    small = small_pool(world, gpus=1)
    lease = active_lease(world, small.pool, profile="4g.40gb", hours=2)
    book(world, small.pool, profile="4g.40gb", start=3.1, end=5, actor=world.charlie)
    with pytest.raises(InvalidInput) as refused:
        services.request_lease_extension(allocation_id=lease.pk, hours=2, actor=world.alice)
    assert "ask_booking_owner" in refused.value.errors["hours"][0]
    assert not LeaseExtension.objects.exists() and not ExtensionConsent.objects.exists()


def test_a_lease_that_ends_cancels_the_question(world: World):
    extension, lease_id, _ = asked_extension(world)
    services.release_allocation(allocation_id=lease_id, actor=world.alice)
    consent = ExtensionConsent.objects.get()
    assert consent.status == Consent.CANCELLED
    extension.refresh_from_db()
    assert extension.status == "cancelled"


def test_the_owner_is_asked_by_e_mail(world: World):
    world.charlie.email = "charlie@example.org"
    world.charlie.save()
    asked_extension(world)
    assert notifications.notify_booking_owners_of_extension(consent_id=ExtensionConsent.objects.get().pk) == 1
    [message] = [m for m in mail.outbox if "charlie@example.org" in m.to]
    assert "booking #" in message.subject and "/bookings/#consent-" in message.body


def test_the_api_asks_lists_and_answers(world: World):
    small = small_pool(world, gpus=1)
    lease = active_lease(world, small.pool, profile="4g.40gb", hours=2)
    booking = book(world, small.pool, profile="4g.40gb", start=3.1, end=5, actor=world.charlie)
    alice, charlie, outsider = world.client(world.alice), world.client(world.charlie), world.client(world.mallory)
    url = f"/api/v1/allocations/{lease.pk}/extend/"
    refused = alice.post(url, {"hours": 2}, format="json")
    assert refused.status_code == 400 and "ask_booking_owner" in refused.json()["errors"]["hours"][0]
    asked = alice.post(url, {"hours": 2, "ask_booking_owner": True}, format="json")
    assert asked.status_code == 202 and asked.json()["waiting_for_bookings"] == [booking.pk]
    [row] = charlie.get("/api/v1/extension-consents/").json()["results"]
    assert (row["booking"], row["allocation"], row["status"]) == (booking.pk, lease.pk, "pending")
    # Mallory manages Team A (the lease's tenant), not the booking: she can read it but not answer for it
    assert outsider.post(f"/api/v1/extension-consents/{row['id']}/agree/", {}, format="json").status_code == 403
    bad = charlie.post(f"/api/v1/extension-consents/{row['id']}/refuse/", {}, format="json")
    assert bad.status_code == 400 and "reason" in bad.json()["errors"]
    agreed = charlie.post(f"/api/v1/extension-consents/{row['id']}/agree/", {}, format="json")
    assert agreed.status_code == 200 and agreed.json()["status"] == "agreed"
    assert alice.get(f"/api/v1/allocations/{lease.pk}/").json()["lease_hours"] == 4


def test_the_api_lists_the_questions_of_one_status(world: World):
    extension, _, _ = asked_extension(world)
    consent = ExtensionConsent.objects.get(extension=extension)
    charlie = world.client(world.charlie)

    def ids(*statuses: str) -> list[int]:
        return [r["id"] for r in charlie.get("/api/v1/extension-consents/", {"status": statuses}).json()["results"]]

    assert (ids("pending"), ids("agreed")) == ([consent.pk], [])
    extension_consents.agree_to_extension(consent_id=consent.pk, actor=world.charlie)
    assert (ids("pending"), ids("agreed"), ids("agreed", "refused")) == ([], [consent.pk], [consent.pk])


@pytest.mark.parametrize("status", ["approved", ""])
def test_an_unknown_status_is_a_400_naming_the_choices(world: World, status: str):
    response = world.client(world.charlie).get("/api/v1/extension-consents/", {"status": status})
    assert response.status_code == 400, response.content
    assert "choose one of pending, agreed, refused, cancelled" in response.json()["errors"]["status"][0]


def test_the_bookings_page_asks_the_owner_and_takes_the_answer(world: World, client):
    extension, lease_id, booking_id = asked_extension(world)
    consent = ExtensionConsent.objects.get()
    client.force_login(world.charlie)
    page = client.get(reverse("bookings"))
    assert f'id="consent-{consent.pk}"' in page.content.decode()
    client.force_login(world.alice)  # the requester sees no question to answer
    assert f'id="consent-{consent.pk}"' not in client.get(reverse("bookings")).content.decode()
    client.force_login(world.charlie)
    answered = client.post(reverse("consent-agree", args=[consent.pk]), follow=True)
    assert "You agreed to the extension" in answered.content.decode()
    extension.refresh_from_db()
    assert extension.status == "approved"


def test_the_bookings_page_takes_a_refusal_only_with_a_reason(world: World, client):
    extension, lease_id, booking_id = asked_extension(world)
    consent = ExtensionConsent.objects.get()
    client.force_login(world.charlie)
    no_reason = client.post(reverse("consent-refuse", args=[consent.pk]), follow=True).content.decode()
    assert f"Question #{consent.pk} about a booking&#x27;s room: Say why the booking keeps its room." in no_reason
    refused = client.post(reverse("consent-refuse", args=[consent.pk]), {"reason": "a workshop"}, follow=True)
    assert f"You refused the extension that would use booking #{booking_id}&#x27;s room." in refused.content.decode()
    extension.refresh_from_db()
    assert extension.status == "rejected"
    client.force_login(world.alice)  # she sees the question about her lease but may not answer it
    assert client.post(reverse("consent-agree", args=[consent.pk])).status_code == 403


def test_the_page_tells_how_to_ask_the_bookings_owner_in_its_own_words(world: World, client):
    # given: a lease whose 2 h more would run into Team B's booking
    small = small_pool(world, gpus=1)
    lease = active_lease(world, small.pool, profile="4g.40gb", hours=2)
    book(world, small.pool, profile="4g.40gb", start=3.1, end=5, actor=world.charlie)
    client.force_login(world.alice)
    # when: alice extends from the request's page without ticking the box
    shown = client.post(reverse("request-extend", args=[lease.pk]), {"hours": "2"}, follow=True).content.decode()
    # then: the message points at the box, not at the API's field name
    assert "ask the booking&#x27;s owner to agree (tick “ask its owner to agree” and extend again)" in shown
    assert "ask_booking_owner)" not in shown
