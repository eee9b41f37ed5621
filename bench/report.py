"""Write one benchmark's results into its own section of docs/benchmarks.md.

Each benchmark owns the text between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`; rerunning one
benchmark replaces its section and leaves the others alone.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
HEADER = (
    "# Benchmarks\n\n"
    "Numbers measured by the scripts in `bench/`; each section says the command that produced it. Targets are "
    "checked here, never by timed assertions in tests.\n"
)


def machine_facts() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, {platform.system()}"


def postgres_version() -> str:
    try:
        out = subprocess.run(["postgres", "--version"], capture_output=True, text=True, check=False).stdout  # noqa: S607
    except OSError:
        return "unknown"
    return out.strip() or "unknown"


def command_line(argv: list[str] | None = None) -> str:
    """The command that ran a benchmark, without this machine's paths: paths inside the repository
    are shown relative to it, paths outside it by their last component."""
    repo = DOC.parent.parent
    shown = []
    for arg in argv if argv is not None else sys.argv:
        path = Path(arg)
        if path.is_absolute() or arg.startswith(".."):
            resolved = path.resolve()
            try:
                arg = resolved.relative_to(repo).as_posix()
            except ValueError:
                arg = f".../{resolved.name}"
        shown.append(arg)
    return " ".join(["python", *shown])


def write_section(name: str, body: str, *, title: str) -> Path:
    """Replace (or append) the section `name` of docs/benchmarks.md with `body`."""
    DOC.parent.mkdir(parents=True, exist_ok=True)
    text = DOC.read_text() if DOC.exists() else HEADER
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    section = (
        f"<!-- bench:{name} -->\n## {title}\n\n"
        f"Measured {stamp} on {machine_facts()}.\n\n{body.strip()}\n<!-- /bench:{name} -->"
    )
    pattern = re.compile(rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->", re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else f"{text.rstrip()}\n\n{section}\n"
    DOC.write_text(text)
    return DOC


def publish(lines: list[str], *, out: Path | None, heading: str, name: str, title: str) -> Path:
    """A report of Markdown `lines`: to `out` as a file of its own under `# heading`, or, without `out`, as the
    section `name` of docs/benchmarks.md. Says where it went; returns the path."""
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(f"# {heading}\n\n" + "\n".join(lines) + "\n", encoding="utf-8")
        path = out
    else:
        path = write_section(name, "\n".join(lines), title=title)
    print(f"wrote {path}")
    return path
