"""Issue 9: concurrent creates, approvals and provisioning on PostgreSQL never deadlock, and no request is stuck.

The race that found the deadlock: 32 members' requests at once (half within the auto-approve policy, half beyond
it) while 4 managers approve whatever is pending and a real Celery worker provisions what is approved, against a
quota of 7 x 1g.10gb. A lock on the allocation row also locked its tenant and pool rows (select_related under FOR
UPDATE); a create holding the quota row then waited on the tenant row's foreign-key check while the approver
waited on the quota row. Everything goes through the HTTP API, so a deadlock shows as a 500.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import Sum
from django.utils import timezone
from rest_framework.test import APIClient

from allocations import services, tasks
from allocations.models import Allocation, OutboxMessage, Quota
from allocations.services.requeue import sweep_stuck_requests
from tenants.models import Membership, Tenant
from tests.conftest import World, celery_worker_process
from tests.factories import MembershipFactory, TenantFactory, UserFactory

Status = Allocation.Status
CREATORS = 32
APPROVERS = 4
ROUNDS = 5


@pytest.fixture
def celery_worker() -> Iterator[subprocess.Popen[bytes]]:
    with celery_worker_process() as worker:
        yield worker


def client_for(user) -> APIClient:
    client = APIClient(raise_request_exception=False)
    client.force_authenticate(user)
    return client


def race_once(world: World, round_no: int) -> tuple[Tenant, Counter[int]]:
    """One race in a fresh tenant; returns the tenant and the HTTP status codes seen."""
    tenant = TenantFactory(
        name=f"Race {round_no}",
        slug=f"race-{round_no}",
        auto_approve_max_compute_slices=1,
        auto_approve_max_lease_hours=8,
    )
    member = UserFactory(username=f"member{round_no}")
    manager = UserFactory(username=f"manager{round_no}")
    MembershipFactory(user=member, tenant=tenant, role=Membership.Role.MEMBER)
    MembershipFactory(user=manager, tenant=tenant, role=Membership.Role.MANAGER)
    services.set_tenant_quota(
        tenant_id=tenant.pk, pool_id=world.pool.pk, compute_slices_limit=7, memory_slices_limit=7, actor=world.root
    )
    codes: Counter[int] = Counter()
    lock = threading.Lock()
    barrier = threading.Barrier(CREATORS + APPROVERS)
    creators_done = threading.Event()
    finished = [0]

    def note(code: int) -> None:
        with lock:
            codes[code] += 1

    def create(i: int) -> None:
        try:
            client = client_for(member)
            barrier.wait()
            body = {
                "tenant": tenant.pk,
                "pool": world.pool.pk,
                "profile": "1g.10gb",
                "count": 1,
                "lease_hours": 8 if i % 2 == 0 else 24,  # 24 h is beyond the auto-approve policy: pending
                "purpose": f"race {round_no}/{i}",
            }
            note(client.post("/api/v1/allocations/", body, format="json").status_code)
        finally:
            connection.close()
            with lock:
                finished[0] += 1
                if finished[0] == CREATORS:
                    creators_done.set()

    def approve() -> None:
        try:
            client = client_for(manager)
            barrier.wait()
            idle_passes = 0
            while idle_passes < 3:
                listed = client.get("/api/v1/allocations/", {"status": "pending", "tenant": tenant.pk})
                note(listed.status_code)
                pending = [row["id"] for row in listed.json()["results"]] if listed.status_code == 200 else []
                approved = 0
                for pk in pending:
                    code = client.post(f"/api/v1/allocations/{pk}/approve/", {}, format="json").status_code
                    note(code)
                    approved += code == 200
                # Done once every request exists and a few passes in a row approved nothing (the quota is full).
                idle_passes = idle_passes + 1 if creators_done.is_set() and not approved else 0
                time.sleep(0.01)
        finally:
            connection.close()

    threads = [threading.Thread(target=create, args=(i,)) for i in range(CREATORS)]
    threads += [threading.Thread(target=approve) for _ in range(APPROVERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return tenant, codes


def wait_until_settled(tenant: Tenant, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    working = (Status.APPROVED, Status.PROVISIONING, Status.RELEASING)
    while Allocation.objects.filter(tenant=tenant, status__in=working).exists() and time.monotonic() < deadline:
        connection.close()
        time.sleep(0.2)


@pytest.mark.django_db(transaction=True)
def test_racing_creates_approvals_and_provisioning_give_no_server_error_and_leave_nothing_stuck(
    world: World, celery_worker, settings
):
    # The approvers poll as fast as they can; the API's throttles are not what this test is about.
    settings.FATIA_THROTTLE_RATES = {"user": "1000000/min", "token": "1000000/min", "anon": "1000000/min"}
    for round_no in range(ROUNDS):
        # when
        tenant, codes = race_once(world, round_no)
        wait_until_settled(tenant)
        # then: no server error, nothing stuck, usage counters equal what the holding requests cost
        assert {code for code in codes if code >= 500} == set(), (round_no, codes)
        assert codes[201] == CREATORS, (round_no, codes)
        statuses = Counter(Allocation.objects.filter(tenant=tenant).values_list("status", flat=True))
        assert statuses[Status.APPROVED] + statuses[Status.PROVISIONING] + statuses[Status.RELEASING] == 0
        assert statuses[Status.ACTIVE] == 7, (round_no, statuses)  # room for exactly 7; plenty of requests
        assert statuses[Status.PENDING] == CREATORS - 7, (round_no, statuses)
        quota = Quota.objects.get(tenant=tenant, pool=world.pool)
        held = Allocation.objects.filter(tenant=tenant).holding_quota()
        totals = held.aggregate(c=Sum("compute_slices"), m=Sum("memory_slices"))
        assert (quota.compute_slices_used, quota.memory_slices_used) == (totals["c"], totals["m"]) == (7, 7)


@pytest.mark.django_db
def test_the_sweep_requeues_a_request_whose_task_was_lost(world: World, django_capture_on_commit_callbacks, settings):
    # given: an approved request whose provisioning message never reached a worker
    with django_capture_on_commit_callbacks(execute=False):
        lost, _ = services.request_allocation(
            tenant_id=world.tenant_a.pk,
            pool_id=world.pool.pk,
            profile="1g.10gb",
            count=1,
            lease_hours=1,
            purpose="lost",
            actor=world.alice,
        )
    assert lost.status == Status.APPROVED
    # and: its outbox row counts as done (the outbox's own resend is tests/allocations/test_outbox.py)
    OutboxMessage.objects.update(done_at=timezone.now())
    # when: the sweep runs before the limit, then after it
    with django_capture_on_commit_callbacks(execute=False) as early:
        assert sweep_stuck_requests(now=timezone.now()) == []
    later = timezone.now() + timedelta(seconds=settings.FATIA_STUCK_REQUEST_S + 1)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        requeued = sweep_stuck_requests(now=later)
    # then: exactly one task is queued, and running it provisions the request
    assert (len(early), requeued, len(callbacks)) == (0, [lost.pk], 1)
    tasks.provision_allocation_task(lost.pk)
    lost.refresh_from_db()
    assert lost.status == Status.ACTIVE


@pytest.mark.django_db
def test_the_outbox_beat_task_sends_a_lost_teardown_again(world: World, django_capture_on_commit_callbacks, settings):
    # given: a request stuck RELEASING for longer than the limit
    with django_capture_on_commit_callbacks(execute=False):
        allocation, _ = services.request_allocation(
            tenant_id=world.tenant_a.pk,
            pool_id=world.pool.pk,
            profile="1g.10gb",
            count=1,
            lease_hours=1,
            purpose="stuck",
            actor=world.alice,
        )
    services.provision_allocation(allocation_id=allocation.pk)
    with django_capture_on_commit_callbacks(execute=False):
        services.release_allocation(allocation_id=allocation.pk, actor=world.alice)
    Allocation.objects.filter(pk=allocation.pk).update(
        updated_at=timezone.now() - timedelta(seconds=settings.FATIA_STUCK_REQUEST_S * 2)
    )
    # when
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        tasks.sweep_outbox_task()
    # then: the teardown's outbox row was sent once (to the broker) by the sweep itself, and the requeue left the
    # request to it; running the task finishes the release
    teardown = OutboxMessage.objects.get(task_name="allocations.tasks.teardown_allocation_task")
    assert (len(callbacks), teardown.sent_count, teardown.args) == (0, 1, [allocation.pk])
    tasks.teardown_allocation_task(allocation.pk)
    allocation.refresh_from_db()
    assert allocation.status == Status.RELEASED
    assert Quota.objects.get(tenant=world.tenant_a, pool=world.pool).compute_slices_used == 0
