"""Image benchmark: what building Fatia's image costs here, cold and cached, and how big it is (issue 11).

    python bench/image.py               # needs root, as deploy/build-image.sh does; about 10 minutes on 2 cores
    python bench/image.py --no-write    # docs left alone
    python bench/image.py --driver vfs  # buildah's storage driver (default: the one deploy/build-image.sh picks)

What it does, in order, on a copy of the repository and in an image cache of its own (a temporary
$FATIA_CACHE), so neither the checkout nor the test runs' cache is touched:

1. Cold base: `deploy/build-image.sh --base`, mmdebstrap from Debian packages and the import into buildah.
2. Cold image: `deploy/build-image.sh`, every step of deploy/Containerfile, the lock's wheels fetched from PyPI.
3. Unchanged rerun: the same command again (the inputs' hash matches the image's: no build at all).
4. Layer-cache rebuild: the same with the script's stamp removed, so buildah walks every step of its layer cache.
5. Code change: one line added to a module of the copy; the dependency layer is reused, the code layers rebuilt.
6. What tests/deploy/test_image.py pays on every run besides the build: `buildah from` (a working container of the
   image) and `buildah rm` (vfs copies the whole file tree for the one and deletes it for the other).
7. Sizes: the image and the base as buildah lists them (uncompressed), and the image as an OCI archive with
   gzip-compressed layers (what a registry would store).
8. A table on stdout, and the "image" section of docs/benchmarks.md (bench/report.py) unless --no-write; with the
   overlay driver, the "image-overlay" section.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.report import command_line, write_section  # noqa: E402

TAG = "localhost/fatia:bench"


def timed(args: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.monotonic()
    subprocess.run(args, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def megabytes(n: float) -> str:
    return f"{n / 1e6:.0f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print the results only")
    parser.add_argument(
        "--driver", choices=["vfs", "overlay"], help="buildah's storage driver (FATIA_IMAGE_STORAGE_DRIVER)"
    )
    options = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/image.py needs root, as deploy/build-image.sh does")

    work = Path(tempfile.mkdtemp(prefix="fatia-bench-image-"))
    try:
        repo = work / "repo"
        shutil.copytree(ROOT, repo, ignore=shutil.ignore_patterns(".git", "var", "__pycache__", "*.pyc", ".*_cache"))
        env = {**os.environ, "FATIA_CACHE": str(work / "cache")}
        if options.driver:
            env["FATIA_IMAGE_STORAGE_DRIVER"] = options.driver
        build = ["bash", "deploy/build-image.sh"]

        times = {
            "cold base (mmdebstrap + import)": timed([*build, "--base"], env, repo),
            "cold image (every step, wheels from PyPI)": timed([*build, TAG], env, repo),
            "rerun, nothing changed": timed([*build, TAG], env, repo),
        }
        for stamp in (work / "cache" / "image").glob("built-*"):
            stamp.unlink()
        times["rebuild through buildah's layer cache"] = timed([*build, TAG], env, repo)
        with (repo / "portal" / "urls.py").open("a") as module:
            module.write("# a code change for bench/image.py\n")
        times["rebuild after a code change"] = timed([*build, TAG], env, repo)

        storage = subprocess.run(
            [*build, "--storage-opts"], env=env, cwd=repo, check=True, capture_output=True, text=True
        ).stdout.split()
        buildah = ["buildah", *storage]
        driver = storage[storage.index("--storage-driver") + 1]
        start = time.monotonic()
        container = subprocess.run(
            [*buildah, "from", "--pull-never", TAG], check=True, capture_output=True, text=True
        ).stdout.strip()
        times["`buildah from` (the tests' working container)"] = time.monotonic() - start
        times["`buildah rm` of it"] = timed([*buildah, "rm", container], env, repo)
        listed = subprocess.run(
            [*buildah, "images", "--noheading", "--format", "{{.Name}}:{{.Tag}} {{.Size}}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        archive = work / "fatia.oci.tar"
        subprocess.run(
            [*buildah, "push", "--quiet", "--compression-format", "gzip", TAG, f"oci-archive:{archive}"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        compressed = archive.stat().st_size
        store = subprocess.run(["du", "-sb", str(work / "cache" / "image")], check=True, capture_output=True, text=True)
        store_bytes = int(store.stdout.split()[0])
    finally:
        shutil.rmtree(work, ignore_errors=True)

    sizes = {line.split()[0]: " ".join(line.split()[1:]) for line in listed.splitlines() if line.strip()}
    image_size = sizes.get(TAG, "?")
    base_size = next((size for name, size in sizes.items() if name.startswith("localhost/fatia-base:")), "?")
    rows = "\n".join(f"| {what} | {seconds:.1f} s |" for what, seconds in times.items())
    body = f"""`{command_line()}`: deploy/build-image.sh on a copy of the repository, in an image cache of its own
({driver} storage, chroot isolation, as the tests build it).

| build | time |
| --- | ---: |
{rows}

| size | |
| --- | ---: |
| image, uncompressed (`buildah images`) | {image_size} |
| base from Debian packages, uncompressed | {base_size} |
| image as an OCI archive, gzip layers (what a registry stores) | {megabytes(compressed)} |
| the cache's image store on disk after these builds ({driver}) | {megabytes(store_bytes)} |

The test suite pays the cold cost once per machine (the base and the image, about the first two rows), then the
unchanged-rerun cost on each run, or the code-change cost after a change to the code.
"""
    print(body)
    if not options.no_write:
        name, title = (
            ("image", "Container image build")
            if driver == "vfs"
            else (f"image-{driver}", f"Container image build, {driver} storage")
        )
        print(f"written to {write_section(name, body, title=title)}")


if __name__ == "__main__":
    main()
