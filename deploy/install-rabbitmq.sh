#!/usr/bin/env bash
# Unpacks RabbitMQ and the Erlang it runs on from Debian's own packages into a cache outside the repo, for the broker
# tests that run Celery on quorum queues (tests/allocations/test_rabbitmq_broker.py). Nothing is installed
# system-wide and no root is needed: the .deb files are fetched with `apt-get download` and unpacked with `dpkg -x`.
#
#   bash deploy/install-rabbitmq.sh           install when missing, print the folder of rabbitmq-server last
#   bash deploy/install-rabbitmq.sh --check   exit 0 when installed, 1 when not
#
# Under $FATIA_CACHE (default ~/.cache/fatia):
#   rabbitmq/debs/   the downloaded packages (rabbitmq-server and erlang-*, about 34 MB)
#   rabbitmq/root/   them unpacked (about 60 MB); .stamp names the rabbitmq-server version
# A second run takes well under a second. The system libraries Erlang links to (libc, OpenSSL, ncurses, zlib) are
# those of any Debian 12 machine. tests/allocations/rabbitmq.py starts the server from here on demand.
set -euo pipefail

SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
CACHE=${FATIA_CACHE:-$HOME/.cache/fatia}
DIR=$CACHE/rabbitmq
ROOT=$DIR/root

# rabbitmq-server and the Erlang packages it needs; the other dependencies (adduser, logrotate, socat) only serve
# Debian's service wrapper, which the tests do not use.
packages() {
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
    --no-enhances --no-pre-depends rabbitmq-server | grep -E '^(erlang-|rabbitmq-server$)' | sort -u
}
# What the cache is checked against: one apt-cache call (the Erlang packages move with it in a Debian release).
version() { apt-cache policy rabbitmq-server | awk '/Candidate:/ {print "rabbitmq-server", $2}'; }
sbin_dir() { echo "$ROOT"/usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin; }
is_current() {
  [ -x "$ROOT/usr/lib/erlang/bin/erl" ] && [ -d "$(sbin_dir)" ] &&
    [ "$(cat "$ROOT/.stamp" 2>/dev/null)" = "$(version)" ]
}

case "${1:-}" in
  --check) is_current; exit $? ;;
  "") ;;
  *) sed -n '2,13p' "$SELF" >&2; exit 2 ;;
esac

if is_current; then
  sbin_dir
  exit 0
fi

if ! apt-cache policy rabbitmq-server | grep 'Candidate: [0-9]' >/dev/null; then
  echo "install-rabbitmq: Debian's package lists do not have rabbitmq-server; run apt-get update first" >&2
  exit 1
fi

mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock 9  # two test runs at once: one downloads, the other waits and finds it done
if is_current; then
  sbin_dir
  exit 0
fi

rm -rf "$DIR/debs" "$ROOT"
mkdir -p "$DIR/debs" "$ROOT"
# shellcheck disable=SC2046
(cd "$DIR/debs" && apt-get download -q -o APT::Sandbox::User="$(id -un)" $(packages) >/dev/null)
for deb in "$DIR"/debs/*.deb; do
  dpkg -x "$deb" "$ROOT"
done

# Debian's `erl` wrappers name their root as /usr/lib/erlang whatever folder they are in; point them at this one.
for script in "$ROOT"/usr/lib/erlang/bin/erl "$ROOT"/usr/lib/erlang/bin/start \
  "$ROOT"/usr/lib/erlang/erts-*/bin/erl "$ROOT"/usr/lib/erlang/erts-*/bin/start; do
  sed -i "s|^\( *ROOTDIR=\)/usr/lib/erlang\$|\1$ROOT/usr/lib/erlang|" "$script"
done
grep -q "ROOTDIR=$ROOT/usr/lib/erlang" "$ROOT/usr/lib/erlang/bin/erl" ||
  { echo "install-rabbitmq: could not relocate $ROOT/usr/lib/erlang/bin/erl" >&2; exit 1; }

version >"$ROOT/.stamp"
sbin_dir
