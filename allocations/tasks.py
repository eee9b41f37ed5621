"""Celery tasks: ids in, one service call, done. Every service they call is idempotent."""

from __future__ import annotations

from celery import shared_task

from allocations import notifications
from allocations.services import leases, provisioning


@shared_task(acks_late=True)
def provision_allocation_task(allocation_id: int) -> None:
    provisioning.provision_allocation(allocation_id=allocation_id)


@shared_task(acks_late=True)
def teardown_allocation_task(allocation_id: int) -> None:
    provisioning.finish_release(allocation_id=allocation_id)


@shared_task(acks_late=True)
def expire_due_leases_task() -> None:
    leases.expire_due_leases()


@shared_task(acks_late=True)
def warn_expiring_leases_task() -> None:
    leases.warn_expiring_leases()


@shared_task(acks_late=True)
def notify_managers_task(allocation_id: int) -> None:
    notifications.notify_managers_of_pending_request(allocation_id=allocation_id)


@shared_task(acks_late=True)
def notify_requester_task(allocation_id: int) -> None:
    notifications.notify_requester_of_decision(allocation_id=allocation_id)
