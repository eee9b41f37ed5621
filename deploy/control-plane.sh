#!/usr/bin/env bash
# Starts a private Kubernetes control plane on loopback, with Dynamic Resource Allocation on, for the
# DRA tests (tests/kube) and for trying the portal against real kube-scheduler allocation:
# etcd, kube-apiserver, kube-scheduler and kube-controller-manager. There is no kubelet: Nodes and
# the NVIDIA driver's ResourceSlices are written through the API, and the scheduler's work (binding
# pods, allocating claims) is what gets exercised.
#
#   bash deploy/control-plane.sh start DIR [--owner PID]   start; everything it writes is in DIR
#   bash deploy/control-plane.sh stop DIR                   stop what `start DIR` started
#   bash deploy/control-plane.sh env DIR                    print shell exports (eval "$(... env DIR)")
#   bash deploy/control-plane.sh stop-apiserver DIR         stop only kube-apiserver (an outage, for fault tests)
#   bash deploy/control-plane.sh start-apiserver DIR        start it again as it was, wait until /readyz is ok,
#                                                           then restart the scheduler and controller manager
#
# `start` writes DIR/admin.kubeconfig (client cert, group system:masters), DIR/portal.kubeconfig
# (token of ServiceAccount fatia-system/fatia-portal, RBAC from deploy/control-plane/portal-rbac.yaml)
# and DIR/cluster.env, and returns once /readyz is ok and the scheduler and controller manager
# answer /healthz. With --owner PID, a watcher stops the control plane when PID exits, so a killed
# test run leaves nothing behind. Logs: DIR/logs/*.log.
#
# The binaries come from deploy/build-control-plane.sh (FATIA_K8S_BIN overrides their folder).
# docs/control-plane.md explains the flags.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SELF=$HERE/$(basename "$0")

usage() { sed -n '2,22p' "$SELF" >&2; exit 2; }
[ $# -ge 2 ] || usage
CMD=$1
DIR=$2
shift 2
OWNER=
while [ $# -gt 0 ]; do
  case $1 in
    --owner) OWNER=$2; shift 2 ;;
    *) usage ;;
  esac
done
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler)
# DRA in v1.37.2 (`kube-apiserver --help` lists the gates still in alpha or beta; pkg/features/kube_features.go
# has the rest): DynamicResourceAllocation is GA and locked on, and resource.k8s.io/v1 is served by default.
# Of the gates the portal relies on, DRAPartitionableDevices (counters: sharedCounters, consumesCounters) and
# DRAConsumableCapacity are beta, on by default, and set here so that a default flipping later cannot change the
# test bed. DRADeviceTaints and DRADeviceTaintRules are GA and on (setting a GA gate only adds a deprecation
# warning), DRAPrioritizedList (firstAvailable), DRAAdminAccess and DRAExtendedResource are GA and locked on.
FEATURE_GATES=DRAPartitionableDevices=true,DRAConsumableCapacity=true
SERVICE_CIDR=10.0.0.0/24   # never routed: no kubelet or proxy runs; it only numbers Service objects

log() { printf 'control-plane: %s\n' "$*"; }
die() { printf 'control-plane: %s\n' "$*" >&2; exit 1; }

