#!/usr/bin/env bash
# Builds Fatia's image (deploy/Containerfile) here, where no container registry is reachable: the base image is
# made from Debian packages with mmdebstrap, then buildah builds the same Containerfile a user builds in their CI
# on it (docs/operations.md, "Image").
#
#   bash deploy/build-image.sh [TAG]          build (default tag localhost/fatia:dev), print the tag last
#   bash deploy/build-image.sh --base         make (or find) the base image only, print its name last
#   bash deploy/build-image.sh --storage-opts print the buildah options that reach this script's image store
#
# Everything lands outside the repo, under $FATIA_CACHE/image (default ~/.cache/fatia/image):
#   base-<hash>.tar   the Debian root filesystem; <hash> is that of the package list and mmdebstrap options
#   storage-overlay/  buildah's image store with the overlay driver, where this machine can mount overlayfs: a layer
#                     holds only what its step changed, so a cached step costs nothing and a code change redoes little
#   storage/          the same with the vfs driver, where it cannot (no mounts needed; each layer a full copy of the
#                     file tree, copied again for every step, cached or not). FATIA_IMAGE_STORAGE_DRIVER=vfs|overlay
#                     picks one; the other driver's store, if an earlier run left one, is removed
# The base image localhost/fatia-base:<hash> is made once per package list (about a minute). A rerun with nothing
# changed (same base, Containerfile and context files) skips the build in well under a second; after a code change
# buildah's layer cache keeps the dependency layer until deploy/requirements.lock changes (docs/benchmarks.md has
# the times). Old bases and untagged images are removed after each build (vfs layers are full copies: watch the disk).
# Needs root (mmdebstrap, chroot isolation); installs buildah and mmdebstrap from Debian when missing.
set -euo pipefail

SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/.."
CACHE=${FATIA_CACHE:-$HOME/.cache/fatia}
DIR=$CACHE/image

# overlay when the kernel lets us mount an overlayfs where the store lives (root, not inside another overlayfs).
can_mount_overlay() {
  local probe ok=1
  mkdir -p "$DIR"
  probe=$(mktemp -d "$DIR/.overlay-probe.XXXXXX") || return 1
  mkdir "$probe/lower" "$probe/upper" "$probe/work" "$probe/merged"
  if mount -t overlay overlay -o "lowerdir=$probe/lower,upperdir=$probe/upper,workdir=$probe/work" \
    "$probe/merged" 2>/dev/null; then
    umount "$probe/merged" && ok=0
  fi
  rm -rf "$probe"
  return $ok
}
DRIVER=${FATIA_IMAGE_STORAGE_DRIVER:-}
if [ -z "$DRIVER" ]; then
  if [ "$(id -u)" -eq 0 ] && can_mount_overlay; then DRIVER=overlay; else DRIVER=vfs; fi
fi
case $DRIVER in
  overlay) STORE=$DIR/storage-overlay RUNROOT=$DIR/run-overlay OTHER=(storage run) ;;
  vfs) STORE=$DIR/storage RUNROOT=$DIR/run OTHER=(storage-overlay run-overlay) ;;
  *) echo "build-image: FATIA_IMAGE_STORAGE_DRIVER must be vfs or overlay, not $DRIVER" >&2; exit 2 ;;
esac
STORAGE=(--root "$STORE" --runroot "$RUNROOT" --storage-driver "$DRIVER")

# The base: Debian's CPython 3.11 (the Python the lock is resolved for) with its venv module and the CA bundle.
SUITE=bookworm
VARIANT=minbase
PACKAGES=(python3 python3-venv ca-certificates)
# Manuals, documentation and translations are of no use in a container; the copyright files stay.
DPKG_OPTS=(
  "path-exclude=/usr/share/man/*"
  "path-exclude=/usr/share/doc/*"
  "path-include=/usr/share/doc/*/copyright"
  "path-exclude=/usr/share/locale/*"
  "path-exclude=/usr/share/info/*"
)
BASE_HASH=$(printf '%s\n' "v1" "$SUITE" "$VARIANT" "${PACKAGES[@]}" "${DPKG_OPTS[@]}" | sha256sum | cut -c1-16)
BASE_IMAGE=localhost/fatia-base:$BASE_HASH
BASE_TAR=$DIR/base-$BASE_HASH.tar

log() { printf '== %s\n' "$*" >&2; }
b() { buildah "${STORAGE[@]}" "$@"; }

case "${1:-}" in
  --storage-opts) echo "${STORAGE[*]}"; exit 0 ;;
  -h | --help) sed -n '2,21p' "$SELF"; exit 0 ;;
  -*) [ "$1" = --base ] || { sed -n '2,21p' "$SELF" >&2; exit 2; } ;;
esac

