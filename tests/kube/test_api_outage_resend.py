"""An API server outage that also loses every message in flight (issue 16): the real kube-apiserver is stopped, requests
are created, approved and released meanwhile, and then the worker dies with SIGKILL and the broker restarts empty, so
the tasks that were retrying against the unreachable API server are gone. Only the database knows what is due. A new
worker and the real beat (its outbox sweep asks the cluster nothing) must re-send that work once the API server is
back: every request converges once, quota counters equal the holding requests, no audit verb twice.

Real processes throughout: PostgreSQL, a private Redis this test restarts empty, `celery worker` and `celery beat`
(beat schedules the outbox sweep every second here, see tests/allocations/faults.FAST), the local control plane.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from kubernetes import client

from allocations import services
from allocations.models import Allocation, OutboxMessage
from tests.allocations.faults import PrivateRedis, assert_books_balance, celery_process
from tests.kube.conftest import ControlPlane, KubeWorld, wait_for
from tests.kube.test_faults import control_plane_script
from tests.kube.test_provisioning import objects_of, request

pytestmark = pytest.mark.django_db(transaction=True)
Status = Allocation.Status
# The API server stays away at least this long: beat's sweeps meanwhile find the work due and the cluster gone.
OUTAGE_S = 15
# After the API server is back: a task's own retry (every 10 s at most), or the outbox's resend (its delay doubles
# while the cluster is away, 64 s at most with FAST), then the claim's allocation by the scheduler.
CONVERGE_S = 240.0


def beat_tasks() -> set[str]:
    """The tasks beat sends by itself (portal/celery.py's schedule)."""
    from portal.celery import app

    return {str(entry["task"]) for entry in app.conf.beat_schedule.values()}


def kube_env(kw: KubeWorld) -> dict[str, str]:
    return {
        "FATIA_CLUSTER_BACKEND": "kubernetes",
        "FATIA_KUBECONFIG": django_settings.FATIA_KUBECONFIG,
        "FATIA_KUBE_NAMESPACE_PREFIX": kw.prefix,
    }


def statuses(ids: list[int]) -> dict[int, str]:
    return dict(Allocation.objects.filter(pk__in=ids).values_list("pk", "status"))


def test_work_lost_during_an_api_server_outage_is_sent_again_when_it_returns(
    kube_world: KubeWorld,
    admin: client.ApiClient,
    control_plane: ControlPlane,
    redis_server: PrivateRedis,
    tmp_path: Path,
) -> None:
    kw = kube_world
    ns = kw.namespace("team-a")
    env = kube_env(kw)
    with celery_process("beat", redis_server.url, tmp_path, **env) as beat:
        with celery_process("worker", redis_server.url, tmp_path, **env) as first:
            # given: one active slice
            released = request(kw, "2g.20gb")
            wait_for("the first request to be active", lambda: statuses([released.pk]) == {released.pk: "active"})

            # when: the API server stops; meanwhile one request is approved automatically, one by a manager, and
            # the active one is released
            control_plane_script(control_plane, "stop-apiserver")
            stopped_at = time.monotonic()
            try:
                auto = request(kw, "1g.10gb")
                managed = request(kw, "3g.40gb")
                assert (auto.status, managed.status) == (Status.APPROVED, Status.APPROVED)
                services.release_allocation(allocation_id=released.pk, actor=kw.world.alice)
                ids = [auto.pk, managed.pk, released.pk]

                # then: their tasks run and wait for the cluster
                def all_waiting() -> bool:
                    rows = Allocation.objects.filter(pk__in=ids)
                    return all(r.status_message.startswith("Waiting for the Kubernetes API") for r in rows)

                wait_for("every request to wait for the API", all_waiting, timeout=30)
                assert statuses(ids) == {
                    auto.pk: Status.PROVISIONING,
                    managed.pk: Status.PROVISIONING,
                    released.pk: Status.RELEASING,
                }

                # when: the worker dies with the tasks it holds, and the broker restarts empty: nothing in flight
                os.killpg(first.pid, signal.SIGKILL)
                first.wait(timeout=10)
                redis_server.kill()
                redis_server.start()
                # Nothing of the lost work is queued again by anyone but the database: beat, which keeps running, may
                # already have sent one of its own periodic tasks (the outbox sweep is due every second here).
                assert set(redis_server.queued_tasks()) <= beat_tasks()
                time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - stopped_at)))
            finally:
                control_plane_script(control_plane, "start-apiserver")

        # when: a new worker starts after the API server is back (beat kept running through all of it)
        with celery_process("worker", redis_server.url, tmp_path, **env) as second:
            # then: the work is sent again and every request converges
            def converged() -> bool:
                return statuses(ids) == {
                    auto.pk: Status.ACTIVE,
                    managed.pk: Status.ACTIVE,
                    released.pk: Status.RELEASED,
                }

            deadline = time.monotonic() + CONVERGE_S
            while not converged() and time.monotonic() < deadline:
                time.sleep(0.5)
            rows = OutboxMessage.objects.values_list("task_name", "args", "sent_count", "done_at", "last_error")
            assert converged(), (statuses(ids), list(rows))
            assert (second.poll(), beat.poll()) == (None, None)

    # then: exactly one claim and one pod per live request, none for the released one
    for allocation in (auto, managed):
        active = Allocation.objects.get(pk=allocation.pk)
        assert objects_of(admin, ns, active) == ([active.kube_name], [active.kube_name])
    wait_for("the released claim to be gone", lambda: objects_of(admin, ns, released) == ([], []), timeout=60)
    # and: the books balance (1g.10gb and 3g.40gb held: 1 + 3 compute, 1 + 4 memory slices), no audit verb twice
    quota = kw.world.tenant_a.quotas.get(pool=kw.pool)
    assert (quota.compute_slices_used, quota.memory_slices_used) == (4, 5)
    assert_books_balance([kw.world.tenant_a.pk])
