"""deploy/requirements.lock, what the image installs, against pyproject.toml's pins (issue 11).

The lock is made from pyproject.toml by one command (written in its header, and in docs/operations.md):

    uv pip compile --universal --python-version 3.11 --generate-hashes --no-strip-markers \
        --output-file deploy/requirements.lock pyproject.toml

(--universal: one lock for every CPython 3.11.x, e.g. redis needs async-timeout only before 3.11.3, and Debian
bookworm's Python is 3.11.2.)

A dependency added to, removed from or re-pinned in pyproject.toml without running it again fails here, naming
the package, before an image is built with the old lock.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "deploy" / "requirements.lock"
REGENERATE = (
    "uv pip compile --universal --python-version 3.11 --generate-hashes --no-strip-markers "
    "--output-file deploy/requirements.lock pyproject.toml"
)
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")


def normalize(name: str) -> str:
    """PEP 503: `Django`, `django_filter` and `django-filter` are one project each."""
    return re.sub(r"[-_.]+", "-", name).lower()


def project_pins() -> dict[str, str]:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = {}
    for requirement in dependencies:
        match = PIN.match(requirement.strip())
        assert match, f"pyproject.toml: {requirement!r} is not pinned with =="
        pins[normalize(match[1])] = match[2]
    return pins


def lock_entries() -> dict[str, tuple[str, bool, int]]:
    """name -> (version, whether pyproject.toml asks for it directly, how many hashes)."""
    entries: dict[str, tuple[str, bool, int]] = {}
    current = ""
    for line in LOCK.read_text().splitlines():
        match = PIN.match(line)
        if match:
            current = normalize(match[1])
            entries[current] = (match[2], False, 0)
        elif current and line.strip().startswith("--hash=sha256:"):
            version, direct, hashes = entries[current]
            entries[current] = (version, direct, hashes + 1)
        elif current and "fatia (pyproject.toml)" in line:
            version, _, hashes = entries[current]
            entries[current] = (version, True, hashes)
    return entries


def test_the_lock_pins_what_pyproject_pins_and_nothing_else_directly() -> None:
    # given
    pins = project_pins()
    locked = lock_entries()
    # then: every pin of pyproject.toml at the same version
    stale = {
        name: (version, locked[name][0] if name in locked else None)
        for name, version in pins.items()
        if name not in locked or locked[name][0] != version
    }
    assert stale == {}, f"deploy/requirements.lock is stale (pyproject, lock): {stale}; regenerate: {REGENERATE}"
    # and nothing the lock still holds for a dependency pyproject.toml has dropped
    direct = {name for name, (_, is_direct, _) in locked.items() if is_direct}
    assert direct == set(pins), f"only in the lock: {sorted(direct - set(pins))}; regenerate: {REGENERATE}"


def test_every_locked_package_is_pinned_with_hashes() -> None:
    locked = lock_entries()
    assert len(locked) > len(project_pins())  # the transitive dependencies are locked as well
    assert [name for name, (_, _, hashes) in locked.items() if hashes == 0] == []


def test_the_lock_names_no_index_or_local_path() -> None:
    # the lock is committed: no index, mirror or path of the machine that made it
    text = LOCK.read_text()
    assert [
        line for line in text.splitlines() if line.startswith(("-i", "--index", "--extra-index", "-f", "--find"))
    ] == []
    assert "/root" not in text
    assert "/home" not in text
    assert REGENERATE in text
