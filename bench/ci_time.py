"""CI time: where the test suite's minutes go, per test directory, against CI's budget (warm run under 15 minutes).

    python bench/ci_time.py                            # runs `bash deploy/test.sh` (every gate, the whole suite)
    python bench/ci_time.py tests/kube tests/deploy    # the same for some directories only
    python bench/ci_time.py --junit a.xml b.xml        # no run: sums junit files of runs made by hand
    python bench/ci_time.py --junit a.xml --before old.xml --no-write

What it does:

1. Unless --junit is given, runs deploy/test.sh (what `make test` and CI run) with `-q --junitxml`, its output in a
   temporary file, and keeps the script's own `== times: ... ==` line (the wall time of each step).
2. Adds up each test's setup, call and teardown per directory (a session or module fixture counts in the first
   test that uses it: the control plane's start, the image build); with --before, the same for an earlier run.
3. The 1-minute load average before and after: the machine this runs on is often shared, and every figure
   scales with the load (each directory's share is the steadier number).
4. A table on stdout, and the "ci-time" section of docs/benchmarks.md (bench/report.py) unless --no-write.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET  # noqa: S405 (our own pytest's junit files)
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.report import command_line, write_section  # noqa: E402

BUDGET_S = 15 * 60


@dataclass
class Run:
    # Counter would type the sums as int; a test's time is a float.
    seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    tests: Counter[str] = field(default_factory=Counter)
    failed: int = 0
    slowest: list[tuple[float, str]] = field(default_factory=list)

    @property
    def total(self) -> float:
        return sum(self.seconds.values())


def directory_of(classname: str) -> str:
    """tests.kube.test_faults -> tests/kube; tests.test_asgi -> tests (top level)."""
    parts = classname.split(".")
    modules = [i for i, part in enumerate(parts) if part.startswith("test_")]
    folder = parts[: modules[0]] if modules else parts
    return "/".join(folder) if len(folder) > 1 else "tests (top level)"


def read_junit(paths: list[Path]) -> Run:
    run = Run()
    for path in paths:
        for case in ET.parse(path).iter("testcase"):  # noqa: S314
            seconds = float(case.get("time", "0"))
            folder = directory_of(case.get("classname", ""))
            run.seconds[folder] += seconds
            run.tests[folder] += 1
            run.failed += sum(1 for child in case if child.tag in ("failure", "error"))
            run.slowest.append((seconds, f"{case.get('classname', '')}::{case.get('name', '')}"))
    run.slowest.sort(reverse=True)
    return run


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def run_suite(paths: list[str], junit: Path, log: Path) -> tuple[float, int, str]:
    """deploy/test.sh with every gate; (wall seconds, exit status, its `== times` line)."""
    env = {key: value for key, value in os.environ.items() if key != "FATIA_QUICK"}
    start = time.monotonic()
    with log.open("w") as out:
        done = subprocess.run(
            ["bash", "deploy/test.sh", *paths, "-q", f"--junitxml={junit}"],  # noqa: S607
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    wall = time.monotonic() - start
    times = re.findall(r"^== (times: .*) ==$", log.read_text(), re.M)
    return wall, done.returncode, times[-1] if times else "(no times line)"


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:04.1f} s"


def table(after: Run, before: Run | None) -> str:
    head = "| directory | tests | seconds | share |"
    rule = "| --- | ---: | ---: | ---: |"
    if before:
        head = "| directory | tests | before (s) | after (s) | share after |"
        rule = "| --- | ---: | ---: | ---: | ---: |"
    rows = [head, rule]
    for folder in sorted(set(after.seconds) | set(before.seconds if before else ())):
        share = f"{100 * after.seconds[folder] / after.total:.0f} %" if after.total else "-"
        if before:
            rows.append(
                f"| {folder} | {after.tests[folder]} | {before.seconds[folder]:.0f} | {after.seconds[folder]:.0f} "
                f"| {share} |"
            )
        else:
            rows.append(f"| {folder} | {after.tests[folder]} | {after.seconds[folder]:.0f} | {share} |")
    tests = sum(after.tests.values())
    if before:
        rows.append(f"| all | {tests} | {before.total:.0f} | {after.total:.0f} | 100 % |")
    else:
        rows.append(f"| all | {tests} | {after.total:.0f} | 100 % |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", help="test paths for deploy/test.sh (default: the whole suite)")
    parser.add_argument("--junit", nargs="+", type=Path, help="sum these junit files instead of running")
    parser.add_argument("--before", nargs="+", type=Path, help="junit files of an earlier run, for comparison")
    parser.add_argument("--note", type=Path, help="a file whose text goes under the table (how the runs were made)")
    parser.add_argument("--keep", type=Path, help="copy the run's junit file and output here (a folder)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    options = parser.parse_args()

    load_before = load()
    ran = ""
    if options.junit:
        after = read_junit(options.junit)
    else:
        with tempfile.TemporaryDirectory(prefix="fatia-ci-time-") as tmp:
            junit, log = Path(tmp) / "junit.xml", Path(tmp) / "test.log"
            wall, rc, times = run_suite(options.paths, junit, log)
            if not junit.exists():
                sys.exit(f"deploy/test.sh exited {rc} before pytest ran; the end of its output:\n"
                         f"{log.read_text()[-3000:]}")  # fmt: skip
            after = read_junit([junit])
            if options.keep:
                options.keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(junit, options.keep / "junit.xml")
                shutil.copy(log, options.keep / "test.log")
        ran = (
            f"\ndeploy/test.sh: {minutes(wall)} wall in all ({'under' if wall < BUDGET_S else 'OVER'} the "
            f"15-minute warm budget), exit status {rc}.\n\n`{times}`\n"
        )
    before = read_junit(options.before) if options.before else None
    slowest = "\n".join(f"| {name} | {seconds:.1f} |" for seconds, name in after.slowest[:12])
    note = f"\n{options.note.read_text().strip()}\n" if options.note else ""
    body = f"""`{command_line()}`; 1-minute load average {load_before} before, {load()} after.
{ran}{note}
Seconds per test directory: each test's setup, call and teardown added up (a session or module fixture counts in
the first test that uses it). {sum(after.tests.values())} tests, {after.failed} failed, {after.total:.0f} s in all.

{table(after, before)}

| slowest tests | s |
| --- | ---: |
{slowest}
"""
    print(body)
    if not options.no_write:
        print(f"written to {write_section('ci-time', body, title='CI time')}")


if __name__ == "__main__":
    main()
