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
    mypy portal tenants allocations agent bench
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

# --- RabbitMQ, for the broker tests (tests/allocations/test_rabbitmq_broker.py) ------------------------------------
# Debian's rabbitmq-server and Erlang unpacked into $CACHE/rabbitmq the first time (about 35 MB of packages, under a
# minute), about a second afterwards; the tests start the broker themselves. Package lists first on a fresh machine.
log "rabbitmq"
bash deploy/install-rabbitmq.sh || { as_root apt-get update -qq && bash deploy/install-rabbitmq.sh; }

# --- services --------------------------------------------------------------------------------------
RUN_DIR=$(mktemp -d /tmp/fatia-test.XXXXXX)
chmod 755 "$RUN_DIR"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
if [ "$(id -u)" -eq 0 ]; then
  PG_RUN=(runuser -u postgres --)
else
  PG_RUN=()
fi
# Every set of servers started (one per pytest process), for the cleanup.
SERVER_DIRS=()

cleanup() {
  set +e
  [ -z "$GATES_PID" ] || kill "$GATES_PID" 2>/dev/null
  [ -z "${SCHEMA_PID:-}" ] || kill "$SCHEMA_PID" 2>/dev/null
  [ -z "${SIDE_PID:-}" ] || kill "$SIDE_PID" 2>/dev/null
  rm -rf "$GATES_LOG" "$GATES_LOG.data"
  print_times "; $SECONDS s in all"
  for dir in "${SERVER_DIRS[@]}"; do
    [ -f "$dir/redis.pid" ] && kill "$(cat "$dir/redis.pid")" 2>/dev/null
    [ -d "$dir/pg" ] && "${PG_RUN[@]}" "$PG_BIN/pg_ctl" -D "$dir/pg" -m immediate stop >/dev/null 2>&1
  done
  rm -rf "$RUN_DIR"
}
trap cleanup EXIT