# A pid file names our process only while that process still runs our binary from our DIR.
pid_of() {
  local name=$1 pid
  pid=$(cat "$DIR/$name.pid" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$DIR" || return 1
  echo "$pid"
}

# term SECONDS NAME...: SIGTERM, then SIGKILL for whatever still runs after SECONDS.
term() {
  local wait=$1 name pid pids=() i alive
  shift
  for name in "$@"; do
    if pid=$(pid_of "$name"); then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
      STOPPED=$((STOPPED + 1))
    fi
  done
  for i in $(seq $((wait * 10))); do
    alive=0
    for pid in "${pids[@]}"; do [ -d "/proc/$pid" ] && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for name in "$@"; do
    if pid=$(pid_of "$name"); then
      log "$name ($pid) did not stop in $wait s, killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$DIR/$name.pid"
  done
}

# Clients first, then the API server (it drains its watches), then etcd: about 5 s in all.
stop() {
  local pid
  STOPPED=0
  rm -f "$DIR/up"
  # The watcher first, unless the watcher is who is stopping us.
  if pid=$(pid_of watcher) && [ "$pid" != "${FATIA_CP_WATCHER_PID:-}" ]; then
    kill "$pid" 2>/dev/null || true
  fi
  rm -f "$DIR/watcher.pid"
  term 5 kube-scheduler kube-controller-manager
  term 10 kube-apiserver
  term 10 etcd
  [ "$STOPPED" -gt 0 ] && log "stopped ($STOPPED processes)"
  return 0
}

print_env() {
  [ -f "$DIR/cluster.env" ] || die "$DIR/cluster.env is missing: was the control plane started there?"
  # shellcheck disable=SC1091
  . "$DIR/cluster.env"
  printf 'export KUBECONFIG=%q\n' "$DIR/admin.kubeconfig"
  printf 'export FATIA_K8S_SERVER=%q\n' "$FATIA_K8S_SERVER"
  printf 'export FATIA_K8S_ADMIN_KUBECONFIG=%q\n' "$DIR/admin.kubeconfig"
  printf 'export FATIA_K8S_PORTAL_KUBECONFIG=%q\n' "$DIR/portal.kubeconfig"
  printf 'export PATH=%q:"$PATH"\n' "$FATIA_K8S_BIN"
}

# An outage of the API server alone: its command line is kept so that it comes back exactly as it was.
stop_apiserver() {
  local pid
  pid=$(pid_of kube-apiserver) || die "kube-apiserver does not run for $DIR"
  cp "/proc/$pid/cmdline" "$DIR/kube-apiserver.argv"
  STOPPED=0
  term 3 kube-apiserver
  log "kube-apiserver stopped"
}

start_apiserver() {
  local argv=() deadline
  [ -f "$DIR/kube-apiserver.argv" ] || die "no stopped kube-apiserver for $DIR"
  pid_of kube-apiserver >/dev/null && die "kube-apiserver already runs for $DIR"
  mapfile -d '' argv <"$DIR/kube-apiserver.argv"
  setsid "${argv[@]}" </dev/null >>"$DIR/logs/kube-apiserver.log" 2>&1 &
  echo $! >"$DIR/kube-apiserver.pid"
  # shellcheck disable=SC1091
  . "$DIR/cluster.env"
  deadline=$((SECONDS + 60))
  until [ "$("$FATIA_K8S_BIN/kubectl" --kubeconfig="$DIR/admin.kubeconfig" get --raw /readyz 2>/dev/null)" = ok ]; do
    [ $SECONDS -gt $deadline ] && die "kube-apiserver did not come back; see $DIR/logs/kube-apiserver.log"
    sleep 0.1
  done
  log "kube-apiserver back"
  restart_controllers
}

# In a cluster, kube-scheduler and kube-controller-manager run with leader election: an API server gone longer than
# their lease's renew deadline (10 s) makes them exit, and the kubelet starts them again, so they list everything
# afresh. Here they run without it and outlive the outage, and their informers retry with client-go's backoff, which
# reaches 30 to 60 s during an outage and is only reset after 2 min: after a 30 s outage the scheduler went on not
# seeing new nodes, slices and claims for up to a minute, and the next test's claims waited for it (tests/kube).
# So do what the cluster does: start both again as they were, and wait until they answer /healthz.
restart_controllers() {
  local name pid argv port deadline
  for name in kube-scheduler kube-controller-manager; do
    pid=$(pid_of "$name") || die "$name does not run for $DIR"
    cp "/proc/$pid/cmdline" "$DIR/$name.argv"
  done
  STOPPED=0
  term 5 kube-scheduler kube-controller-manager
  for name in kube-scheduler kube-controller-manager; do
    mapfile -d '' argv <"$DIR/$name.argv"
    setsid "${argv[@]}" </dev/null >>"$DIR/logs/$name.log" 2>&1 &
    echo $! >"$DIR/$name.pid"
  done
  for name in kube-scheduler kube-controller-manager; do
    port=$(tr '\0' '\n' <"$DIR/$name.argv" | sed -n 's/^--secure-port=//p')
    deadline=$((SECONDS + 60))
    until python3 -c '
import ssl, sys, urllib.request
ctx = ssl._create_unverified_context()
url = f"https://127.0.0.1:{sys.argv[1]}/healthz"
sys.exit(0 if urllib.request.urlopen(url, context=ctx, timeout=2).read() == b"ok" else 1)
' "$port" 2>/dev/null; do
      pid_of "$name" >/dev/null || die "$name did not start again; see $DIR/logs/$name.log"
      [ $SECONDS -gt $deadline ] && die "$name did not answer /healthz again; see $DIR/logs/$name.log"
      sleep 0.1
    done
  done
  log "kube-scheduler and kube-controller-manager restarted"
}

case $CMD in
  stop) stop; exit 0 ;;
  env) print_env; exit 0 ;;
  stop-apiserver) stop_apiserver; exit 0 ;;
  start-apiserver) start_apiserver; exit 0 ;;
  start) ;;
  *) usage ;;
