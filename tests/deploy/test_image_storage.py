"""Which store deploy/build-image.sh builds in: overlay where this machine can mount overlayfs (a layer holds only
what its step changed), vfs where it cannot (full copies), and either one on request."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.deploy.test_image import BASH, BUILD

MOUNT = shutil.which("mount") or "/usr/bin/mount"
UMOUNT = shutil.which("umount") or "/usr/bin/umount"


def storage_opts(cache: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BASH, str(BUILD), "--storage-opts"],
        env={**os.environ, "FATIA_CACHE": str(cache), **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def overlay_mounts_here(folder: Path) -> bool:
    """Our own try, as the script's: an overlayfs over empty directories under `folder`."""
    for name in ("lower", "upper", "work", "merged"):
        (folder / name).mkdir(parents=True)
    options = f"lowerdir={folder}/lower,upperdir={folder}/upper,workdir={folder}/work"
    mount = subprocess.run(
        [MOUNT, "-t", "overlay", "overlay", "-o", options, str(folder / "merged")], capture_output=True, check=False
    )
    if mount.returncode != 0:
        return False
    subprocess.run([UMOUNT, str(folder / "merged")], check=True)
    return True


def test_the_store_is_overlay_where_overlayfs_mounts_and_vfs_elsewhere(tmp_path: Path) -> None:
    # given: whether this machine lets root mount an overlayfs in the cache's folder
    cache = tmp_path / "cache"
    expected = "overlay" if os.geteuid() == 0 and overlay_mounts_here(cache / "probe") else "vfs"
    # when
    picked = storage_opts(cache)
    # then: that driver, in a store of its own
    assert picked.returncode == 0, picked.stderr
    store = "storage-overlay" if expected == "overlay" else "storage"
    assert picked.stdout.split() == [
        "--root",
        f"{cache}/image/{store}",
        "--runroot",
        f"{cache}/image/{store.replace('storage', 'run')}",
        "--storage-driver",
        expected,
    ]
    # and the probe leaves nothing behind
    assert sorted(p.name for p in (cache / "image").iterdir()) == []


@pytest.mark.parametrize(("driver", "store"), [("vfs", "storage"), ("overlay", "storage-overlay")])
def test_a_driver_can_be_asked_for(tmp_path: Path, driver: str, store: str) -> None:
    picked = storage_opts(tmp_path, FATIA_IMAGE_STORAGE_DRIVER=driver)
    assert picked.returncode == 0, picked.stderr
    assert picked.stdout.split()[1::2] == [
        f"{tmp_path}/image/{store}",
        f"{tmp_path}/image/{store.replace('storage', 'run')}",
        driver,
    ]


def test_an_unknown_driver_is_refused_with_the_choices(tmp_path: Path) -> None:
    picked = storage_opts(tmp_path, FATIA_IMAGE_STORAGE_DRIVER="btrfs")
    assert picked.returncode == 2
    assert picked.stderr == "build-image: FATIA_IMAGE_STORAGE_DRIVER must be vfs or overlay, not btrfs\n"
