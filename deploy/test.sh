#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what it needs, starts a private PostgreSQL and
# Redis on loopback, runs lint, types, Django checks and pytest, and stops the servers again.
#
#   bash deploy/test.sh [pytest args...]
#
# Caches (virtualenv, pip downloads) live outside the repo in $FATIA_CACHE (default ~/.cache/fatia),
# so a second run only starts the servers and runs the tests.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
CACHE=${FATIA_CACHE:-$HOME/.cache/fatia}
VENV=$CACHE/venv
mkdir -p "$CACHE"

# Each step's wall time, printed in one line when the script ends (CI's budget: docs/benchmarks.md, "CI time").
TIMES=()
STEP=
STEP_START=$SECONDS
end_step() { [ -z "$STEP" ] || TIMES+=("$STEP $((SECONDS - STEP_START)) s"); STEP=; }
log() {  # LABEL [WORDS]: a header of WORDS (default LABEL); the step's time is listed under LABEL
  end_step
  STEP=$1 STEP_START=$SECONDS
  printf '\n== %s ==\n' "${2:-$1}"
}
print_times() {  # [TAIL]: words after the list
  end_step
  [ ${#TIMES[@]} -gt 0 ] || return 0
  local list
  list=$(printf '%s, ' "${TIMES[@]}")
  printf '\n== times: %s%s ==\n' "${list%, }" "${1:-}"
}

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# --- system packages -----------------------------------------------------------------------------
pg_bindir() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && { echo "$d"; return 0; }
  done
  return 1
}
missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
pg_bindir >/dev/null || missing+=(postgresql)
# Browser tests drive Debian's Chromium through Playwright; Playwright's own browser download is
# neither wanted nor possible here.
command -v chromium >/dev/null || missing+=(chromium fonts-dejavu-core)
# The image tests (tests/deploy) build deploy/Containerfile with buildah on a base made by mmdebstrap.
command -v buildah >/dev/null || missing+=(buildah)
command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
if [ ${#missing[@]} -gt 0 ]; then
  log "Debian packages" "installing ${missing[*]} from Debian"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
PG_BIN=$(pg_bindir)

# --- python environment --------------------------------------------------------------------------
# Rebuild when the dependency lists change (the tool settings below them do not matter here).
stamp=$(sed -n '/^\[project\]/,/^\[project.scripts\]/p' pyproject.toml | sha256sum | cut -c1-16)
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.fatia-stamp" 2>/dev/null)" != "$stamp" ]; then
  log "virtualenv" "building the virtualenv in $VENV"
  python3 -m venv "$VENV"
  PIP_CACHE_DIR=$CACHE/pip "$VENV/bin/pip" install -q --upgrade pip setuptools wheel
  PIP_CACHE_DIR=$CACHE/pip "$VENV/bin/pip" install -q -e ".[dev]" --config-settings editable_mode=compat \
    >"$CACHE/pip-install.log" 2>&1 ||
    { cat "$CACHE/pip-install.log"; exit 1; }
  echo "$stamp" >"$VENV/.fatia-stamp"
else
  # The editable install points at whichever checkout ran last; point it at this one. "compat" mode is a plain
  # path entry, which the checkout the tests run from comes before; the default mode's import hook would serve
  # another checkout's modules that this one lacks.
  PIP_CACHE_DIR=$CACHE/pip "$VENV/bin/pip" install -q --no-deps --no-build-isolation -e . \
    --config-settings editable_mode=compat >"$CACHE/pip-editable.log" 2>&1 ||
    { cat "$CACHE/pip-editable.log"; exit 1; }
fi
export PATH="$VENV/bin:$PATH"
# mypy and ruff keep their caches with the others: a fresh clone then checks only what changed (mypy compares
# the sources' hashes when their times differ), about a minute less on a warm machine.
export MYPY_CACHE_DIR="$CACHE/mypy-cache" RUFF_CACHE_DIR="$CACHE/ruff-cache"

# --- static gates, in the background --------------------------------------------------------------------------
# ruff, mypy and hadolint only read the sources (and write their caches under $CACHE), so they run while the
# control plane and Helm are checked (or built, on a fresh machine: mypy's first run takes a minute or two) and the
# servers start. Their output is shown in order before the Django checks; a failure stops the run there, as before.
# mypy's Django plugin loads the settings, which with DEBUG off want these set; nothing connects to them.
GATES_PID=
GATES_LOG=$(mktemp /tmp/fatia-gates.XXXXXX)
if [ "${FATIA_QUICK:-0}" != 1 ]; then
  (
    set -e
    TIMES=() STEP=  # this subshell's own list of times
    export DEBUG=False ALLOWED_HOSTS=localhost FATIA_DATA_DIR="$GATES_LOG.data"
    SECRET_KEY=$(python3 -c 'import secrets; print(secrets.token_urlsafe(50))')
    export SECRET_KEY DATABASE_URL=postgres://fatia@127.0.0.1/fatia CELERY_BROKER_URL=redis://127.0.0.1/0
    log "ruff"
    ruff check .
    ruff format --check .
    log "mypy"
    mypy portal tenants allocations agent
    log "hadolint"
    hadolint deploy/Containerfile
    print_times
  ) >"$GATES_LOG" 2>&1 &
  GATES_PID=$!
fi
# Until the servers' cleanup below takes over: a failed build must not leave the gates running.
trap '[ -z "$GATES_PID" ] || kill "$GATES_PID" 2>/dev/null; rm -rf "$GATES_LOG" "$GATES_LOG.data"' EXIT

# --- Kubernetes control plane for tests/kube ----------------------------------------------------------
# Built from the Go module proxy into $CACHE/k8s the first time (7-18 min on 2 cores), skipped in well
# under a second afterwards (docs/control-plane.md).
log "kubernetes control plane"
bash deploy/build-control-plane.sh

# --- Helm, for the chart tests in tests/deploy --------------------------------------------------------------------
# Built from the Go module proxy into $CACHE/helm the first time (a few minutes on 2 cores), skipped afterwards.
log "helm"
bash deploy/build-helm.sh

# --- services --------------------------------------------------------------------------------------
RUN_DIR=$(mktemp -d /tmp/fatia-test.XXXXXX)
chmod 755 "$RUN_DIR"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PG_PORT=$(free_port)
REDIS_PORT=$(free_port)

cleanup() {
  set +e
  [ -z "$GATES_PID" ] || kill "$GATES_PID" 2>/dev/null
  [ -z "${SCHEMA_PID:-}" ] || kill "$SCHEMA_PID" 2>/dev/null
  rm -rf "$GATES_LOG" "$GATES_LOG.data"
  print_times "; $SECONDS s in all"
  [ -f "$RUN_DIR/redis.pid" ] && kill "$(cat "$RUN_DIR/redis.pid")" 2>/dev/null
  if [ -d "$RUN_DIR/pg" ]; then
    runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$RUN_DIR/pg" -m immediate stop >/dev/null 2>&1
  fi
  rm -rf "$RUN_DIR"
}
trap cleanup EXIT

log "servers" "starting PostgreSQL on 127.0.0.1:$PG_PORT and Redis on 127.0.0.1:$REDIS_PORT"
mkdir -p "$RUN_DIR/pg"
if [ "$(id -u)" -eq 0 ]; then
  chown postgres "$RUN_DIR/pg"
  PG_RUN=(runuser -u postgres --)
else
  PG_RUN=()
fi
"${PG_RUN[@]}" "$PG_BIN/initdb" -D "$RUN_DIR/pg" -U fatia -A trust -E UTF8 --no-locale >/dev/null
# Durability is not what the tests measure; these settings make schema setup several times faster.
"${PG_RUN[@]}" "$PG_BIN/pg_ctl" -D "$RUN_DIR/pg" -l "$RUN_DIR/pg/server.log" -w -o \
  "-p $PG_PORT -k $RUN_DIR/pg -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
  start >/dev/null
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
  --pidfile "$RUN_DIR/redis.pid" --dir "$RUN_DIR" --logfile "$RUN_DIR/redis.log"
"$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U fatia fatia
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

export DATABASE_URL="postgres://fatia@127.0.0.1:$PG_PORT/fatia"
export CELERY_BROKER_URL="redis://127.0.0.1:$REDIS_PORT/0"
SECRET_KEY=$(python3 -c 'import secrets; print(secrets.token_urlsafe(50))')
export SECRET_KEY
# Throttle counters and sign-in lockouts are shared through Redis, as in production (database 1; Celery uses 0).
export CACHE_URL="redis://127.0.0.1:$REDIS_PORT/1"
export DEBUG=False
export ALLOWED_HOSTS="localhost,127.0.0.1,testserver"
export FATIA_DATA_DIR="$RUN_DIR/data"
export FATIA_TEST_SERVICES=1

# --- gates -----------------------------------------------------------------------------------------
# FATIA_QUICK=1 runs pytest alone, for a quick loop while editing; CI and `make test` run every gate.
if [ -n "$GATES_PID" ]; then
  log "waiting for the gates" "ruff, mypy, hadolint (started in the background after the virtualenv)"
  gates_rc=0
  wait "$GATES_PID" || gates_rc=$?
  GATES_PID=
  # The subshell's own "times" line says how long each of them took, in the background.
  sed 's/^== times: /== background times: /' "$GATES_LOG"
  [ "$gates_rc" -eq 0 ] || { echo "ruff, mypy or hadolint failed (above)" >&2; exit 1; }
fi
log "django checks"
# The schema check, the slowest of the four, beside the other three (each is a Django start of its own); its output
# follows theirs.
python manage.py spectacular --validate --fail-on-warn --file "$RUN_DIR/openapi.yaml" >"$RUN_DIR/spectacular.log" 2>&1 &
SCHEMA_PID=$!
python manage.py check --fail-level WARNING
python manage.py makemigrations --check --dry-run >/dev/null
python manage.py collectstatic --noinput -v0
schema_rc=0
wait "$SCHEMA_PID" || schema_rc=$?
SCHEMA_PID=
cat "$RUN_DIR/spectacular.log"
[ "$schema_rc" -eq 0 ] || { echo "manage.py spectacular --validate failed (above)" >&2; exit 1; }

log "pytest"
set +e
python -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: the selection is empty or the test tree failed to load." >&2
  exit 1
fi
exit "$rc"
