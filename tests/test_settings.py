"""Settings fail loudly instead of running production on demo defaults."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

STRONG_SECRET = "k3y-" + "0123456789abcdefghijklmnopqrstuvwxyz" * 2  # 76 characters, 37 different
BOOT = "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'portal.settings'; django.setup(); print('ok')"


def boot(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "DEBUG"}
    }
    clean = {k: v for k, v in clean.items() if not k.startswith(("SECURE_", "CACHE_URL"))}
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
    secret_file.write_text(STRONG_SECRET + "\n")
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


@pytest.mark.parametrize(
    "secret",
    ["short-but-secret", "a" * 60, "django-insecure-" + "x1y2z3" * 10],
    ids=["short", "one-character", "django-development-key"],
)
def test_it_refuses_a_weak_secret_key_with_debug_off(secret):
    # given / when (issue 9)
    result = boot(
        DEBUG="False", SECRET_KEY=secret, DATABASE_URL="postgres://x@127.0.0.1/x", CELERY_BROKER_URL="redis://x/0"
    )
    # then
    assert result.returncode == 1
    assert "DEBUG is off and SECRET_KEY is too weak: use 50 or more random characters" in result.stderr


PRODUCTION = {
    "DEBUG": "False",
    "SECRET_KEY": STRONG_SECRET,
    "DATABASE_URL": "postgres://fatia@127.0.0.1:5432/fatia",
    "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
    "CACHE_URL": "redis://127.0.0.1:6379/1",
    "ALLOWED_HOSTS": "fatia.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://fatia.example.com",
    "SECURE_SSL_REDIRECT": "True",
    "SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto: https",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "True",
    "SECURE_HSTS_PRELOAD": "True",
}


def check_deploy(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in PRODUCTION and not k.startswith("SECURE_")}
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_production_settings_pass_djangos_deployment_checks():
    # when (issue 9)
    result = check_deploy(**PRODUCTION)
    # then
    assert (result.returncode, result.stderr) == (0, "")
    assert "System check identified no issues" in result.stdout


@pytest.mark.parametrize(
    ("missing", "check_id"),
    [
        ("SECURE_HSTS_SECONDS", "security.W004"),
        ("SECURE_SSL_REDIRECT", "security.W008"),
        ("CACHE_URL", "fatia.W001"),
    ],
)
def test_the_deployment_checks_name_each_production_setting_left_out(missing, check_id):
    # when
    result = check_deploy(**{k: v for k, v in PRODUCTION.items() if k != missing})
    # then
    assert result.returncode == 1
    assert check_id in result.stderr


def test_a_malformed_proxy_ssl_header_is_refused():
    result = boot(**{**PRODUCTION, "SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto"})
    assert result.returncode == 1
    assert "SECURE_PROXY_SSL_HEADER must look like 'X-Forwarded-Proto: https'" in result.stderr


def test_the_tenant_pod_security_level_must_be_a_pod_security_standard():
    result = boot(DEBUG="True", FATIA_TENANT_POD_SECURITY="strict")
    assert result.returncode == 1
    assert "FATIA_TENANT_POD_SECURITY must be 'privileged', 'baseline' or 'restricted', not 'strict'." in result.stderr
    assert boot(DEBUG="True", FATIA_TENANT_POD_SECURITY="baseline").returncode == 0


def test_the_holder_image_must_name_an_image():
    result = boot(DEBUG="True", FATIA_HOLDER_IMAGE=" ")
    assert result.returncode == 1
    assert "FATIA_HOLDER_IMAGE must name an image, e.g. registry.k8s.io/pause:3.10." in result.stderr


def test_the_fill_left_rule_must_be_off_raw_or_trusted():
    result = boot(DEBUG="True", FATIA_HOLD_FILL_LEFT="on")
    assert result.returncode == 1
    assert "FATIA_HOLD_FILL_LEFT must be 'off', 'raw' or 'trusted', not 'on'." in result.stderr
