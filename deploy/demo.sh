#!/usr/bin/env bash
# The zero-setup demo: SQLite, tasks run in-process (embedded worker), a simulated GPU fleet.
#   bash deploy/demo.sh [ADDR:PORT]    (default 127.0.0.1:8000; `make demo PORT=8001` passes one)
#
# It runs with DEBUG off, as production does, so a visitor gets the portal's own 403 and 404 pages rather
# than Django's debug pages (which list every URL). What production reads from the environment is set here
# for the demo alone: a random secret key kept in the data directory, SQLite, the in-memory broker, and
# cookies without the Secure flag (plain HTTP on this machine).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${FATIA_CACHE:-$HOME/.cache/fatia}
VENV=$CACHE/venv
mkdir -p "$CACHE"
# Rebuild when the dependency lists change (the tool settings below them do not matter here).
stamp=$(sed -n '/^\[project\]/,/^\[project.scripts\]/p' pyproject.toml | sha256sum | cut -c1-16)
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.fatia-stamp" 2>/dev/null)" != "$stamp" ]; then
  log=$CACHE/pip-demo.log
  echo "Installing Fatia into $VENV (once; pip's output goes to $log)..."
  python3 -m venv "$VENV"
  { PIP_CACHE_DIR=$CACHE/pip "$VENV/bin/pip" install -q --upgrade pip setuptools wheel &&
    PIP_CACHE_DIR=$CACHE/pip "$VENV/bin/pip" install -q -e ".[dev]"; } >"$log" 2>&1 || { cat "$log"; exit 1; }
  echo "$stamp" >"$VENV/.fatia-stamp"
fi
# One FATIA_CACHE may serve several checkouts, and its editable install points at whichever installed last: the
# `fatia` printed below would run another checkout's code, or fail with "No module named 'allocations'" once that
# checkout is gone. Point it at this one when it does not already (as deploy/test.sh does; "compat": a path entry).
here=$(pwd -P)
installed=$(cd / && "$VENV/bin/python" -c \
  'import os, allocations; print(os.path.dirname(os.path.dirname(os.path.realpath(allocations.__file__))))' \
  2>/dev/null || true)
if [ "$installed" != "$here" ]; then
  PIP_CACHE_DIR=$CACHE/pip "$VENV/bin/pip" install -q --no-deps --no-build-isolation -e . \
    --config-settings editable_mode=compat >"$CACHE/pip-editable.log" 2>&1 ||
    { cat "$CACHE/pip-editable.log"; exit 1; }
fi

ADDRPORT=${1:-127.0.0.1:8000}
DATA=${FATIA_DATA_DIR:-$PWD/var}
mkdir -p "$DATA"
if [ ! -s "$DATA/demo-secret-key" ]; then
  (umask 077 && "$VENV/bin/python" -c 'import secrets; print(secrets.token_urlsafe(50))' >"$DATA/demo-secret-key")
fi
unset SECRET_KEY
export DEBUG=False
export SECRET_KEY_FILE=$DATA/demo-secret-key
export DATABASE_URL=sqlite:///$DATA/demo.sqlite3
export CELERY_BROKER_URL=memory://localhost/
export FATIA_EMBEDDED_WORKER=True
export FATIA_CLUSTER_BACKEND=simulated
export FATIA_DATA_DIR=$DATA
export ALLOWED_HOSTS=${FATIA_DEMO_ALLOWED_HOSTS:-localhost,127.0.0.1,[::1]}
export SITE_URL=http://$ADDRPORT
# Notifications show in each user's inbox (/inbox/); printed e-mails would only bury the server's log.
export EMAIL_BACKEND=django.core.mail.backends.dummy.EmailBackend
# Plain HTTP: cookies without the Secure flag, no redirect to HTTPS, no HSTS.
export SESSION_COOKIE_SECURE=False CSRF_COOKIE_SECURE=False SECURE_SSL_REDIRECT=False SECURE_HSTS_SECONDS=0
exec "$VENV/bin/python" manage.py run_demo "$ADDRPORT"
