"""beat's schedule file follows FATIA_BEAT_SCHEDULE_FILE: the chart puts it on /tmp, the only writable place."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCHEDULE = (
    "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'portal.settings'; django.setup();"
    "from celery.beat import Service; from portal.celery import app; print(Service(app).schedule_filename)"
)


def beat_schedule(**env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "FATIA_BEAT_SCHEDULE_FILE"}
    result = subprocess.run(
        [sys.executable, "-c", SCHEDULE], env={**clean, **env}, capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


def test_beat_keeps_its_schedule_where_the_chart_says(tmp_path: Path) -> None:
    path = str(tmp_path / "celerybeat-schedule")
    assert beat_schedule(FATIA_BEAT_SCHEDULE_FILE=path) == path


def test_beat_keeps_its_own_default_without_the_setting() -> None:
    assert beat_schedule() == "celerybeat-schedule"
