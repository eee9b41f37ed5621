"""A private RabbitMQ for the broker tests: Debian's rabbitmq-server and Erlang, unpacked into $FATIA_CACHE by
deploy/install-rabbitmq.sh (cached: a second run takes well under a second), started as an ordinary process on
loopback ports of its own, with its data under the test's folder. Needs no root and touches nothing system-wide.
No Django here: bench/broker_ci_cost.py starts one too.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = ROOT / "deploy" / "install-rabbitmq.sh"
BASH = shutil.which("bash") or "/bin/bash"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def installed_sbin() -> Path:
    """Install (once) and return the folder of rabbitmq-server and rabbitmqctl."""
    done = subprocess.run([BASH, str(INSTALL_SCRIPT)], capture_output=True, text=True, check=False, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"deploy/install-rabbitmq.sh failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return Path(done.stdout.strip().splitlines()[-1])


class PrivateRabbitMQ:
    """One RabbitMQ node on 127.0.0.1. `stop` and `start` keep its data (a durable queue outlives a restart)."""

    def __init__(self, workdir: Path) -> None:
        self.sbin = installed_sbin()
        self.workdir = workdir
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        # Erlang's distribution (which rabbitmqctl talks to) and its port mapper get ports of their own too, so that
        # two test runs on one machine do not meet.
        dist_port, epmd_port = free_port(), free_port()
        erlang_bin = self.sbin.parents[3] / "erlang" / "bin"
        (workdir / "rabbitmq.conf").write_text("log.console = true\nlog.console.level = warning\n")
        (workdir / "enabled_plugins").write_text("[].\n")
        (workdir / "rabbitmq-env.conf").write_text("")
        self.env = {
            **os.environ,
            "PATH": f"{erlang_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(workdir),  # Erlang's cookie lives there
            "RABBITMQ_NODENAME": f"fatia-test-{self.port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(dist_port),
            "ERL_EPMD_PORT": str(epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            # `epmd -kill` in close() then stops it even while a node is still registered (a CLI call's, say).
            "ERL_EPMD_RELAXED_COMMAND_CHECK": "1",
            "RABBITMQ_MNESIA_BASE": str(workdir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(workdir / "log"),
            "RABBITMQ_CONFIG_FILE": str(workdir / "rabbitmq"),
            "RABBITMQ_CONF_ENV_FILE": str(workdir / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(workdir / "enabled_plugins"),
            "RABBITMQ_PLUGINS_DIR": str(self.sbin.parent / "plugins"),
        }

    @property
    def url(self) -> str:
        return self.url_for("/")

    def url_for(self, vhost: str) -> str:
        # guest may sign in from loopback only, which is where the tests connect from.
        path = "/" if vhost == "/" else quote(vhost, safe="")  # `//`: the default virtual host, as kombu writes it
        return f"amqp://guest:guest@127.0.0.1:{self.port}/{path}"

    def add_vhosts(self, *names: str) -> None:
        """Virtual hosts (each with queues, exchanges and bindings apart from every other's) that guest may use
        fully. Tests that share one node each take one, as if on a fresh broker, without paying another boot; all
        in one definitions import, as each rabbitmqctl call starts an Erlang VM of its own (seconds on 2 cores)."""
        definitions = {
            "vhosts": [{"name": name} for name in names],
            "permissions": [
                {"user": "guest", "vhost": name, "configure": ".*", "write": ".*", "read": ".*"} for name in names
            ],
        }
        path = self.workdir / "vhosts.json"
        path.write_text(json.dumps(definitions))
        self.ctl("import_definitions", str(path))

    def start(self, timeout: float = 120.0) -> None:
        log = (self.workdir / "server.log").open("ab")
        self.process = subprocess.Popen(
            [str(self.sbin / "rabbitmq-server")],
            env=self.env,
            cwd=self.workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"rabbitmq-server exited ({self.process.returncode}):\n{self.log_tail()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return  # RabbitMQ opens the AMQP port last, once the node is booted
            time.sleep(0.1)
        raise RuntimeError(f"rabbitmq-server did not listen within {timeout:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM: the node shuts down cleanly and keeps its data (the script traps it and stops the node)."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
            self.process = None

    def close(self) -> None:
        """Stop the node and the Erlang port mapper it started (a daemon outside its process group)."""
        self.stop()
        subprocess.run(
            [str(self.sbin.parents[3] / "erlang" / "bin" / "epmd"), "-kill"],
            env=self.env,
            capture_output=True,
            check=False,
            timeout=30,
        )

    def ctl(self, *args: str) -> str:
        done = subprocess.run(
            [str(self.sbin / "rabbitmqctl"), "--quiet", *args],
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert done.returncode == 0, f"rabbitmqctl {' '.join(args)}: {done.stdout}{done.stderr}"
        return done.stdout

    def queue_types(self, vhost: str = "/") -> dict[str, str]:
        """Every queue of the virtual host (the default one unless told) and its type (classic, quorum, stream)."""
        listed = self.ctl("list_queues", "-p", vhost, "--no-table-headers", "name", "type")
        rows = (line.split("\t") for line in listed.splitlines())
        return {row[0]: row[1] for row in rows if len(row) == 2}

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join((self.workdir / "server.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