[ "$(id -u)" -eq 0 ] || { echo "build-image: needs root (mmdebstrap and buildah's chroot isolation)" >&2; exit 1; }
missing=()
command -v buildah >/dev/null || missing+=(buildah)
command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]} from Debian"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
mkdir -p "$DIR"
# One build at a time per cache: two would race on the store and on the base tarball.
exec 9>"$DIR/.lock"
flock 9
# A store of the other driver (a machine that gained or lost overlayfs, an older cache) is gigabytes of nothing.
# An overlay store may still have mounts (a killed test run's container): those go first.
for old in "${OTHER[@]}"; do
  [ -d "$DIR/$old" ] || continue
  log "removing $DIR/$old: this build uses the $DRIVER driver"
  awk -v dir="$DIR/$old/" 'index($2, dir) == 1 {print $2}' /proc/mounts | sort -r | xargs -r umount -l
  rm -rf "${DIR:?}/$old"
done

# The Debian mirrors this machine's apt uses (no host name is built in); FATIA_DEBIAN_MIRROR and
# FATIA_DEBIAN_SECURITY_MIRROR override them.
apt_uris() {
  { grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{for (i = 2; i <= NF; i++) print $i}'
    grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | sed 's/\[[^]]*\]//' | awk '{print $2}'
  } | sed 's:/*$::' | awk '!seen[$0]++'
}
mirror=${FATIA_DEBIAN_MIRROR:-$(apt_uris | grep -v -- '-security$' | head -1 || true)}
security=${FATIA_DEBIAN_SECURITY_MIRROR:-$(apt_uris | grep -- '-security$' | head -1 || true)}

make_base() {
  [ -n "$mirror" ] || { echo "build-image: no Debian mirror in /etc/apt; set FATIA_DEBIAN_MIRROR" >&2; exit 1; }
  local sources=$DIR/sources.list opts=() o
  {
    echo "deb $mirror $SUITE main"
    echo "deb $mirror $SUITE-updates main"
    [ -z "$security" ] || echo "deb $security $SUITE-security main"
  } >"$sources"
  for o in "${DPKG_OPTS[@]}"; do opts+=(--dpkgopt="$o"); done
  log "making the base from Debian packages: ${PACKAGES[*]} ($SUITE, $VARIANT)"
  mmdebstrap --quiet --format=tar --variant="$VARIANT" --include="$(IFS=,; echo "${PACKAGES[*]}")" "${opts[@]}" \
    "$SUITE" "$BASE_TAR.part" "$sources" </dev/null
  mv "$BASE_TAR.part" "$BASE_TAR"
}

import_base() {
  # There is no `buildah import`: a scratch container, the tarball added at /, committed.
  local c
  c=$(b from scratch)
  b add --quiet "$c" "$BASE_TAR" / >/dev/null
  b config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd python3 "$c"
  b commit --quiet --rm "$c" "$BASE_IMAGE" >/dev/null
}

if ! b inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
  [ -f "$BASE_TAR" ] || make_base
  log "importing $BASE_TAR as $BASE_IMAGE"
  import_base
fi
# Bases of older package lists, their tarballs too.
for old in $(b images --noheading --format '{{.Name}}:{{.Tag}}' localhost/fatia-base 2>/dev/null); do
  [ "$old" = "$BASE_IMAGE" ] || b rmi "$old" >/dev/null
done
for old in "$DIR"/base-*.tar; do
  [ ! -e "$old" ] || [ "$old" = "$BASE_TAR" ] || rm -f "$old"
done
if [ "${1:-}" = --base ]; then
  echo "$BASE_IMAGE"
  exit 0
fi

TAG=${1:-localhost/fatia:dev}
# pip inside the build uses this machine's trust store and pip settings; both are mounted read-only for the build
# only and are not part of the image.
mounts=()
for f in /etc/ssl/certs/ca-certificates.crt /etc/pip.conf; do
  [ ! -f "$f" ] || mounts+=(--volume "$f:$f:ro")
done
# What the build reads: the Containerfile, the base and the files .dockerignore lets in (its `!` lines). When none
# changed since the image under TAG was built, it is that image still, and even buildah's layer cache (seconds per
# step with vfs, which copies the whole file tree for each) is skipped.
inputs() {
  echo "$BASE_IMAGE"
  sed -n 's:^!\(.*[^/]\)/*$:\1:p' .dockerignore | while read -r path; do
    [ ! -e "$path" ] || find "$path" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | sort -z |
      xargs -0 -r sha256sum
  done
  sha256sum deploy/Containerfile .dockerignore
}
INPUTS=$(inputs | sha256sum | cut -c1-16)
STAMP=$DIR/built-$(echo "$TAG" | tr -c 'A-Za-z0-9._-' '_')
image_id=$(b inspect --type image --format '{{.FromImageID}}' "$TAG" 2>/dev/null || true)
if [ -n "$image_id" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$INPUTS $image_id" ]; then
  log "$TAG is up to date (inputs $INPUTS)"
  echo "$TAG"
  exit 0
fi
log "building $TAG on $BASE_IMAGE"
b bud --quiet --layers --isolation chroot --build-arg BASE="$BASE_IMAGE" "${mounts[@]}" \
  --file deploy/Containerfile --tag "$TAG" . >/dev/null
echo "$INPUTS $(b inspect --type image --format '{{.FromImageID}}' "$TAG")" >"$STAMP"
# A rebuild leaves the image it replaced untagged, and a failed one its working container.
b rm --all >/dev/null 2>&1 || true
b rmi --prune >/dev/null 2>&1 || true
echo "$TAG"
