#!/usr/bin/env bash
# Runs a command inside an image's root filesystem the way a Kubernetes pod with readOnlyRootFilesystem does:
# the root read-only, /tmp a writable directory of the host's (the pod's emptyDir), /proc, a minimal /dev, and a
# user that is no name in the image: any UID, group 0 (OpenShift's restricted SCC). buildah's own `run` has no
# read-only root, so this is done by hand in a private mount namespace; the host's network is shared.
#
#   run-read-only.sh ROOTFS MOUNTPOINT TMPDIR UID:GID [NAME=VALUE...] COMMAND [ARGS...]
#
# The environment is exactly the NAME=VALUE arguments (env -i). Every mount vanishes with the process.
set -euo pipefail
[ $# -ge 5 ] || { sed -n '2,9p' "$0" >&2; exit 2; }
rootfs=$1 mnt=$2 tmp=$3 user=$4
shift 4
exec unshare --mount --propagation private -- /bin/bash -euo pipefail -c '
  rootfs=$1 mnt=$2 tmp=$3 user=$4
  shift 4
  mount --bind "$rootfs" "$mnt"
  mount -o remount,bind,ro "$mnt"
  mount --bind "$tmp" "$mnt/tmp"
  mount -t proc proc "$mnt/proc"
  mount -t tmpfs -o mode=0755,size=1m tmpfs "$mnt/dev"
  for dev in null zero random urandom; do
    touch "$mnt/dev/$dev"
    mount --bind "/dev/$dev" "$mnt/dev/$dev"
  done
  mkdir "$mnt/dev/shm"
  mount -t tmpfs -o mode=1777,size=64m tmpfs "$mnt/dev/shm"
  mount -o remount,ro "$mnt/dev"
  exec chroot --userspec="$user" --groups=0 "$mnt" /usr/bin/env -i "$@"
' run-read-only "$rootfs" "$mnt" "$tmp" "$user" "$@"
