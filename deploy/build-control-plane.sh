#!/usr/bin/env bash
# Builds the Kubernetes control plane that the DRA tests run against (tests/kube): etcd,
# kube-apiserver, kube-scheduler, kube-controller-manager and kubectl, from source taken from the
# Go module proxy at the versions pinned in deploy/control-plane/go.mod (k8s.io/kubernetes v1.37.2)
# and deploy/control-plane/etcd/go.mod (etcd v3.7.3). No prebuilt binary is downloaded.
#
#   bash deploy/build-control-plane.sh           build what is missing, print the bin folder last
#   bash deploy/build-control-plane.sh --check   exit 0 when everything is built, 1 when not
#   bash deploy/build-control-plane.sh --print-bin-dir
#
# Everything lands outside the repo, under $FATIA_CACHE (default ~/.cache/fatia):
#   k8s/<version>/bin/    the binaries (a .stamp beside each names the go.sum it was built from)
#   go/mod                the Go module cache (~0.8 GB; kept, so a rebuild needs no network)
#   go/build              the Go build cache (~4 GB; removed after a full build unless
#                         FATIA_K8S_KEEP_GOCACHE=1)
# A binary that exists and whose stamp matches is skipped, so a second run takes well under a
# second. A first build on 2 cores takes 7 to 18 minutes (docs/control-plane.md has the times).
# Builds run one binary at a time under `nice -n 19`; a lock keeps two runs from building at once.
set -euo pipefail

SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/control-plane"
MOD_DIR=$(pwd)
REPO=$(cd ../.. && pwd)
CACHE=${FATIA_CACHE:-$HOME/.cache/fatia}

K8S_VERSION=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' go.mod)
[ -n "$K8S_VERSION" ] || { echo "build-control-plane: no k8s.io/kubernetes version in $MOD_DIR/go.mod" >&2; exit 1; }
BIN=$CACHE/k8s/$K8S_VERSION/bin

K8S_TOOLS=(kube-apiserver kube-scheduler kube-controller-manager kubectl)
ALL=(etcd "${K8S_TOOLS[@]}")

# A binary is current when it exists and its stamp names the same module files and flags.
stamp_for() {
  local dir=$1
  { cat "$dir/go.mod" "$dir/go.sum"; echo "flags: $LDFLAGS"; } | sha256sum | cut -c1-16
}
MAJOR=${K8S_VERSION#v}; MAJOR=${MAJOR%%.*}
MINOR=${K8S_VERSION#v*.}; MINOR=${MINOR%%.*}
# What hack/lib/version.sh stamps into a release build, so `kubectl version` and /version say v1.37.2.
LDFLAGS="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LDFLAGS+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$MAJOR -X $pkg.gitMinor=$MINOR -X $pkg.gitTreeState=archive"
done

is_current() {
  local name=$1 dir=$MOD_DIR
  [ "$name" = etcd ] && dir=$MOD_DIR/etcd
  [ -x "$BIN/$name" ] && [ "$(cat "$BIN/.$name.stamp" 2>/dev/null)" = "$(stamp_for "$dir")" ]
}

all_current() {
  local name
  for name in "${ALL[@]}"; do is_current "$name" || return 1; done
}

case "${1:-}" in
  --check) all_current; exit $? ;;
  --print-bin-dir) echo "$BIN"; exit 0 ;;
  "") ;;
  *) sed -n '2,18p' "$SELF" >&2; exit 2 ;;
esac

if all_current; then
  echo "control plane $K8S_VERSION already built in $BIN"
  echo "$BIN"
  exit 0
fi

# --- Go ------------------------------------------------------------------------------------------
command -v go >/dev/null || { echo "build-control-plane: Go is not installed (go1.26 or newer is needed)" >&2; exit 1; }
need=$(awk '$1 == "go" {print $2; exit}' go.mod)  # 1.26.0
have=$(go env GOVERSION | sed 's/^go//')
if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
  # An older Go (1.21+) fetches a newer toolchain from the module proxy when told which.
  export GOTOOLCHAIN=${FATIA_GOTOOLCHAIN:-go1.27.3}
  echo "build-control-plane: go$have is older than go$need, using GOTOOLCHAIN=$GOTOOLCHAIN"
fi

export GOMODCACHE=$CACHE/go/mod
export GOCACHE=$CACHE/go/build
export GOFLAGS="-trimpath -buildvcs=false -mod=readonly"
export CGO_ENABLED=0  # static binaries, as the release builds them; no C compiler needed
export GOPROXY=${GOPROXY:-https://proxy.golang.org,direct}
unset GOWORK GOOS GOARCH
mkdir -p "$BIN" "$GOMODCACHE" "$GOCACHE"

# Two runs at once (a test session and a shell, or two engineers) would build everything twice.
exec 9>"$CACHE/k8s/.build.lock"
if ! flock -n 9; then
  echo "build-control-plane: another build holds $CACHE/k8s/.build.lock, waiting for it"
  flock 9
fi

elapsed() { echo $(($(date +%s) - $1)); }
total_start=$(date +%s)
echo "building the control plane $K8S_VERSION into $BIN (Go $(go env GOVERSION), caches in $CACHE/go)"

build() {  # name module-dir package [ldflags]
  local name=$1 dir=$2 pkg=$3 flags=${4:-}
  if is_current "$name"; then
    echo "  $name: up to date"
    return 0
  fi
  local start
  start=$(date +%s)
  echo "  $name: go build $pkg (module ${dir#"$REPO"/})"
  (cd "$dir" && nice -n 19 go build -ldflags "$flags" -o "$BIN/.$name.tmp" "$pkg")
  mv -f "$BIN/.$name.tmp" "$BIN/$name"
  stamp_for "$dir" >"$BIN/.$name.stamp"
  echo "  $name: built in $(elapsed "$start")s ($(du -h "$BIN/$name" | cut -f1))"
}

build etcd "$MOD_DIR/etcd" go.etcd.io/etcd/server/v3 "-s -w"
for name in "${K8S_TOOLS[@]}"; do
  build "$name" "$MOD_DIR" "k8s.io/kubernetes/cmd/$name" "$LDFLAGS"
done

"$BIN/kube-apiserver" --version
"$BIN/etcd" --version | head -1
echo "control plane built in $(elapsed "$total_start")s"
# The build cache (about 4 GB) only speeds up building these same packages again; the module cache
# (about 0.8 GB) stays, so a rebuild needs no network. FATIA_K8S_KEEP_GOCACHE=1 keeps both.
if [ "${FATIA_K8S_KEEP_GOCACHE:-0}" != 1 ]; then
  echo "removing the Go build cache $GOCACHE ($(du -sh "$GOCACHE" | cut -f1))"
  rm -rf "$GOCACHE"
fi
echo "$BIN"
