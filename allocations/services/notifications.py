"""The in-app inbox: who hears about what, and marking messages read.

Notifications are written by the service that makes the change, inside its transaction, so the inbox
never reports a change that rolled back. (E-mail goes out from Celery tasks after commit instead:
allocations/notifications.py.) Nobody is told about what they did themselves.

Who hears what:
- a request waits for a manager -> the tenant's managers;
- a manager decided a request or a lease extension -> its requester;
- a lease extension waits for a manager -> the tenant's managers;
- a lease enters its warning window -> the allocation's requester;
- a platform admin decided a quota change -> the manager who asked for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from allocations.models import Notification
from tenants.models import Membership

if TYPE_CHECKING:
    from django.contrib.auth.models import User

Kind = Notification.Kind


def tenant_manager_ids(tenant_id: int) -> list[int]:
    """The active users who manage the tenant, by id."""
    return list(
        get_user_model()
        .objects.filter(memberships__tenant_id=tenant_id, memberships__role=Membership.Role.MANAGER, is_active=True)
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def notify_users(*, recipient_ids: Iterable[int], kind: str, text: str, link: str, actor: User | None) -> int:
    """Put one message in each recipient's inbox, except the actor's. Returns how many were written.

    Call it inside the transaction of the change it reports."""
    skip = actor.pk if actor is not None else None
    rows = [
        Notification(recipient_id=pk, kind=kind, text=text[:500], link=link)
        for pk in dict.fromkeys(recipient_ids)
        if pk != skip
    ]
    Notification.objects.bulk_create(rows)
    return len(rows)


@transaction.atomic
def mark_notification_read(*, notification_id: int, actor: User) -> Notification:
    """Mark one of the actor's notifications read; marking it again changes nothing.

    Raises Notification.DoesNotExist for another user's notification (a 404, like a missing one).
    Not audited: it is the reader's own view state, not a change to anything a tenant shares."""
    notification = Notification.objects.for_user(actor).get(pk=notification_id)
    if notification.read_at is None:
        # Compare-and-set: two tabs marking it at once write read_at once.
        Notification.objects.filter(pk=notification.pk, read_at__isnull=True).update(read_at=timezone.now())
        notification.refresh_from_db(fields=["read_at"])
    return notification


@transaction.atomic
def mark_all_notifications_read(*, actor: User) -> int:
    """Mark every unread notification of the actor read. Returns how many changed."""
    return Notification.objects.for_user(actor).unread().update(read_at=timezone.now())