# start_servers DIR: a PostgreSQL and a Redis of their own on free loopback ports, data under DIR; their URLs in
# DIR/env, sourced by the pytest process that uses them.
start_servers() {
  local dir=$1 pg_port redis_port
  pg_port=$(free_port)
  redis_port=$(free_port)
  mkdir -p "$dir/pg" "$dir/data"
  chmod 755 "$dir"
  [ "$(id -u)" -ne 0 ] || chown postgres "$dir/pg"
  SERVER_DIRS+=("$dir")
  log "servers" "starting PostgreSQL on 127.0.0.1:$pg_port and Redis on 127.0.0.1:$redis_port ($dir)"
  "${PG_RUN[@]}" "$PG_BIN/initdb" -D "$dir/pg" -U fatia -A trust -E UTF8 --no-locale >/dev/null
  # Durability is not what the tests measure; these settings make schema setup several times faster.
  "${PG_RUN[@]}" "$PG_BIN/pg_ctl" -D "$dir/pg" -l "$dir/pg/server.log" -w -o \
    "-p $pg_port -k $dir/pg -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
    start >/dev/null
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
    --pidfile "$dir/redis.pid" --dir "$dir" --logfile "$dir/redis.log"
  "$PG_BIN/createdb" -h 127.0.0.1 -p "$pg_port" -U fatia fatia
  for _ in $(seq 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  # Throttle counters and sign-in lockouts are shared through Redis, as in production (database 1; Celery uses 0).
  cat >"$dir/env" <<ENV
export DATABASE_URL="postgres://fatia@127.0.0.1:$pg_port/fatia"
export CELERY_BROKER_URL="redis://127.0.0.1:$redis_port/0"
export CACHE_URL="redis://127.0.0.1:$redis_port/1"
export FATIA_DATA_DIR="$dir/data"
ENV
  echo "$pg_port" >"$dir/pg_port"
}

# --- the test database ---------------------------------------------------------------------------
# pytest-django's own set-up migrates an empty test database in every pytest process (about 50 migrations, a Django
# start's worth of CPU each time). Instead the schema is migrated once per set of migrations and dependencies, kept as
# a dump in $CACHE/schema, and loaded into each process's server as test_fatia (the name pytest-django gives it);
# pytest then runs with --reuse-db, and its migrate only checks that nothing is left to apply (any migration the dump
# lacks is applied there as usual). The key covers every migration file and the dependency lists, so a changed
# migration or Django never meets an old dump.
schema_key() {
  {
    cat "$VENV/.fatia-stamp"
    find . -path ./.git -prune -o -path '*/migrations/*.py' -type f -print | LC_ALL=C sort | xargs cat
  } | sha256sum | cut -c1-16
}
SCHEMA_DUMP=$CACHE/schema/$(schema_key).sql
# prepare_test_database DIR: test_fatia on DIR's server, from the dump (made here first when missing).
prepare_test_database() {
  local dir=$1 port tmp
  port=$(cat "$dir/pg_port")
  "$PG_BIN/createdb" -h 127.0.0.1 -p "$port" -U fatia test_fatia
  if [ ! -s "$SCHEMA_DUMP" ]; then
    mkdir -p "$CACHE/schema"
    DATABASE_URL="postgres://fatia@127.0.0.1:$port/test_fatia" python manage.py migrate --run-syncdb --noinput -v0
    tmp=$(mktemp "$SCHEMA_DUMP.XXXXXX")
    "$PG_BIN/pg_dump" -h 127.0.0.1 -p "$port" -U fatia --no-owner test_fatia >"$tmp"
    mv "$tmp" "$SCHEMA_DUMP"
    find "$CACHE/schema" -name '*.sql' ! -path "$SCHEMA_DUMP" -mtime +7 -delete  # old keys' dumps
  else
    "$PG_BIN/psql" -h 127.0.0.1 -p "$port" -U fatia -q -v ON_ERROR_STOP=1 -o /dev/null -f "$SCHEMA_DUMP" test_fatia
  fi
}

start_servers "$RUN_DIR/main"
# shellcheck disable=SC1091
. "$RUN_DIR/main/env"
SECRET_KEY=$(python3 -c 'import secrets; print(secrets.token_urlsafe(50))')
export SECRET_KEY
export DEBUG=False
export ALLOWED_HOSTS="localhost,127.0.0.1,testserver"
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

log "test database" "test_fatia from ${SCHEMA_DUMP#"$CACHE/"} (made now when missing)"
prepare_test_database "$RUN_DIR/main"

# The whole suite (no arguments) runs as two pytest processes side by side, each with a PostgreSQL and a Redis of its
# own (some tests restart or break them on purpose). tests/ci_split.py says which files each runs: tests/kube and
# tests/deploy (one control plane between them), the API fuzz and most browser tests in the side process, chosen by
# their measured cost (tests/ci_costs.json) so that both take about as long; the others in the main process; and a
# new, unmeasured file in the process with more slack (docs/benchmarks.md, "CI time", has how to measure again).
# FATIA_SPLIT=0: one process.
if [ "$#" -eq 0 ] && [ "${FATIA_SPLIT:-1}" != 0 ]; then
  mapfile -t MAIN_TESTS < <(python tests/ci_split.py main)
  mapfile -t SIDE_TESTS < <(python tests/ci_split.py side)
  [ ${#MAIN_TESTS[@]} -gt 0 ] && [ ${#SIDE_TESTS[@]} -gt 0 ] || { echo "tests/ci_split.py failed" >&2; exit 1; }
  # Each process writes its tests' times to $FATIA_JUNIT_DIR (default $CACHE/junit), main.xml and side.xml, the last
  # whole run's: `python tests/ci_split.py --update $CACHE/junit/*.xml` measures the split again from them. Other
  # pytest options reach both processes through PYTEST_ADDOPTS.
  JUNIT_DIR=${FATIA_JUNIT_DIR:-$CACHE/junit}
  mkdir -p "$JUNIT_DIR"
  MAIN_JUNIT=("--junitxml=$JUNIT_DIR/main.xml") SIDE_JUNIT=("--junitxml=$JUNIT_DIR/side.xml")
  start_servers "$RUN_DIR/side"
  log "pytest" "${#SIDE_TESTS[@]} paths in a second process beside the other ${#MAIN_TESTS[@]} (tests/ci_split.py)"
  # shellcheck disable=SC1091
  # Its own data directory needs the static files too (live servers serve them): a copy of the main one's, which
  # the django checks above collected (a second collectstatic is a Django start of its own).
  ( . "$RUN_DIR/side/env" && cp -a "$RUN_DIR/main/data/staticfiles" "$FATIA_DATA_DIR/" &&
    prepare_test_database "$RUN_DIR/side" &&
    exec python -m pytest --reuse-db "${SIDE_JUNIT[@]}" "${SIDE_TESTS[@]}" ) >"$RUN_DIR/side.log" 2>&1 &
  SIDE_PID=$!
  set +e
  python -m pytest --reuse-db "${MAIN_JUNIT[@]}" "${MAIN_TESTS[@]}"
  rc=$?
  wait "$SIDE_PID"
  side_rc=$?
  SIDE_PID=
  set -e
  log "side output" "pytest of the side process's ${#SIDE_TESTS[@]} paths (ran beside the above)"
  cat "$RUN_DIR/side.log"
  if [ "$rc" -eq 5 ] || [ "$side_rc" -eq 5 ]; then
    echo "pytest collected no tests in one of the two processes: the test tree failed to load." >&2
    exit 1
  fi
  [ "$rc" -ne 0 ] || rc=$side_rc
  exit "$rc"
fi

log "pytest"
set +e
python -m pytest --reuse-db "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: the selection is empty or the test tree failed to load." >&2
  exit 1
fi
exit "$rc"
