"""What the benches that run the portal share: a database and a Redis of their own, the portal's settings,
and the clean-up at exit of everything they started.

    install_cleanups()                      # at exit, SIGTERM or SIGINT: undo what was started, last first
    database_url = open_database()          # DATABASE_URL set: a fresh database on it; else a private server
    os.environ.update({**portal_settings(database_url=database_url, data_dir=data_dir), "LOG_LEVEL": "ERROR"})

A private PostgreSQL is run as deploy/test.sh runs it: initdb and pg_ctl as the `postgres` user when run as
root, loopback only, a free port, fsync off; it is stopped and removed at exit. On DATABASE_URL's server a new
database `fatia_bench_<pid>` is created and dropped at exit (the role needs CREATEDB), so an existing database
is never touched.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_cleanups: list[Callable[[], object]] = []
# The private PostgreSQL's data directory (its postmaster.pid names the server process), when we started one.
_pg_data: list[Path] = []


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- clean-up at exit --------------------------------------------------------------------------------------


def at_exit(cleanup: Callable[[], object]) -> None:
    """Run `cleanup` at exit, before those registered earlier (a server goes before the folder it writes in)."""
    _cleanups.append(cleanup)


def run_cleanups() -> None:
    while _cleanups:
        with contextlib.suppress(Exception):
            _cleanups.pop()()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def install_cleanups() -> None:
    """Clean up at exit, and turn SIGTERM and SIGINT into an exit so that they clean up too."""
    atexit.register(run_cleanups)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)


def stop_at_exit(proc: subprocess.Popen[Any], timeout: float = 10) -> None:
    """Terminate a process we started at exit, and wait for it (up to `timeout` seconds)."""

    def stop() -> None:
        proc.terminate()
        proc.wait(timeout=timeout)

    at_exit(stop)


def stop_group_at_exit(proc: subprocess.Popen[Any]) -> None:
    """At exit, SIGTERM the process group a server leads (started with start_new_session), SIGKILL after 10 s."""

    def stop() -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    at_exit(stop)


def temporary_dir(prefix: str) -> Path:
    """A new folder under the system's temporary directory, removed at exit."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    at_exit(lambda: shutil.rmtree(path, ignore_errors=True))
    return path


# --- PostgreSQL ------------------------------------------------------------------------------------------------


def pg_bindir() -> Path:
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(candidate, "initdb").exists():
            return Path(candidate)
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    raise SystemExit("No PostgreSQL server binaries: `apt-get install postgresql`, or set DATABASE_URL.")


def start_private_postgres() -> str:
    """initdb + pg_ctl in a temporary directory, as deploy/test.sh does; stopped and removed at exit."""
    bindir = pg_bindir()
    run_dir = Path(tempfile.mkdtemp(prefix="fatia-bench-"))
    run_dir.chmod(0o755)
    data = run_dir / "pg"
    data.mkdir()
    as_postgres: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(data, user="postgres")
        as_postgres = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    _pg_data.append(data)

    def stop() -> None:
        subprocess.run(
            [*as_postgres, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
            check=False,
        )
        shutil.rmtree(run_dir, ignore_errors=True)

    at_exit(stop)
    subprocess.run(
        [*as_postgres, str(bindir / "initdb"), "-D", str(data), "-U", "fatia", "-A", "trust", "-E", "UTF8"]
        + ["--no-locale"],
        stdout=subprocess.DEVNULL,
        check=True,
    )
    options = (
        f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off "
        "-c full_page_writes=off -c max_connections=100"
    )
    subprocess.run(
        [*as_postgres, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(data / "server.log"), "-w"]
        + ["-o", options, "start"],
        stdout=subprocess.DEVNULL,
        check=True,
    )
    subprocess.run([str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "fatia", "fatia"], check=True)
    log(f"private PostgreSQL on 127.0.0.1:{port} in {run_dir} (fsync off)")
    return f"postgres://fatia@127.0.0.1:{port}/fatia"


def fresh_database_on(url: str) -> str:
    """A new database on the server DATABASE_URL names, dropped at exit; the named one is not touched."""
    import psycopg
    from psycopg import sql

    name = f"fatia_bench_{os.getpid()}"
    parts = urllib.parse.urlsplit(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    def drop() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    at_exit(drop)
    log(f"using a fresh database {name} on {parts.hostname}:{parts.port or 5432}")
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


def open_database() -> str:
    """The bench's database URL: a fresh database on DATABASE_URL's server if it is set, else a private server."""
    given = os.environ.get("DATABASE_URL")
    return fresh_database_on(given) if given else start_private_postgres()


def private_postgres_pid() -> int | None:
    """The private PostgreSQL's server process (its CPU is measured), or None on DATABASE_URL's server."""
    return int(_pg_data[0].joinpath("postmaster.pid").read_text().split()[0]) if _pg_data else None


# --- Redis ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrivateRedis:
    url: str  # database 0
    pid: int


def start_private_redis() -> PrivateRedis:
    """redis-server on loopback, no persistence (as deploy/test.sh runs it), in a temporary folder; stopped at
    exit. Its URL names database 0."""
    port = free_port()
    run_dir = temporary_dir("fatia-bench-redis-")
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        + ["--dir", str(run_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    stop_at_exit(proc)
    for _ in range(100):
        if subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True, check=False).returncode == 0:
            break
        time.sleep(0.1)
    log(f"private Redis on 127.0.0.1:{port}")
    return PrivateRedis(f"redis://127.0.0.1:{port}/0", proc.pid)


# --- a Kubernetes control plane ---------------------------------------------------------------------------


def start_control_plane() -> Path:
    """deploy/control-plane.sh's etcd, API server, scheduler and controllers in a temporary folder (its
    kubeconfigs there: portal.kubeconfig, ...); stopped and removed at exit."""
    run_dir = temporary_dir("fatia-bench-kube-") / "cp"
    script = ROOT / "deploy" / "control-plane.sh"
    subprocess.run(["bash", str(script), "start", str(run_dir), "--owner", str(os.getpid())], check=True)
    at_exit(lambda: subprocess.run(["bash", str(script), "stop", str(run_dir)], check=False))
    return run_dir


# --- the portal's settings -------------------------------------------------------------------------------


def portal_settings(*, database_url: str, data_dir: Path) -> dict[str, str]:
    """The environment a bench runs the portal under: DEBUG off, a new secret key, tasks queued on commit kept in
    memory (no worker provisions anything), warnings only in the log. A bench adds its own settings to these."""
    return {
        "DATABASE_URL": database_url,
        "DEBUG": "False",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "CELERY_BROKER_URL": "memory://",
        "ALLOWED_HOSTS": "127.0.0.1,localhost,testserver",
        "FATIA_DATA_DIR": str(data_dir),
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "LOG_LEVEL": "WARNING",
    }
