"""Each entry point imports on its own in a fresh interpreter: an import cycle that module-level imports hide when
something else happens to be imported first (the test session imports nearly everything) shows here, as it would
in a Celery worker or `manage.py shell -c "from allocations.tasks import ..."`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# What a process imports first: a worker the tasks, the CLI its commands, the web server the URL conf (views, API),
# a shell the services.
ENTRY_POINTS = ("allocations.tasks", "allocations.cli", "portal.urls", "allocations.services")


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_the_module_imports_first_in_a_fresh_interpreter(module: str, tmp_path: Path) -> None:
    code = f"import django; django.setup(); import {module}"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings", "FATIA_DATA_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
