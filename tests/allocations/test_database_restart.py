"""A PostgreSQL restart costs no request and no task (issue 16): real gunicorn, worker and beat on the test database;
the test runner's PostgreSQL is restarted under them (pg_ctl restart, fast mode) during a create/list loop and while
idle. A request that arrives while the server is really down may get a 503 (try again), never a 500."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from allocations.models import Allocation
from tenants.models import ApiToken
from tenants.services import create_api_token
from tests.allocations.faults import (
    FAST,
    PrivateRedis,
    assert_books_balance,
    celery_app_on,
    celery_process,
    free_port,
    process_env,
    stop,
    wait_settled,
)
from tests.conftest import World

pytestmark = pytest.mark.django_db(transaction=True)
Status = Allocation.Status
CONVERGE_S = 30.0


def restart_postgres() -> None:
    """Restart the server the tests use, as its owner; the data directory and options are its own."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW data_directory")
        data_dir = cursor.fetchone()[0]
    connection.close()
    [pg_ctl] = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))[-1:]
    as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    # The new server's output goes to its own log: a pipe to this process would stay open for as long as it runs.
    log = os.path.join(data_dir, "server.log")
    subprocess.run(
        [*as_owner, pg_ctl, "-D", data_dir, "-l", log, "-m", "fast", "-w", "restart"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
    )


@contextlib.contextmanager
def web_server(broker_url: str, **extra: str) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "portal.wsgi:application", "-b", f"127.0.0.1:{port}", "-w", "2"],
        env=process_env(broker_url, FATIA_THROTTLE_ENABLED="False", **extra),
        cwd=Path(__file__).resolve().parents[2],
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"{base}/healthz", timeout=1)  # noqa: S310 (loopback)
                break
            time.sleep(0.1)
        yield base
    finally:
        stop(process)


class Api:
    def __init__(self, base: str, token: str) -> None:
        self.base = base
        self.token = token
        self.codes: Counter[int] = Counter()
        self.created: list[int] = []

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> int:
        request = urllib.request.Request(  # noqa: S310 (loopback)
            f"{self.base}{path}",
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json", "Host": "localhost"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
                code, payload = response.status, response.read()
        except urllib.error.HTTPError as exc:
            code, payload = exc.code, exc.read()
        except OSError:
            code, payload = 0, b""  # no answer at all (the web server itself is not what restarts)
        self.codes[code] += 1
        if method == "POST" and code == 201:
            self.created.append(int(json.loads(payload)["id"]))
        return code

    def create(self, world: World) -> int:
        body = {
            "tenant": world.tenant_a.pk,
            "pool": world.pool.pk,
            "profile": "1g.10gb",
            "count": 1,
            "lease_hours": 2,
            "purpose": "restart",
        }
        return self.call("POST", "/api/v1/allocations/", body)


@pytest.fixture
def stack(world: World, tmp_path: Path, settings: Any) -> Iterator[Api]:
    for name, value in FAST.items():
        setattr(settings, name, int(value))
    _, token = create_api_token(
        user=world.alice, name="restart", scope=ApiToken.Scope.WRITE, expires_at=None, actor=world.alice
    )
    redis = PrivateRedis(tmp_path)
    redis.start()
    try:
        with (
            celery_app_on(redis.url),
            celery_process("worker", redis.url, tmp_path),
            celery_process("beat", redis.url, tmp_path),
            web_server(redis.url) as base,
        ):
            yield Api(base, token)
    finally:
        redis.kill()


def test_a_postgres_restart_during_a_create_and_list_loop_and_while_idle_loses_nothing(world: World, stack: Api):
    # given: a loop of creates and lists through gunicorn
    done = threading.Event()

    def loop() -> None:
        while not done.is_set() and len(stack.created) < 8:
            stack.create(world)
            stack.call("GET", "/api/v1/allocations/")

    looper = threading.Thread(target=loop)
    looper.start()
    # when: PostgreSQL restarts under it, once the loop is going (a fixed pause could end after the loop on a fast
    # machine, or before its first request on a busy one)
    deadline = time.monotonic() + 60  # a guard against hanging, not a timing
    while not stack.created and looper.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    restart_postgres()
    looper.join(timeout=60)
    done.set()
    # and: again while nothing happens, then two more requests
    restart_postgres()
    after = [stack.create(world) for _ in range(2)]
    # then: no server error, the requests after the idle restart all succeed, every request ends ACTIVE once
    assert {code for code in stack.codes if code >= 500 and code != 503 or code == 0} == set(), stack.codes
    assert after == [201, 201], stack.codes
    waited = wait_settled(stack.created, CONVERGE_S)
    statuses = Counter(Allocation.objects.filter(pk__in=stack.created).values_list("status", flat=True))
    assert statuses == {Status.ACTIVE: len(stack.created)}, (waited, statuses, stack.codes)
    assert_books_balance([world.tenant_a.pk])
