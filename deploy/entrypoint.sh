#!/bin/sh
# fatia ROLE [ARGS...]: the entrypoint of Fatia's image (deploy/Containerfile), installed there as
# /usr/local/bin/fatia. The first argument picks the process; the rest are passed on to it.
# Each role replaces this shell (exec), so the process gets the runtime's signals directly.
set -eu

APP=/app
BIND=${FATIA_BIND_ADDRESS:-0.0.0.0}

usage() {
  cat <<'USAGE'
usage: fatia ROLE [ARGS...]

roles (ARGS go to the process):
  web        pages and the API: gunicorn portal.wsgi on $FATIA_BIND_ADDRESS:$FATIA_WEB_PORT (0.0.0.0:8000),
             $FATIA_WEB_CONCURRENCY workers (3)
  events     the live event streams (/dashboard/events/): the ASGI server on port $FATIA_EVENTS_PORT (8001),
             $FATIA_EVENTS_CONCURRENCY workers (1)
  worker     the Celery worker: provisioning and teardown
  beat       the Celery beat scheduler; run exactly one
  migrate    apply the database migrations (manage.py migrate --noinput)
  discover   Kubernetes fleet discovery (manage.py discover_fleet)
  ingest     apply queued node-agent telemetry (manage.py drain_telemetry; with FATIA_INGEST_QUEUE_URL); run one
  agent      the node agent (python -m agent)
  manage     any manage.py command, e.g. `fatia manage check --deploy`
USAGE
}

if [ $# -eq 0 ]; then
  usage >&2
  exit 2
fi
role=$1
shift
cd "$APP"

case "$role" in
  web)
    exec gunicorn portal.wsgi --bind "$BIND:${FATIA_WEB_PORT:-8000}" --workers "${FATIA_WEB_CONCURRENCY:-3}" \
      --access-logfile - "$@"
    ;;
  events)
    exec gunicorn portal.asgi:application --worker-class uvicorn_worker.UvicornWorker \
      --bind "$BIND:${FATIA_EVENTS_PORT:-8001}" --workers "${FATIA_EVENTS_CONCURRENCY:-1}" --access-logfile - "$@"
    ;;
  worker)
    exec celery -A portal worker --loglevel INFO "$@"
    ;;
  beat)
    # The schedule's state file goes to /tmp, the only writable place; losing it with the pod only means the
    # interval tasks start their intervals afresh.
    exec celery -A portal beat --loglevel INFO --schedule /tmp/celerybeat-schedule "$@"
    ;;
  migrate)
    exec python3 manage.py migrate --noinput "$@"
    ;;
  discover)
    exec python3 manage.py discover_fleet "$@"
    ;;
  ingest)
    exec python3 manage.py drain_telemetry "$@"
    ;;
  agent)
    exec python3 -m agent "$@"
    ;;
  manage)
    exec python3 manage.py "$@"
    ;;
  help | -h | --help)
    usage
    ;;
  *)
    echo "fatia: unknown role '$role'" >&2
    usage >&2
    exit 2
    ;;
esac
