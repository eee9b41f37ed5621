"""RabbitMQ with quorum queues as the broker (issue 16), by URL: a real RabbitMQ from Debian's packages
(tests/allocations/rabbitmq.py), real gunicorn, worker and beat started with CELERY_BROKER_URL=amqp://... and
FATIA_BROKER_QUEUE_TYPE=quorum. The web process's outbox sends, the worker consumes from a quorum queue, a countdown
goes through Celery's native delayed delivery, and a broker that stops and comes back loses nothing."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from allocations import services
from allocations.models import Allocation, OutboxMessage
from tenants.models import ApiToken
from tenants.services import create_api_token
from tests.allocations.faults import FAST, assert_books_balance, celery_process, process_env, wait_settled
from tests.allocations.rabbitmq import ROOT, PrivateRabbitMQ
from tests.allocations.test_database_restart import Api, web_server
from tests.conftest import World, wait_for_status
from tests.kube.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
Status = Allocation.Status
QUORUM = {"FATIA_BROKER_QUEUE_TYPE": "quorum"}
CONVERGE_S = 60.0


# One virtual host for each test of the module (a test that fails with the node stopped leaves it to the next).
VHOSTS = ("restart", "countdown")


@pytest.fixture(scope="module")
def rabbitmq_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrivateRabbitMQ, list[str]]]:
    """One RabbitMQ node for the module (a boot costs 10 to 30 s on 2 cores), with a virtual host for each test,
    so that no test sees another's queues; and the hosts not taken yet."""
    server = PrivateRabbitMQ(tmp_path_factory.mktemp("rabbitmq"))
    server.start()
    try:
        server.add_vhosts(*VHOSTS)
        yield server, list(VHOSTS)
    finally:
        server.close()


@dataclass
class Broker:
    """The test's view of the shared node: its own virtual host's URL and queues; stop and start act on the node."""

    node: PrivateRabbitMQ
    vhost: str

    @property
    def url(self) -> str:
        return self.node.url_for(self.vhost)

    def queue_types(self) -> dict[str, str]:
        return self.node.queue_types(self.vhost)

    def stop(self) -> None:
        self.node.stop()

    def start(self) -> None:
        self.node.start()


@pytest.fixture
def rabbitmq(rabbitmq_node: tuple[PrivateRabbitMQ, list[str]], settings: Any) -> Broker:
    for name, value in FAST.items():
        setattr(settings, name, int(value))
    node, free = rabbitmq_node
    if node.process is None:  # an earlier test failed while the node was stopped
        node.start()
    assert free, f"every virtual host in VHOSTS is taken: add one for each test ({VHOSTS})"
    return Broker(node, free.pop(0))


def test_requests_run_through_a_quorum_queue_and_converge_after_the_broker_restarts(
    world: World, rabbitmq: Broker, tmp_path: Path
) -> None:
    _, token = create_api_token(
        user=world.alice, name="rabbitmq", scope=ApiToken.Scope.WRITE, expires_at=None, actor=world.alice
    )
    url = rabbitmq.url
    with (
        celery_process("worker", url, tmp_path, **QUORUM) as worker,
        celery_process("beat", url, tmp_path, **QUORUM),
        web_server(url, **QUORUM) as base,
    ):
        api = Api(base, token)
        # given: two requests made through the API, provisioned by the worker from RabbitMQ
        assert [api.create(world) for _ in range(2)] == [201, 201], api.codes
        first = list(api.created)
        wait_settled(first, CONVERGE_S)
        assert set(Allocation.objects.filter(pk__in=first).values_list("status", flat=True)) == {Status.ACTIVE}
        # then: Celery's queue was declared as a quorum queue
        assert rabbitmq.queue_types().get("celery") == "quorum", rabbitmq.queue_types()

        # when: the broker stops; two requests are created and the first two released meanwhile
        rabbitmq.stop()
        during = [api.create(world) for _ in range(2)]
        released = [api.call("POST", f"/api/v1/allocations/{pk}/release/") for pk in first]
        # then: the usual answers, no 500
        assert (during, released) == ([201, 201], [200, 200]), api.codes
        # when: the broker is back (its quorum queue with it)
        rabbitmq.start()
        ids = api.created
        waited = wait_settled(ids, CONVERGE_S)
        # then: every request converged, once
        statuses = dict(Allocation.objects.filter(pk__in=ids).values_list("pk", "status"))
        assert statuses == {**{pk: Status.RELEASED for pk in first}, **{pk: Status.ACTIVE for pk in ids[2:]}}, (
            waited,
            list(OutboxMessage.objects.values_list("task_name", "args", "sent_count", "done_at", "last_error")),
        )
        assert worker.poll() is None
    assert_books_balance([world.tenant_a.pk])


def test_a_countdown_waits_in_rabbitmqs_delayed_delivery_then_runs(
    world: World, rabbitmq: Broker, tmp_path: Path, django_capture_on_commit_callbacks: Any
) -> None:
    # given: an approved request whose provisioning was not sent (and no beat to send it)
    with django_capture_on_commit_callbacks(execute=False):
        allocation, _ = services.request_allocation(
            tenant_id=world.tenant_a.pk,
            pool_id=world.pool.pk,
            profile="1g.10gb",
            count=1,
            lease_hours=2,
            purpose="countdown",
            actor=world.alice,
        )
    OutboxMessage.objects.update(done_at=timezone.now())
    with celery_process("worker", rabbitmq.url, tmp_path, **QUORUM):
        # and: the worker has declared Celery's delay levels, quorum queues like its own
        wait_for("the delayed delivery queues", lambda: "celery_delayed_0" in rabbitmq.queue_types(), timeout=60)
        types = rabbitmq.queue_types()
        assert {types["celery"], types["celery_delayed_0"]} == {"quorum"}, types
        # when: another process sends the provisioning with a countdown of 5 s
        code = (
            "import time; from allocations.tasks import provision_allocation_task as t; "
            f"print('sent at', time.time()); t.apply_async(({allocation.pk},), countdown=5)"
        )
        sent = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", code],
            env=process_env(rabbitmq.url, **QUORUM),
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        [sent_at] = [float(line.split()[-1]) for line in sent.stdout.splitlines() if line.startswith("sent at")]
        # then: it waits in the broker (the worker took no countdown task in memory: no global prefetch), and runs
        # once it is due, not before
        assert Allocation.objects.get(pk=allocation.pk).status == Status.APPROVED
        active = wait_for_status(allocation.pk, Status.ACTIVE, timeout=CONVERGE_S)
        assert active.status == Status.ACTIVE
        assert active.updated_at.timestamp() >= sent_at + 5
