"""The demo portal in one process: migrations, seed data, an embedded beat loop, the dev server.

Celery tasks run in-process right after commit (FATIA_EMBEDDED_WORKER=True makes them eager), and a
daemon thread runs the periodic tasks (lease expiry and warnings) once a minute, so nothing but this
process is needed. Production runs `celery worker` and `celery beat` against Redis instead.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections

BEAT_SECONDS = 60


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


class Command(BaseCommand):
    help = "Run the zero-setup demo portal (SQLite, embedded worker, simulated fleet)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000")

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.DEBUG or not settings.CELERY_TASK_ALWAYS_EAGER:
            raise CommandError("run_demo needs DEBUG=True and FATIA_EMBEDDED_WORKER=True (see deploy/demo.sh).")
        # Eager tasks log every run at INFO; the demo console is for the server and the logins.
        logging.getLogger("celery.app.trace").setLevel(logging.WARNING)
        Path(settings.DATA_DIR).mkdir(parents=True, exist_ok=True)
        call_command("migrate", verbosity=0)
        credentials = Path(settings.DATA_DIR) / "demo-logins.txt"
        call_command("seed_demo", credentials_file=str(credentials))
        if credentials.exists():
            self.stdout.write(f"Demo logins are in {credentials}:\n{credentials.read_text()}")
        threading.Thread(target=beat_loop, name="demo-beat", daemon=True).start()
        call_command("runserver", options["addrport"], use_reloader=False)
