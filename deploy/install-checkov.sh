#!/usr/bin/env bash
# Installs checkov, the static scanner tests/deploy/test_chart.py runs on the rendered chart, into a virtualenv of
# its own under $FATIA_CACHE (default ~/.cache/fatia): checkov/<version>/venv. It is a test tool with a large
# dependency tree of its own, so it stays out of the project's dependencies (pyproject.toml).
#
#   bash deploy/install-checkov.sh           install when missing, print the checkov executable last
#   bash deploy/install-checkov.sh --check   exit 0 when installed, 1 when not
set -euo pipefail

VERSION=3.3.30
CACHE=${FATIA_CACHE:-$HOME/.cache/fatia}
DIR=$CACHE/checkov/$VERSION
BIN=$DIR/venv/bin/checkov

is_current() { [ -x "$BIN" ] && [ -f "$DIR/.installed" ]; }

case "${1:-}" in
  --check) is_current; exit $? ;;
  "") ;;
  *) sed -n '2,8p' "$0" >&2; exit 2 ;;
esac

if is_current; then
  echo "$BIN"
  exit 0
fi
mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock 9
if is_current; then echo "$BIN"; exit 0; fi
start=$(date +%s)
rm -rf "$DIR/venv"
python3 -m venv "$DIR/venv"
PIP_CACHE_DIR=$CACHE/pip "$DIR/venv/bin/pip" install -q --upgrade pip >"$DIR/install.log" 2>&1
PIP_CACHE_DIR=$CACHE/pip "$DIR/venv/bin/pip" install -q "checkov==$VERSION" >>"$DIR/install.log" 2>&1 ||
  { cat "$DIR/install.log" >&2; exit 1; }
touch "$DIR/.installed"
echo "checkov $VERSION installed in $(($(date +%s) - start))s" >&2
echo "$BIN"
