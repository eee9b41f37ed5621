"""What the demo commands (run_demo, seed_demo) check before they touch a database."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import CommandError


def require_demo_settings(command: str) -> None:
    """Refuse unless this is the demo: SQLite (production runs PostgreSQL) and the embedded worker.

    The demo creates users with printed passwords and seeds tenants; on any other database that would be
    an accident, whatever DEBUG says (the demo runs with DEBUG off, as production does)."""
    engine = str(settings.DATABASES["default"]["ENGINE"])
    if not engine.endswith("sqlite3") or not settings.CELERY_TASK_ALWAYS_EAGER:
        raise CommandError(
            f"{command} runs only on the demo's SQLite database with FATIA_EMBEDDED_WORKER=True (see deploy/demo.sh)."
        )
