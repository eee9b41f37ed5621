"""The demo portal in one process: migrations, static files, seed data, an embedded beat loop, the server.

Celery tasks run in-process right after commit (FATIA_EMBEDDED_WORKER=True makes them eager), and a
daemon thread runs the periodic tasks (lease expiry and warnings) once a minute, so nothing but this
process is needed. Production runs `celery worker` and `celery beat` against Redis instead.
deploy/demo.sh sets the environment (DEBUG off, SQLite, a secret key of its own) and runs this.
"""

from __future__ import annotations

import io
import logging
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections

from allocations.management.demo import require_demo_settings

BEAT_SECONDS = 60
DEFAULT_ADDRPORT = "127.0.0.1:8000"
ADDRPORT = re.compile(r"^(?:(?P<addr>\[[0-9a-fA-F:.]+\]|[\w.-]+):)?(?P<port>\d{1,5})$")


def beat_loop() -> None:
    from allocations.services import expire_due_leases, warn_expiring_leases

    while True:
        time.sleep(BEAT_SECONDS)
        close_old_connections()
        try:
            warn_expiring_leases()
            expire_due_leases()
        except Exception:  # noqa: BLE001 - the demo beat must survive a failed round; the next one retries
            logging.getLogger(__name__).exception("demo beat round failed")


def demo_url(addrport: str) -> str:
    """The URL to open for `runserver`'s ADDR:PORT (or PORT): a wildcard address is reached on loopback."""
    match = ADDRPORT.match(addrport)
    if match is None or not 0 < int(match["port"]) < 65536:
        raise CommandError(f"{addrport!r} is not ADDR:PORT or PORT, e.g. 127.0.0.1:8001 or 8001.")
    addr = match["addr"] or "127.0.0.1"
    addr = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]"}.get(addr, addr)  # noqa: S104 (translating, not binding)
    return f"http://{addr}:{int(match['port'])}"


class ClientErrorsWithoutTraceback(logging.Filter):
    """A 403 or 400 is the portal answering as designed: log its line, not the exception's traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", 500) < 500:
            record.exc_info = None
            record.exc_text = None
        return True


def cli_command() -> str:
    """How to run the `fatia` CLI of this installation: the virtualenv's script, or the module."""
    script = Path(sys.executable).with_name("fatia")
    return str(script) if script.exists() else f"{sys.executable} -m allocations.cli"


class Command(BaseCommand):
    help = "Run the zero-setup demo portal (SQLite, embedded worker, simulated fleet)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("addrport", nargs="?", default=DEFAULT_ADDRPORT, help="ADDR:PORT or PORT to listen on")

    def handle(self, *args: Any, **options: Any) -> None:
        require_demo_settings("run_demo")
        url = demo_url(options["addrport"])
        # Eager tasks log every run at INFO; the demo console is for the server and the logins.
        logging.getLogger("celery.app.trace").setLevel(logging.WARNING)
        logging.getLogger("django.request").addFilter(ClientErrorsWithoutTraceback())
        data = Path(settings.DATA_DIR)
        data.mkdir(parents=True, exist_ok=True)
        call_command("migrate", verbosity=0)
        # DEBUG is off, as in production: WhiteNoise serves the collected files.
        call_command("collectstatic", interactive=False, verbosity=0)
        credentials = data / "demo-logins.txt"
        call_command("seed_demo", credentials_file=str(credentials), stdout=io.StringIO())
        self.stdout.write(self.banner(url, credentials))
        threading.Thread(target=beat_loop, name="demo-beat", daemon=True).start()
        call_command("runserver", options["addrport"], use_reloader=False)

    @staticmethod
    def banner(url: str, credentials: Path) -> str:
        logins = credentials.read_text().rstrip() if credentials.exists() else "(none: the logins file is missing)"
        cli = cli_command()
        path_hint = (
            f'\n  or put it on your PATH:  export PATH="{Path(cli).parent}:$PATH"' if cli.endswith("/fatia") else ""
        )
        return (
            f"Fatia demo: {url}/\n"
            f"Logins (also in {credentials}):\n"
            + "\n".join(f"  {line}" for line in logins.splitlines())
            + f"\nThe CLI: {cli} login --url {url}   (make a token at {url}/tokens/)"
            + path_hint
            + "\n"
        )
