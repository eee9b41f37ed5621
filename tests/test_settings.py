"""Settings fail loudly instead of running production on demo defaults."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

BOOT = "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'portal.settings'; django.setup(); print('ok')"


def boot(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "DEBUG"}
    }
    return subprocess.run(
        [sys.executable, "-c", BOOT], env={**clean, **env}, capture_output=True, text=True, check=False
    )


def test_it_refuses_to_start_with_debug_off_and_no_secret():
    result = boot(DEBUG="False", DATABASE_URL="postgres://x@127.0.0.1/x", CELERY_BROKER_URL="redis://127.0.0.1/0")
    assert result.returncode == 1
    assert "DEBUG is off and SECRET_KEY is not set; refusing to start with demo defaults" in result.stderr


def test_it_names_every_missing_setting():
    result = boot(DEBUG="False")
    assert "DEBUG is off and SECRET_KEY, DATABASE_URL, CELERY_BROKER_URL are not set" in result.stderr


def test_it_starts_with_debug_off_when_everything_is_set(tmp_path):
    secret_file = tmp_path / "secret"
    secret_file.write_text("from-a-file\n")
    result = boot(
        DEBUG="False",
        SECRET_KEY_FILE=str(secret_file),
        DATABASE_URL="postgres://x@127.0.0.1/x",
        CELERY_BROKER_URL="redis://127.0.0.1/0",
    )
    assert (result.returncode, result.stdout.strip()) == (0, "ok")


@pytest.mark.parametrize("value", ["true", "1", "yes"])
def test_a_boolean_must_be_spelled_true_or_false(value):
    result = boot(DEBUG=value)
    assert result.returncode == 1
    assert f"DEBUG must be True or False, not '{value}'" in result.stderr


def test_the_demo_starts_with_debug_on_and_nothing_else():
    assert boot(DEBUG="True").returncode == 0