esac

# --- start -----------------------------------------------------------------------------------------
T0=$(date +%s%N)
since() { echo "$(( ($(date +%s%N) - T0) / 1000000 ))ms"; }

BIN=${FATIA_K8S_BIN:-$(bash "$HERE/build-control-plane.sh" --print-bin-dir)}
for name in "${COMPONENTS[@]}" kubectl; do
  [ -x "$BIN/$name" ] || die "$BIN/$name is missing: run bash deploy/build-control-plane.sh"
done
for name in "${COMPONENTS[@]}"; do
  pid_of "$name" >/dev/null && die "$name already runs for $DIR; stop it first"
done
command -v openssl >/dev/null || die "openssl is needed (apt-get install openssl)"
command -v python3 >/dev/null || die "python3 is needed"

PKI=$DIR/pki
mkdir -p "$PKI" "$DIR/logs" "$DIR/etcd"
chmod 700 "$DIR" "$PKI" "$DIR/etcd"

# Five ports the kernel says are free, held together so they differ from each other.
read -r ETCD_PORT ETCD_PEER_PORT API_PORT SCHED_PORT KCM_PORT < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(5)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
')
SERVER=https://127.0.0.1:$API_PORT

# --- certificates (EC P-256: quick to make, accepted everywhere Kubernetes takes a key) ------------
cat >"$PKI/openssl.cnf" <<EOF
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign, digitalSignature
subjectKeyIdentifier = hash
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
[apiserver]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, IP:10.0.0.1, DNS:localhost, DNS:kubernetes, DNS:kubernetes.default, DNS:kubernetes.default.svc, DNS:kubernetes.default.svc.cluster.local
[etcd]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
EOF
newkey() { openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/$1.key" 2>/dev/null; chmod 600 "$PKI/$1.key"; }
# cert NAME SUBJECT EXTENSIONS [CA]
cert() {
  local ca=${4:-ca}
  newkey "$1"
  openssl req -new -key "$PKI/$1.key" -subj "$2" -config "$PKI/openssl.cnf" -out "$PKI/$1.csr"
  openssl x509 -req -in "$PKI/$1.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" -CAcreateserial \
    -days 365 -sha256 -extfile "$PKI/openssl.cnf" -extensions "$3" -out "$PKI/$1.crt" 2>/dev/null
  rm -f "$PKI/$1.csr"
}
# ca NAME SUBJECT
ca() {
  newkey "$1"
  openssl req -x509 -new -key "$PKI/$1.key" -subj "$2" -days 3650 -sha256 \
    -config "$PKI/openssl.cnf" -extensions ca -out "$PKI/$1.crt"
}
ca ca "/CN=fatia-test-ca"
cert etcd-server "/CN=etcd" etcd
cert apiserver-etcd-client "/CN=kube-apiserver-etcd-client" client
cert apiserver "/CN=kube-apiserver" apiserver
cert admin "/O=system:masters/CN=fatia-admin" client
cert kube-scheduler "/CN=system:kube-scheduler" client
cert kube-controller-manager "/CN=system:kube-controller-manager" client
# The front proxy (aggregation layer) has a CA of its own: a client cert from ca.crt must not be able to
# assert any user through the X-Remote-User headers. Without the requestheader flags the scheduler and the
# controller manager log an error about the missing requestheader CA many times a minute.
ca front-proxy-ca "/CN=fatia-test-front-proxy-ca"
cert front-proxy-client "/CN=front-proxy-client" client front-proxy-ca
newkey sa
openssl ec -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
log "certificates in $PKI ($(since))"

b64() { base64 -w0 <"$1"; }
# kubeconfig FILE USER (client-cert NAME | token TOKEN)
kubeconfig() {
  local file=$1 user=$2 kind=$3 value=$4 cred
  if [ "$kind" = client-cert ]; then
    cred="    client-certificate-data: $(b64 "$PKI/$value.crt")
    client-key-data: $(b64 "$PKI/$value.key")"
  else
    cred="    token: $value"
  fi
  (umask 077 && cat >"$file") <<EOF
apiVersion: v1
kind: Config
clusters:
- name: fatia-test
  cluster:
    server: $SERVER
    certificate-authority-data: $(b64 "$PKI/ca.crt")
users:
- name: $user
  user:
$cred
contexts:
- name: $user@fatia-test
  context: {cluster: fatia-test, user: $user}
current-context: $user@fatia-test
EOF
}
kubeconfig "$DIR/admin.kubeconfig" fatia-admin client-cert admin
kubeconfig "$DIR/kube-scheduler.kubeconfig" system:kube-scheduler client-cert kube-scheduler
kubeconfig "$DIR/kube-controller-manager.kubeconfig" system:kube-controller-manager client-cert kube-controller-manager

# --- processes ---------------------------------------------------------------------------------------
# Each runs in a session of its own (no terminal signal reaches it) and is stopped by its pid file.
spawn() {
  local name=$1
  shift
  setsid "$@" </dev/null >"$DIR/logs/$name.log" 2>&1 &
  echo $! >"$DIR/$name.pid"
}
failed() {
  local name=$1
  log "$name failed to start; the end of $DIR/logs/$name.log:" >&2
  tail -n 25 "$DIR/logs/$name.log" >&2 || true
  exit 1  # the EXIT trap stops the rest
}
# Whether a component this run spawned still runs. Not pid_of: /proc/PID/cmdline can read empty while the child
# execs, and on a loaded machine that called a component still starting dead ("etcd failed to start" with an empty
# log, then started at the second try: twice in two CI runs). The pid is this script's own child, so it cannot be
# reused before this shell reaps it; a child that ended is gone or a zombie (state Z).
alive() {
  local pid state
  pid=$(cat "$DIR/$1.pid" 2>/dev/null) || failed "$1"
  state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$pid/status" 2>/dev/null)
  [ -n "$state" ] && [ "$state" != Z ] || failed "$1"
}
# Whatever makes start fail from here on (a signal, a failing command) stops what it started.
STARTED=0
trap 'exit 1' INT TERM
trap 'if [ "$STARTED" = 0 ]; then stop >&2; fi' EXIT

spawn etcd "$BIN/etcd" \
  --name=fatia-test \
  --data-dir="$DIR/etcd" \
  --listen-client-urls="https://127.0.0.1:$ETCD_PORT" \
  --advertise-client-urls="https://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster="fatia-test=http://127.0.0.1:$ETCD_PEER_PORT" \
  --cert-file="$PKI/etcd-server.crt" --key-file="$PKI/etcd-server.key" \
  --client-cert-auth=true --trusted-ca-file="$PKI/ca.crt" \
  --unsafe-no-fsync=true \
  --log-level=warn

spawn kube-apiserver "$BIN/kube-apiserver" \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$API_PORT" \
  --cert-dir="$PKI" \
  --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
  --client-ca-file="$PKI/ca.crt" \
  --etcd-servers="https://127.0.0.1:$ETCD_PORT" \
  --etcd-cafile="$PKI/ca.crt" --etcd-certfile="$PKI/apiserver-etcd-client.crt" --etcd-keyfile="$PKI/apiserver-etcd-client.key" \
  --authorization-mode=Node,RBAC \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
  --requestheader-client-ca-file="$PKI/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --proxy-client-cert-file="$PKI/front-proxy-client.crt" --proxy-client-key-file="$PKI/front-proxy-client.key" \
  --service-cluster-ip-range="$SERVICE_CIDR" \
  --endpoint-reconciler-type=none \
  --runtime-config=resource.k8s.io/v1=true \
  --feature-gates="$FEATURE_GATES" \
  --enable-admission-plugins=PodSecurity \
  --allow-privileged=true \
  --profiling=false

KUBECTL=("$BIN/kubectl" --kubeconfig="$DIR/admin.kubeconfig")
deadline=$((SECONDS + 90))
while :; do
  alive etcd
  alive kube-apiserver
  [ "$("${KUBECTL[@]}" get --raw /readyz 2>/dev/null)" = ok ] && break
  [ $SECONDS -gt $deadline ] && failed kube-apiserver
  sleep 0.1
done
log "kube-apiserver ready on $SERVER ($(since))"

spawn kube-controller-manager "$BIN/kube-controller-manager" \
  --kubeconfig="$DIR/kube-controller-manager.kubeconfig" \
  --authentication-kubeconfig="$DIR/kube-controller-manager.kubeconfig" \
  --authorization-kubeconfig="$DIR/kube-controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$KCM_PORT" --cert-dir="$PKI/kube-controller-manager" \
  --leader-elect=false \
  --use-service-account-credentials=true \
  --service-account-private-key-file="$PKI/sa.key" \
  --root-ca-file="$PKI/ca.crt" \
  --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
  --controllers='*,-node-lifecycle-controller' \
  --flex-volume-plugin-dir="$DIR/flexvolume" \
  --feature-gates="$FEATURE_GATES" \
  --profiling=false

spawn kube-scheduler "$BIN/kube-scheduler" \
  --kubeconfig="$DIR/kube-scheduler.kubeconfig" \
  --authentication-kubeconfig="$DIR/kube-scheduler.kubeconfig" \
  --authorization-kubeconfig="$DIR/kube-scheduler.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" --cert-dir="$PKI/kube-scheduler" \
  --leader-elect=false \
  --feature-gates="$FEATURE_GATES" \
  --profiling=false

# The portal's identity, while the other two come up.
"${KUBECTL[@]}" apply -f "$HERE/control-plane/portal-rbac.yaml" >"$DIR/logs/portal-rbac.log"
TOKEN=$("${KUBECTL[@]}" -n fatia-system create token fatia-portal --duration=720h)
kubeconfig "$DIR/portal.kubeconfig" fatia-portal token "$TOKEN"

healthy() {  # /healthz of the scheduler or controller manager (self-signed serving cert)
  python3 - "$1" <<'EOF'
import ssl, sys, urllib.request
ctx = ssl._create_unverified_context()
try:
    ok = urllib.request.urlopen(f"https://127.0.0.1:{sys.argv[1]}/healthz", context=ctx, timeout=2).read() == b"ok"
except Exception:
    ok = False
sys.exit(0 if ok else 1)
EOF
}
for name_port in "kube-scheduler:$SCHED_PORT" "kube-controller-manager:$KCM_PORT"; do
  name=${name_port%%:*}
  deadline=$((SECONDS + 60))
  while :; do
    alive "$name"
    healthy "${name_port##*:}" && break
    [ $SECONDS -gt $deadline ] && failed "$name"
    sleep 0.1
  done
done

cat >"$DIR/cluster.env" <<EOF
FATIA_K8S_SERVER=$SERVER
FATIA_K8S_BIN=$BIN
FATIA_K8S_ETCD_PORT=$ETCD_PORT
FATIA_K8S_SCHEDULER_PORT=$SCHED_PORT
FATIA_K8S_CONTROLLER_MANAGER_PORT=$KCM_PORT
EOF

touch "$DIR/up"  # removed by stop; an API server outage (stop-apiserver) leaves it
if [ -n "$OWNER" ]; then
  # Stops the control plane once the owner is gone (a test run that was killed, say).
  setsid bash -c '
    export FATIA_CP_WATCHER_PID=$$
    while kill -0 "$1" 2>/dev/null && [ -f "$2/up" ]; do sleep 2; done
    exec bash "$3" stop "$2"
  ' fatia-control-plane-watcher "$OWNER" "$DIR" "$SELF" </dev/null >"$DIR/logs/watcher.log" 2>&1 &
  echo $! >"$DIR/watcher.pid"
fi
STARTED=1
trap - INT TERM EXIT
log "up in $(since): $SERVER, kubeconfigs $DIR/admin.kubeconfig and $DIR/portal.kubeconfig"
