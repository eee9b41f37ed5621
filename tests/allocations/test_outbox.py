"""The transactional outbox (allocations/services/outbox.py), the stuck-request sweep on every backend, the admin
retry, and a release that re-sends a lost teardown. Real PostgreSQL and Redis; a broker that is down is a port
nothing listens on."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from allocations import services, tasks
from allocations.cluster import kube
from allocations.models import Allocation, OutboxMessage
from allocations.services import outbox
from allocations.services.requeue import sweep_stuck_requests
from tenants.models import AuditEvent
from tests.allocations.faults import celery_app_on, free_port
from tests.conftest import World

pytestmark = pytest.mark.django_db
Status = Allocation.Status
PROVISION = "allocations.tasks.provision_allocation_task"
TEARDOWN = "allocations.tasks.teardown_allocation_task"


def submit(world: World, profile: str = "1g.10gb") -> Allocation:
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile=profile,
        count=1,
        lease_hours=2,
        purpose="outbox",
        actor=world.alice,
    )
    return allocation


def rows(task_name: str) -> list[OutboxMessage]:
    return list(OutboxMessage.objects.filter(task_name=task_name).order_by("pk"))


def test_the_row_is_written_with_the_change_and_not_without_it(world: World, django_capture_on_commit_callbacks):
    # when: one submission commits, another rolls back after writing
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        kept = submit(world)
    with pytest.raises(RuntimeError), transaction.atomic():
        submit(world)
        raise RuntimeError("rolled back")
    # then: one row, for the committed request, sent after commit by name
    assert [(m.task_name, m.args, m.done_at) for m in OutboxMessage.objects.all()] == [(PROVISION, [kept.pk], None)]
    assert [(c.func.__self__.name, c.args) for c in callbacks] == [(PROVISION, (kept.pk,))]


def test_with_the_broker_down_the_api_answers_201_and_the_sweep_sends_the_row_later(
    world: World, django_capture_on_commit_callbacks
):
    # given: nothing listens where the broker should be
    with celery_app_on(f"redis://127.0.0.1:{free_port()}/0"), django_capture_on_commit_callbacks(execute=True):
        # when
        response = world.client(world.alice).post(
            "/api/v1/allocations/",
            {
                "tenant": world.tenant_a.pk,
                "pool": world.pool.pk,
                "profile": "1g.10gb",
                "count": 1,
                "lease_hours": 2,
                "purpose": "broker down",
            },
            format="json",
        )
    # then: accepted and committed; the row says why it is still due
    assert response.status_code == 201, response.content
    [row] = rows(PROVISION)
    assert (row.args, row.sent_count, row.last_sent_at) == ([response.json()["id"]], 0, None)
    assert "Connection refused" in row.last_error or "Error" in row.last_error
    # when: the broker is back and the sweep runs
    report = outbox.resend_due_messages()
    # then: sent once, due again only after the resend delay
    row.refresh_from_db()
    assert (report.sent, row.sent_count, row.last_error) == ([row.pk], 1, "")
    assert row.due_at > timezone.now()
    assert outbox.resend_due_messages().sent == []


def test_a_task_that_ran_marks_its_row_done_and_the_sweep_leaves_it_alone(
    world: World, django_capture_on_commit_callbacks
):
    # given: a request whose provisioning row was written
    with django_capture_on_commit_callbacks(execute=False):
        allocation = submit(world)
    # when: the task runs to the end (in this process, with Celery's signals)
    tasks.provision_allocation_task.apply(args=(allocation.pk,))
    # then: its row is done, nothing is due, even long after
    [row] = rows(PROVISION)
    assert row.done_at is not None
    later = timezone.now() + timedelta(hours=1)
    assert outbox.resend_due_messages(now=later).sent == []


def test_a_row_written_while_the_task_ran_is_not_marked_done_by_it(world: World, django_capture_on_commit_callbacks):
    # given: a provisioning row, the task starts; a second row for the same request is written after that
    with django_capture_on_commit_callbacks(execute=False):
        allocation = submit(world)
    covered = outbox.open_message_ids(PROVISION, [allocation.pk])
    with django_capture_on_commit_callbacks(execute=False):
        outbox.enqueue_task(PROVISION, allocation.pk)
    # when: the task ends
    assert outbox.mark_done(covered) == 1
    # then: the later row is still due
    assert [row.done_at is None for row in rows(PROVISION)] == [False, True]


def test_rows_sent_too_often_are_given_up_and_old_done_rows_deleted(
    world: World, settings: Any, django_capture_on_commit_callbacks
):
    # given: a row sent the maximum number of times, and a done row past the retention
    with django_capture_on_commit_callbacks(execute=False):
        allocation = submit(world)
        old = outbox.enqueue_task(TEARDOWN, allocation.pk)
    OutboxMessage.objects.filter(task_name=PROVISION).update(sent_count=settings.FATIA_OUTBOX_MAX_SENDS)
    OutboxMessage.objects.filter(pk=old.pk).update(done_at=timezone.now() - timedelta(days=30))
    # when
    report = outbox.resend_due_messages()
    # then
    [given_up] = rows(PROVISION)
    assert (report.given_up, report.sent, report.deleted) == ([given_up.pk], [], 1)
    assert (given_up.done_at is not None, given_up.last_error) == (True, "given up")


def test_releasing_a_request_stuck_releasing_sends_its_teardown_again(world: World, django_capture_on_commit_callbacks):
    # given: an active request released once; its teardown message was lost
    with django_capture_on_commit_callbacks(execute=False):
        allocation = submit(world)
    services.provision_allocation(allocation_id=allocation.pk)
    with django_capture_on_commit_callbacks(execute=False):
        services.release_allocation(allocation_id=allocation.pk, actor=world.alice)
    # when: released again
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        again = services.release_allocation(allocation_id=allocation.pk, actor=world.alice)
    # then: still RELEASING, the teardown queued again, no second release in the audit
    assert again.status == Status.RELEASING
    assert [c.func.__self__.name for c in callbacks] == [TEARDOWN]
    assert len(rows(TEARDOWN)) == 2
    verbs = AuditEvent.objects.filter(object_type="allocation", object_id=str(allocation.pk), verb="release")
    assert verbs.count() == 1


def test_on_kubernetes_stuck_requests_are_requeued_while_the_api_server_is_unreachable(
    world: World, settings: Any, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks
):
    # given: the Kubernetes backend with an API server that answers nothing (the adapter is the boundary)
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"

    def unreachable(*_: Any, **__: Any) -> Any:
        raise kube.KubeUnavailable("connection refused")

    for name in ("list_claims", "list_holder_pods", "list_node_names", "list_steering"):
        monkeypatch.setattr(kube, name, unreachable)
    # and: a request approved long ago whose provisioning row was done but whose task was lost
    with django_capture_on_commit_callbacks(execute=False):
        stuck = submit(world)
    OutboxMessage.objects.update(done_at=timezone.now())
    Allocation.objects.filter(pk=stuck.pk).update(
        updated_at=timezone.now() - timedelta(seconds=settings.FATIA_STUCK_REQUEST_S + 1)
    )
    # when: the reconcile pass fails, the outbox sweep runs
    with pytest.raises(kube.KubeUnavailable):
        tasks.reconcile_cluster_task()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        tasks.sweep_outbox_task()
    # then: the provisioning is queued again, once, and a second sweep leaves it to the outbox row it wrote
    assert [(c.func.__self__.name, c.args) for c in callbacks] == [(PROVISION, (stuck.pk,))]
    assert sweep_stuck_requests() == []


def _overdue(world: World, settings: Any, django_capture_on_commit_callbacks: Any) -> Allocation:
    with django_capture_on_commit_callbacks(execute=False):
        allocation = submit(world)
    Allocation.objects.filter(pk=allocation.pk).update(
        updated_at=timezone.now() - timedelta(seconds=settings.FATIA_OUTBOX_RESEND_S + 1)
    )
    return allocation


def test_an_admin_retries_an_overdue_request_through_the_api_and_it_is_audited(
    world: World, settings: Any, django_capture_on_commit_callbacks
):
    # given
    allocation = _overdue(world, settings, django_capture_on_commit_callbacks)
    url = f"/api/v1/allocations/{allocation.pk}/retry/"
    # when: a manager tries, then a platform admin
    refused = world.client(world.mallory).post(url)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        retried = world.client(world.root).post(url)
    # then
    assert (refused.status_code, retried.status_code) == (403, 200)
    assert [c.func.__self__.name for c in callbacks] == [PROVISION]
    event = AuditEvent.objects.get(verb="retry", object_id=str(allocation.pk))
    assert (event.actor_id, event.after) == (world.root.pk, {"status": "approved", "task": "provision_allocation_task"})


def test_retrying_a_request_that_is_not_overdue_is_a_409_with_a_reason(
    world: World, django_capture_on_commit_callbacks
):
    # given: a request approved just now
    with django_capture_on_commit_callbacks(execute=False):
        allocation = submit(world)
    # when
    response = world.client(world.root).post(f"/api/v1/allocations/{allocation.pk}/retry/")
    # then
    assert response.status_code == 409
    assert "not overdue" in response.json()["detail"]


def test_the_detail_page_offers_admins_the_retry_button_and_it_works(
    world: World, settings: Any, client: Any, django_capture_on_commit_callbacks
):
    # given
    allocation = _overdue(world, settings, django_capture_on_commit_callbacks)
    page = f"/requests/{allocation.pk}/"
    # when: the requester looks, then the admin looks and presses it
    client.force_login(world.alice)
    requester_html = client.get(page).content.decode()
    client.force_login(world.root)
    admin_html = client.get(page).content.decode()
    with django_capture_on_commit_callbacks(execute=False):
        pressed = client.post(f"/requests/{allocation.pk}/retry/", follow=True)
    # then
    assert "Retry its work" not in requester_html
    assert "Retry its work" in admin_html
    assert pressed.status_code == 200
    assert "its work was sent to a worker again" in pressed.content.decode()
    assert AuditEvent.objects.filter(verb="retry", object_id=str(allocation.pk)).count() == 1
