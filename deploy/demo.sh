#!/usr/bin/env bash
# The zero-setup demo: SQLite, tasks run in-process (embedded worker), a simulated GPU fleet.
#   bash deploy/demo.sh [ADDR:PORT]    (default 127.0.0.1:8000)
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${FATIA_CACHE:-$HOME/.cache/fatia}
VENV=$CACHE/venv
# Rebuild when the dependency lists change (the tool settings below them do not matter here).
stamp=$(sed -n '/^\[project\]/,/^\[project.scripts\]/p' pyproject.toml | sha256sum | cut -c1-16)
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.fatia-stamp" 2>/dev/null)" != "$stamp" ]; then
  echo "Installing Fatia into $VENV (once)..."
  python3 -m venv "$VENV"
  PIP_CACHE_DIR=$CACHE/pip "$VENV/bin/pip" install -q --upgrade pip setuptools wheel
  PIP_CACHE_DIR=$CACHE/pip "$VENV/bin/pip" install -q -e ".[dev]"
  echo "$stamp" >"$VENV/.fatia-stamp"
fi
export DEBUG=True
export FATIA_EMBEDDED_WORKER=True
export FATIA_DATA_DIR=${FATIA_DATA_DIR:-$PWD/var}
exec "$VENV/bin/python" manage.py run_demo "$@"
