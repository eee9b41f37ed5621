"""The broker settings of issue 16 (portal/broker.py): quorum queues only on RabbitMQ, visibility timeouts per queue;
bad values stop the process at start with a message naming the setting."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from portal.broker import default_consumed, task_queues, worker_transport_options

CELERY_CONF = (
    "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'portal.settings'; django.setup(); "
    "from portal.celery import app; c = app.conf; "
    "print(c.task_default_queue_type, c.task_default_exchange_type, sorted(c.broker_transport_options.items()))"
)


def start(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CELERY_BROKER_URL", "FATIA_BROKER_"))}
    return subprocess.run(
        [sys.executable, "-c", CELERY_CONF], env={**clean, **env}, capture_output=True, text=True, check=False
    )


def test_quorum_queues_on_rabbitmq_declare_quorum_queues_on_a_topic_exchange_with_publisher_confirms():
    result = start(CELERY_BROKER_URL="amqp://guest:guest@127.0.0.1:5672//", FATIA_BROKER_QUEUE_TYPE="quorum")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-2] == ("quorum topic [('confirm_publish', True), ('visibility_timeout', 300)]"), (
        result.stdout
    )


def test_by_default_celerys_own_queues_are_left_as_they_are():
    result = start(CELERY_BROKER_URL="redis://127.0.0.1:6379/0")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-2] == "classic direct [('visibility_timeout', 300)]", result.stdout


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"CELERY_BROKER_URL": "redis://127.0.0.1:6379/0", "FATIA_BROKER_QUEUE_TYPE": "quorum"},
            "FATIA_BROKER_QUEUE_TYPE=quorum needs a RabbitMQ broker (CELERY_BROKER_URL=amqp://...)",
        ),
        (
            {"CELERY_BROKER_URL": "amqp://127.0.0.1//", "FATIA_BROKER_QUEUE_TYPE": "stream"},
            "FATIA_BROKER_QUEUE_TYPE must be classic or quorum, not 'stream'",
        ),
        (
            {"CELERY_BROKER_URL": "redis://127.0.0.1:6379/0", "FATIA_BROKER_VISIBILITY_TIMEOUTS": "urgent=soon"},
            "FATIA_BROKER_VISIBILITY_TIMEOUTS must look like 'celery=300,kube=900' (queue=seconds), not 'urgent=soon'",
        ),
        (
            {"CELERY_BROKER_URL": "redis://127.0.0.1:6379/0", "FATIA_BROKER_VISIBILITY_TIMEOUTS": "urgent=0"},
            "FATIA_BROKER_VISIBILITY_TIMEOUTS must look like",
        ),
    ],
)
def test_a_bad_broker_setting_stops_the_start_with_a_message_naming_it(env: dict[str, str], message: str):
    result = start(**env)
    assert result.returncode == 1
    assert message in result.stderr


def test_a_worker_of_queues_with_their_own_timeout_gets_the_longest_and_keys_of_its_own():
    timeouts = {"urgent": 30, "kube": 600}
    # the worker of one listed queue, of two, and of a queue not listed (the shared keys and the default)
    assert worker_transport_options(["urgent"], timeouts, 300) == {
        "visibility_timeout": 30,
        "unacked_key": "unacked:urgent",
        "unacked_index_key": "unacked_index:urgent",
        "unacked_mutex_key": "unacked_mutex:urgent",
        "unacked_restore_throttle": 1,
    }
    assert worker_transport_options(["urgent", "kube", "urgent"], timeouts, 300)["visibility_timeout"] == 600
    assert worker_transport_options(["urgent", "kube"], timeouts, 300)["unacked_key"] == "unacked:kube+urgent"
    assert worker_transport_options(["urgent", "celery"], timeouts, 300)["visibility_timeout"] == 300
    assert worker_transport_options(["celery"], timeouts, 300) == {"visibility_timeout": 300}


QUEUES_CONF = (
    "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'portal.settings'; django.setup(); "
    "from portal.celery import app; "
    "print(sorted((q.name, q.exchange.type, (q.queue_arguments or {}).get('x-queue-type', 'classic')) "
    "for q in app.amqp.queues.values()))"
)


def test_with_quorum_queues_the_claim_polls_queue_is_declared_as_the_default_one():
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CELERY_BROKER_URL", "FATIA_BROKER_"))}
    env = {"CELERY_BROKER_URL": "amqp://guest:guest@127.0.0.1:5672//", "FATIA_BROKER_QUEUE_TYPE": "quorum"}
    result = subprocess.run(
        [sys.executable, "-c", QUEUES_CONF], env={**clean, **env}, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-2] == "[('celery', 'topic', 'quorum'), ('claims', 'topic', 'quorum')]", (
        result.stdout
    )


def test_claim_polls_go_to_their_own_queue_and_everything_else_to_the_default_one():
    # A burst's provisioning tasks queued ahead of a poll made it wait for all of them (docs/benchmarks.md, "The
    # burst's slow middle"); on a queue of its own the worker takes it in turn with them.
    from portal.celery import app

    def queue_of(task: str) -> str:
        return str(app.amqp.router.route({}, task)["queue"].name)

    assert queue_of("allocations.tasks.await_claim_allocation_task") == "claims"
    assert queue_of("allocations.tasks.provision_allocation_task") == "celery"
    assert queue_of("allocations.tasks.teardown_allocation_task") == "celery"
    # and: a worker started without -Q consumes both, declared alike (classic queues on direct exchanges here). Read
    # from the configuration, not from app.amqp.queues: sending to a queue not configured (another test's "urgent")
    # adds it there for the rest of the process.
    configured = list(app.conf.task_queues)
    assert sorted(q.name for q in configured) == ["celery", "claims"]
    declared = {(q.name, q.exchange.type, q.queue_arguments) for q in configured}
    assert declared == {("celery", "direct", None), ("claims", "direct", None)}


def test_a_worker_without_q_is_the_group_of_every_queue_it_consumes():
    # a worker without -Q consumes the default queue and the claim polls' (session 13): it keeps their messages under
    # the keys of that group, as `-Q celery,claims` does, and takes the longer timeout (session 14)
    consumed = default_consumed(task_queues("classic"), "celery")
    assert consumed == ["celery", "claims"]
    options = worker_transport_options(consumed, {"claims": 30}, 300)
    assert (options["unacked_key"], options["visibility_timeout"]) == ("unacked:celery+claims", 300)
    assert default_consumed(None, "celery") == ["celery"]
