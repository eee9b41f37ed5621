"""Real processes to break for the lose-no-work tests (issue 16): a private Redis this test may stop and restart,
a Celery worker and beat on it, and the test process's own Celery app pointed at it.

Short delays (sweep every second, resend after two) keep the tests to seconds; production's are in settings.py.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from django.db import connection
from django.db.models import Sum

from allocations.models import Allocation, Quota
from portal.broker import CLAIM_POLLS_QUEUE, DEFAULT_QUEUE
from tenants.models import AuditEvent

# The queues a worker started without -Q consumes: work waiting on either counts as queued.
WORKER_QUEUES = (DEFAULT_QUEUE, CLAIM_POLLS_QUEUE)

FAST = {"FATIA_OUTBOX_SWEEP_S": "1", "FATIA_OUTBOX_RESEND_S": "2", "FATIA_STUCK_REQUEST_S": "4"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateRedis:
    """A Redis server without persistence (as in the test runner's), on a port of its own."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        server = shutil.which("redis-server") or "redis-server"  # installed by deploy/test.sh
        self.process = subprocess.Popen(
            [server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            cwd=self.workdir,
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def kill(self) -> None:
        """SIGKILL: whatever was queued is gone, as after a crash of a server without persistence."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None

    def queued(self) -> int:
        import redis

        client = redis.Redis.from_url(self.url)
        return sum(int(client.llen(queue)) for queue in WORKER_QUEUES)

    def queued_tasks(self) -> list[str]:
        """The task names of the messages waiting in the queues a default worker consumes (Celery's message protocol
        2: the name is in the headers)."""
        import json

        import redis

        client = redis.Redis.from_url(self.url)
        messages = [m for queue in WORKER_QUEUES for m in client.lrange(queue, 0, -1)]
        return [str(json.loads(m).get("headers", {}).get("task")) for m in messages]


@contextlib.contextmanager
def celery_app_on(url: str) -> Iterator[None]:
    """Point this process's Celery app (the web side's sends after commit) at `url`, and back afterwards."""
    from portal.celery import app

    old = app.conf.broker_write_url

    def point(to: str) -> None:
        app.conf.broker_write_url = to  # what producers connect to; broker_url is read once, at configuration
        app.amqp._producer_pool = None  # cached per broker connection
        app._pool = None

    point(url)
    try:
        yield
    finally:
        point(old)


def process_env(broker_url: str, **extra: str) -> dict[str, str]:
    from django.conf import settings

    db = settings.DATABASES["default"]
    return {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "CELERY_BROKER_URL": broker_url,
        **FAST,
        **extra,
    }


@contextlib.contextmanager
def celery_process(
    kind: str, broker_url: str, workdir: Path, *, children: int = 0, queues: str = "", **extra: str
) -> Iterator[subprocess.Popen[bytes]]:
    """`celery worker` (one solo process, or a parent with `children` pool processes; `queues`: -Q) or `celery beat`
    on `broker_url`, in a process group of its own (a test may kill it whole), stopped at the end."""
    pool = ["--pool=prefork", f"--concurrency={children}"] if children else ["--pool=solo"]
    consume = ["-Q", queues] if queues else []
    args = ["worker", *pool, *consume] if kind == "worker" else ["beat", "-s", str(workdir / "beat-schedule")]
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "portal", *args, "--loglevel=WARNING"],
        env=process_env(broker_url, **extra),
        cwd=Path(__file__).resolve().parents[2],
        start_new_session=True,
    )
    try:
        yield process
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


WORKING = (Allocation.Status.APPROVED, Allocation.Status.PROVISIONING, Allocation.Status.RELEASING)


def wait_settled(ids: list[int], timeout: float) -> float:
    """Seconds until none of `ids` is APPROVED, PROVISIONING or RELEASING (or the timeout)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if not Allocation.objects.filter(pk__in=ids, status__in=WORKING).exists():
            break
        connection.close()
        time.sleep(0.2)
    return time.monotonic() - start


def assert_books_balance(tenant_ids: list[int]) -> None:
    """Quota counters equal the sum of the holding requests, and no request's audit has a verb twice."""
    for quota in Quota.objects.filter(tenant_id__in=tenant_ids):
        held = Allocation.objects.filter(tenant_id=quota.tenant_id, pool_id=quota.pool_id).holding_quota()
        totals = held.aggregate(c=Sum("compute_slices"), m=Sum("memory_slices"))
        books = (quota.compute_slices_used, quota.memory_slices_used)
        assert books == (totals["c"] or 0, totals["m"] or 0), f"quota {books} against the holding requests' {totals}"
    verbs = Counter(
        AuditEvent.objects.filter(object_type="allocation", tenant_id__in=tenant_ids).values_list("object_id", "verb")
    )
    twice = [key for key, n in verbs.items() if n > 1]
    # A helper module: pytest does not rewrite its asserts, so say what was recorded twice.
    assert twice == [], f"audit verbs recorded more than once (allocation id, verb): {twice}"
