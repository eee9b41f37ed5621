#!/usr/bin/env bash
# Builds Helm, which the chart tests (tests/deploy/test_chart.py) and the chart benchmark run, from source taken
# from the Go module proxy at the version pinned in deploy/helm/go.mod (helm.sh/helm/v4, recorded there as a
# `tool`, with every dependency checked against deploy/helm/go.sum). No prebuilt binary is downloaded.
#
#   bash deploy/build-helm.sh           build when missing, print the binary's path last
#   bash deploy/build-helm.sh --check   exit 0 when it is built, 1 when not
#   bash deploy/build-helm.sh --print-bin
#
# Everything lands outside the repo, under $FATIA_CACHE (default ~/.cache/fatia):
#   helm/<version>/helm   the binary (.helm.stamp beside it names the go.sum and flags it was built from)
#   go/mod                the Go module cache, shared with deploy/build-control-plane.sh
#   helm/gocache          the Go build cache, removed after a build unless FATIA_HELM_KEEP_GOCACHE=1
# A binary whose stamp matches is skipped, so a second run takes well under a second; a first build on 2 cores
# takes a few minutes (docs/benchmarks.md, "Helm chart"). A lock keeps two runs from building at once.
set -euo pipefail

SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/helm"
MOD_DIR=$(pwd)
CACHE=${FATIA_CACHE:-$HOME/.cache/fatia}

HELM_VERSION=$(awk '$1 == "helm.sh/helm/v4" && $2 ~ /^v/ {print $2; exit}' go.mod)
[ -n "$HELM_VERSION" ] || { echo "build-helm: no helm.sh/helm/v4 version in $MOD_DIR/go.mod" >&2; exit 1; }
OUT_DIR=$CACHE/helm/$HELM_VERSION
BIN=$OUT_DIR/helm

# What Helm's Makefile stamps into a release build, so `helm version` names the version.
LDFLAGS="-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION -X helm.sh/helm/v4/internal/version.gitTreeState=clean"

stamp() { { cat go.mod go.sum; echo "flags: $LDFLAGS"; } | sha256sum | cut -c1-16; }
is_current() { [ -x "$BIN" ] && [ "$(cat "$OUT_DIR/.helm.stamp" 2>/dev/null)" = "$(stamp)" ]; }

case "${1:-}" in
  --check) is_current; exit $? ;;
  --print-bin) echo "$BIN"; exit 0 ;;
  "") ;;
  *) sed -n '2,15p' "$SELF" >&2; exit 2 ;;
esac

if is_current; then
  echo "helm $HELM_VERSION already built in $OUT_DIR"
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || { echo "build-helm: Go is not installed (go1.26 or newer is needed)" >&2; exit 1; }
need=$(awk '$1 == "go" {print $2; exit}' go.mod)
have=$(go env GOVERSION | sed 's/^go//')
if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
  export GOTOOLCHAIN=${FATIA_GOTOOLCHAIN:-go1.27.3}
  echo "build-helm: go$have is older than go$need, using GOTOOLCHAIN=$GOTOOLCHAIN"
fi

export GOMODCACHE=$CACHE/go/mod
export GOCACHE=$CACHE/helm/gocache
export GOFLAGS="-trimpath -buildvcs=false -mod=readonly"
export CGO_ENABLED=0
export GOPROXY=${GOPROXY:-https://proxy.golang.org,direct}
unset GOWORK GOOS GOARCH
mkdir -p "$OUT_DIR" "$GOMODCACHE" "$GOCACHE"

exec 9>"$CACHE/helm/.build.lock"
if ! flock -n 9; then
  echo "build-helm: another build holds $CACHE/helm/.build.lock, waiting for it"
  flock 9
  if is_current; then echo "$BIN"; exit 0; fi
fi

start=$(date +%s)
echo "building helm $HELM_VERSION into $OUT_DIR (Go $(go env GOVERSION))"
nice -n 19 go build -ldflags "$LDFLAGS" -o "$OUT_DIR/.helm.tmp" helm.sh/helm/v4/cmd/helm
mv -f "$OUT_DIR/.helm.tmp" "$BIN"
stamp >"$OUT_DIR/.helm.stamp"
echo "helm built in $(($(date +%s) - start))s ($(du -h "$BIN" | cut -f1))"
"$BIN" version --short
if [ "${FATIA_HELM_KEEP_GOCACHE:-0}" != 1 ]; then
  rm -rf "$GOCACHE"
fi
echo "$BIN"
