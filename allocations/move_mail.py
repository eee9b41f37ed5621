"""E-mail to the owner of a slice that compaction moves (issue 14): before the move and after it.

Sent from a Celery task after the step committed (services/moves.py queues it through the outbox), like the other
e-mails (allocations/notifications.py); the in-app message is written by the step itself.
"""

from __future__ import annotations

from django.conf import settings
from django.core.mail import send_mail

from allocations.models import SliceMove


def notify_owner_of_move(*, move_id: int, phase: str) -> int:
    """E-mail the move's requester `phase` ("before" or "after") the move. Returns the number of recipients."""
    move = SliceMove.objects.select_related(
        "allocation__requested_by", "allocation__pool", "from_gpu__node", "to_gpu__node"
    ).get(pk=move_id)
    allocation = move.allocation
    user = allocation.requested_by
    if not user.email:
        return 0
    source = f"{move.from_gpu.node.name}/gpu-{move.from_gpu.index}:{move.from_start}"
    destination = f"{move.to_gpu.node.name}/gpu-{move.to_gpu.index}:{move.to_start}"
    if phase == "before":
        subject = f"[Fatia] Request #{allocation.pk}: a {move.profile} slice moves to make room"
        body = (
            f"Request #{allocation.pk} in {allocation.pool.name} is movable, so one of its {move.profile} slices moves "
            f"from {source} to {destination} to make room for others. Pods using it restart.\n"
        )
    else:
        subject = f"[Fatia] Request #{allocation.pk}: the {move.profile} slice moved"
        body = f"Request #{allocation.pk}: its {move.profile} slice now runs at {destination} (was {source}).\n"
    send_mail(
        subject=subject,
        message=f"{body}\n{settings.SITE_URL}/requests/{allocation.pk}/\n",
        from_email=settings.DEFAULT_FROM_EMAIL,
        recipient_list=[user.email],
    )
    return 1
