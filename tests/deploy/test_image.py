"""The container image (issue 11): deploy/Containerfile, built here by deploy/build-image.sh (a base made from
Debian packages, then buildah with overlay storage, or vfs where overlayfs cannot be mounted, and chroot isolation),
and run as OpenShift and a restricted pod run it: a random UID in group 0, the root filesystem read-only, only /tmp
writable.

buildah's `run` has no read-only root, so the processes run from the image's root filesystem (`buildah mount`)
through tests/deploy/run-read-only.sh: a read-only bind mount of it, a writable directory of the test's as /tmp,
`chroot --userspec`, the image's own entrypoint, command and environment. The host's network is shared, so the
processes inside reach the test PostgreSQL and Redis on loopback.

The first run builds the base and the image into $FATIA_CACHE/image (2.5 to 5.5 minutes on 2 cores, depending on
their load; docs/benchmarks.md); later runs find both there in well under a second, or rebuild the code layers after
a change to the code: 7 to 25 s with overlay storage, 1.5 to 2.5 minutes with vfs (and there each run's working
container is a full copy too: half a minute to make and delete, under a second with overlay; docs/benchmarks.md,
"CI time").
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import stat
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
from django.db.migrations.loader import MigrationLoader

from tests.test_settings import PRODUCTION

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "deploy" / "build-image.sh"
RUN_READ_ONLY = Path(__file__).parent / "run-read-only.sh"
TAG = "localhost/fatia:test"
# OpenShift's restricted SCC gives each namespace a UID range like this one; the image has never heard of it.
RANDOM_UID = "1000680000"
BASH = shutil.which("bash") or "/bin/bash"


@dataclass(frozen=True)
class Image:
    tag: str
    buildah: list[str]
    config: dict[str, Any]
    rootfs: Path

    def env(self) -> dict[str, str]:
        return dict(item.split("=", 1) for item in self.config["config"]["Env"])


def _run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False, **kwargs)


@pytest.fixture(scope="session")
def image() -> Iterator[Image]:
    """The image, built or found in the cache, and its root filesystem mounted (read-write, as buildah has it:
    each test mounts it read-only again for itself)."""
    build = _run([BASH, str(BUILD), TAG], cwd=ROOT, timeout=1800)
    assert build.returncode == 0, f"deploy/build-image.sh failed:\n{build.stdout}\n{build.stderr}"
    assert build.stdout.splitlines()[-1] == TAG
    buildah = ["buildah", *_run([BASH, str(BUILD), "--storage-opts"]).stdout.split()]
    inspect = _run([*buildah, "inspect", "--type", "image", TAG])
    assert inspect.returncode == 0, inspect.stderr
    config = json.loads(inspect.stdout)["OCIv1"]
    container = _run([*buildah, "from", "--pull-never", TAG]).stdout.strip()
    try:
        rootfs = Path(_run([*buildah, "mount", container]).stdout.strip())
        assert (rootfs / "usr/local/bin/fatia").is_file()
        yield Image(TAG, buildah, config, rootfs)
    finally:
        _run([*buildah, "umount", container])
        _run([*buildah, "rm", container])


@dataclass
class Sandbox:
    """Runs commands from the image, read-only, as RANDOM_UID:0; `tmp` is what they see as /tmp."""

    image: Image
    mountpoint: Path
    tmp: Path

    def argv(self, command: list[str], env: dict[str, str]) -> list[str]:
        full_env = {**self.image.env(), **env}
        return [
            BASH,
            str(RUN_READ_ONLY),
            str(self.image.rootfs),
            str(self.mountpoint),
            str(self.tmp),
            f"{RANDOM_UID}:0",
            *(f"{k}={v}" for k, v in full_env.items()),
            *command,
        ]

    def entrypoint(self, *args: str) -> list[str]:
        """The command a runtime runs for `args` (none: the image's default command)."""
        config = self.image.config["config"]
        return [*config["Entrypoint"], *(args or config["Cmd"])]

    def run(self, command: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return _run(self.argv(command, env or {}), timeout=300)

    @property
    def log(self) -> Path:
        return self.tmp.parent / "log.txt"

    @contextlib.contextmanager
    def start(self, command: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
        """One long-running process a test; its output goes to `log`."""
        log = self.log.open("w")
        process = subprocess.Popen(self.argv(command, env), stdout=log, stderr=subprocess.STDOUT, text=True)
        try:
            yield process
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()

    def log_of(self, process: subprocess.Popen[str]) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def sandbox(image: Image, tmp_path: Path) -> Sandbox:
    mountpoint = tmp_path / "root"
    tmp = tmp_path / "tmp"
    mountpoint.mkdir()
    tmp.mkdir()
    tmp.chmod(0o1777)  # as an emptyDir: writable by whichever UID the pod gets
    return Sandbox(image, mountpoint, tmp)


def production_env(database_url: str | None = None) -> dict[str, str]:
    """What the chart passes: the production settings of tests/test_settings.py, with the test run's PostgreSQL
    and Redis."""
    return {
        **PRODUCTION,
        "DATABASE_URL": database_url or os.environ["DATABASE_URL"],
        "CELERY_BROKER_URL": os.environ["CELERY_BROKER_URL"],
        "CACHE_URL": os.environ["CACHE_URL"],
    }


@pytest.fixture
def empty_database() -> Iterator[str]:
    """A database of its own on the test run's PostgreSQL server, dropped afterwards."""
    server = os.environ["DATABASE_URL"]
    name = f"fatia_image_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield server.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_it_answers(process: subprocess.Popen[str], url: str, sandbox: Sandbox) -> requests.Response:
    deadline = time.monotonic() + 120
    while True:
        assert process.poll() is None, f"the server exited with {process.returncode}:\n{sandbox.log_of(process)}"
        try:
            return requests.get(url, timeout=5)
        # A read timeout too: gunicorn's socket accepts before a loaded machine's worker has loaded Django (the
        # events role's probe timed out so at load 8 to 14); the 120 s deadline still bounds the wait.
        except (requests.ConnectionError, requests.Timeout):
            if time.monotonic() > deadline:
                raise AssertionError(f"nothing answered {url}:\n{sandbox.log_of(process)}") from None
            time.sleep(0.25)


def wait_for_log(process: subprocess.Popen[str], text: str, sandbox: Sandbox) -> str:
    deadline = time.monotonic() + 120
    while text not in (log := sandbox.log_of(process)):
        assert process.poll() is None, f"it exited with {process.returncode}:\n{log}"
        assert time.monotonic() < deadline, f"no {text!r} in its log:\n{log}"
        time.sleep(0.25)
    return log


def test_the_image_runs_as_a_non_root_user_in_group_0_with_the_entrypoint_picking_the_role(image: Image) -> None:
    config = image.config["config"]
    assert config["User"] == "10001:0"
    assert config["Entrypoint"] == ["fatia"]
    assert config["Cmd"] == ["web"]
    assert config["WorkingDir"] == "/app"
    assert sorted(config["ExposedPorts"]) == ["8000/tcp", "8001/tcp"]
    env = image.env()
    # paths inside the image, where /tmp is the pod's own emptyDir
    in_tmp = ("/tmp", "/tmp/fatia")  # noqa: S108
    assert (env["HOME"], env["FATIA_DATA_DIR"], env["FATIA_STATIC_ROOT"]) == (*in_tmp, "/app/staticfiles")
    # the build's throwaway settings stayed in the build: no secret or service URL is baked in
    assert {"SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "DEBUG"} & set(env) == set()


def test_the_code_belongs_to_group_0_and_nobody_can_write_it(image: Image) -> None:
    # given: every file and folder of the code and its virtualenv (links have no permissions of their own)
    paths = [
        Path(folder) / name
        for top in ("app", "opt/venv")
        for folder, folders, files in os.walk(image.rootfs / top)
        for name in [".", *folders, *files]
    ]
    # then
    wrong = []
    for path in paths:
        info = path.lstat()
        mode = info.st_mode & 0o777
        if not stat.S_ISLNK(info.st_mode) and (
            (info.st_uid, info.st_gid) != (0, 0) or mode & 0o222 or (mode >> 3) & 0o7 != (mode >> 6) & 0o7
        ):
            wrong.append(f"{path.relative_to(image.rootfs)} {info.st_uid}:{info.st_gid} {oct(mode)}")
    assert {image.rootfs / "app/manage.py", image.rootfs / "opt/venv/bin/gunicorn"} <= set(paths)
    assert wrong == []
    # tests, docs and the build's own files stay out (.dockerignore); the node agent's package comes in with issue 12
    shipped = {p.name for p in (image.rootfs / "app").iterdir()}
    needed = {"__pycache__", "allocations", "manage.py", "portal", "static", "staticfiles", "templates", "tenants"}
    assert needed <= shipped <= needed | {"agent"}
    assert "fatia:x:10001:0:" in (image.rootfs / "etc/passwd").read_text()


def test_only_tmp_is_writable_for_a_random_uid_in_group_0(sandbox: Sandbox) -> None:
    # given: a probe in place of the portal, as the random UID
    probe = "id -u; id -g; touch /app/probe /etc/probe /opt/venv/probe; touch /tmp/probe && echo tmp-writable"
    # when
    result = sandbox.run(["sh", "-c", probe])
    # then: each write outside /tmp is refused by the read-only root; /tmp takes it
    assert result.stdout.split() == [RANDOM_UID, "0", "tmp-writable"]
    assert result.stderr.count("Read-only file system") == 3, result.stderr
    assert (sandbox.tmp / "probe").stat().st_uid == int(RANDOM_UID)


def test_fatia_without_a_role_or_with_an_unknown_one_says_how_to_use_it(image: Image, sandbox: Sandbox) -> None:
    # buildah's own runtime, as the builder's user would try it first
    container = _run([*image.buildah, "from", "--pull-never", image.tag]).stdout.strip()
    try:
        plain = _run([*image.buildah, "run", "--isolation", "chroot", "--user", f"{RANDOM_UID}:0", container, "fatia"])
    finally:
        _run([*image.buildah, "rm", container])
    assert plain.returncode == 2
    assert "usage: fatia ROLE [ARGS...]" in plain.stderr
    unknown = sandbox.run(sandbox.entrypoint("webserver"))
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("fatia: unknown role 'webserver'\nusage: fatia ROLE")


def test_manage_check_deploy_passes_with_production_settings(sandbox: Sandbox) -> None:
    # when
    result = sandbox.run(sandbox.entrypoint("manage", "check", "--deploy", "--fail-level", "WARNING"), production_env())
    # then
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == "System check identified no issues (0 silenced).\n"


def test_it_refuses_to_start_without_its_secrets(sandbox: Sandbox) -> None:
    # given: nothing from the build can stand in for the chart's secrets
    env = {k: v for k, v in production_env().items() if k not in ("SECRET_KEY", "DATABASE_URL")}
    # when
    result = sandbox.run(sandbox.entrypoint("manage", "check"), env)
    # then
    assert result.returncode == 1
    assert "DEBUG is off and SECRET_KEY, DATABASE_URL are not set; refusing to start" in result.stderr


def test_the_migrate_role_creates_the_whole_schema(sandbox: Sandbox, empty_database: str) -> None:
    # when
    result = sandbox.run(sandbox.entrypoint("migrate"), production_env(empty_database))
    # then: every migration of the code is recorded as applied in that database
    assert result.returncode == 0, result.stdout + result.stderr
    on_disk = set(MigrationLoader(None, ignore_no_migrations=True).disk_migrations)
    with psycopg.connect(empty_database) as conn:
        applied = set(conn.execute("SELECT app, name FROM django_migrations").fetchall())
    assert applied == on_disk
    assert "Read-only file system" not in result.stderr


def test_the_web_role_answers_probes_and_serves_the_collected_static_files(sandbox: Sandbox) -> None:
    # given: the image's default command (`fatia web`) on a free loopback port, as the random UID
    port = free_port()
    env = {**production_env(), "FATIA_BIND_ADDRESS": "127.0.0.1", "FATIA_WEB_PORT": str(port)}
    env["FATIA_WEB_CONCURRENCY"] = "1"
    with sandbox.start(sandbox.entrypoint(), env) as web:
        # when
        healthz = wait_until_it_answers(web, f"http://127.0.0.1:{port}/healthz", sandbox)
        readyz = requests.get(f"http://127.0.0.1:{port}/readyz", timeout=10)
        # as the ingress forwards a browser's request: the public host name, TLS ended in front
        script = requests.get(
            f"http://127.0.0.1:{port}/static/js/dashboard.js",
            headers={"Host": "fatia.example.com", "X-Forwarded-Proto": "https"},
            timeout=10,
        )
        # then
        assert (healthz.status_code, healthz.json()) == (200, {"status": "ok"})
        assert (readyz.status_code, readyz.json()) == (
            200,
            {"status": "ok", "database": "ok", "broker": "ok", "cache": "ok"},
        )
        assert script.status_code == 200
        assert script.content == (ROOT / "static/js/dashboard.js").read_bytes()
        assert web.poll() is None
    # gunicorn's control socket went where HOME points, the only writable place
    assert (sandbox.tmp / ".gunicorn").is_dir()
    assert "Read-only file system" not in sandbox.log_of(web)


def test_the_events_role_answers_probes_on_its_own_port(sandbox: Sandbox) -> None:
    port = free_port()
    env = {**production_env(), "FATIA_BIND_ADDRESS": "127.0.0.1", "FATIA_EVENTS_PORT": str(port)}
    with sandbox.start(sandbox.entrypoint("events"), env) as events:
        healthz = wait_until_it_answers(events, f"http://127.0.0.1:{port}/healthz", sandbox)
        readyz = requests.get(f"http://127.0.0.1:{port}/readyz", timeout=10)
        assert (healthz.status_code, healthz.json()) == (200, {"status": "ok"})
        assert readyz.json()["status"] == "ok"
        assert "uvicorn_worker.UvicornWorker" in sandbox.log_of(events)


def private_broker() -> dict[str, str]:
    """A Redis database no other test's worker reads, so that nothing this process sends or takes crosses over."""
    return {"CELERY_BROKER_URL": os.environ["CELERY_BROKER_URL"].rsplit("/", 1)[0] + "/7"}


def test_the_beat_role_keeps_its_schedule_under_tmp(sandbox: Sandbox) -> None:
    with sandbox.start(sandbox.entrypoint("beat"), {**production_env(), **private_broker()}) as beat:
        wait_for_log(beat, "beat: Starting...", sandbox)
        deadline = time.monotonic() + 60
        while not list(sandbox.tmp.glob("celerybeat-schedule*")):
            assert beat.poll() is None, sandbox.log_of(beat)
            assert time.monotonic() < deadline, f"no schedule file in /tmp:\n{sandbox.log_of(beat)}"
            time.sleep(0.25)
        assert beat.poll() is None


def test_the_worker_role_starts_and_waits_for_tasks(sandbox: Sandbox) -> None:
    env = {**production_env(), **private_broker()}
    with sandbox.start(sandbox.entrypoint("worker", "--concurrency", "1"), env) as worker:
        log = wait_for_log(worker, "ready.", sandbox)
        assert worker.poll() is None
    assert "Read-only file system" not in log


@pytest.mark.django_db(transaction=True)
def test_the_ingest_role_applies_queued_telemetry(sandbox: Sandbox, world: Any, settings: Any) -> None:
    """`fatia ingest` (manage.py drain_telemetry) from the image, as the chart's ingest Deployment runs it."""
    from django.db import connection
    from rest_framework.test import APIClient

    from allocations.models import Node
    from allocations.nodeagent import ingest_queue, services
    from allocations.nodeagent.models import AgentStatus
    from tests.nodeagent.payloads import T0, FakeNode

    # given: a Redis database of its own for the queue, and a node agent's report queued by the portal (202)
    queue = os.environ["CACHE_URL"].rsplit("/", 1)[0] + "/6"
    settings.FATIA_INGEST_QUEUE_URL = queue
    ingest_queue.client().flushdb()
    node = Node.objects.get(name="h100-node-0")
    token = services.issue_agent_credential(node_id=node.pk, actor=world.root)[1]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    answer = client.post("/api/v1/agent/telemetry/", FakeNode(node.name).telemetry(T0, T0 + 5), format="json")
    assert answer.status_code == 202
    db = connection.settings_dict
    env = {
        **production_env(f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"),
        "FATIA_INGEST_QUEUE_URL": queue,
    }
    # without a queue the role says what to set
    refused = sandbox.run(sandbox.entrypoint("ingest", "--once"), {k: v for k, v in env.items() if "INGEST" not in k})
    assert refused.returncode == 1
    assert "There is no telemetry queue: set FATIA_INGEST_QUEUE_URL" in refused.stderr
    with sandbox.start(sandbox.entrypoint("ingest"), env) as worker:
        # when: the worker runs
        log = wait_for_log(worker, "Draining telemetry as 'drain'", sandbox)
        deadline = time.monotonic() + 120  # a guard against hanging, not a timing
        while not AgentStatus.objects.filter(node=node, last_seq=2).exists():
            assert worker.poll() is None, sandbox.log_of(worker)
            assert time.monotonic() < deadline, f"the report was not applied:\n{sandbox.log_of(worker)}"
            time.sleep(0.25)
        # then: applied and forgotten, and the worker goes on
        assert ingest_queue.backlog() == 0
        assert worker.poll() is None
    assert "Read-only file system" not in log
    ingest_queue.client().flushdb()
