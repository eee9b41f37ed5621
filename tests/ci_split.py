"""Which test files each of deploy/test.sh's two pytest processes runs when it runs the whole suite (CI).

    python tests/ci_split.py main            # the paths the main process runs, one a line
    python tests/ci_split.py side            # the same for the side process
    python tests/ci_split.py --show          # the plan: every file's cost and process, each process's total
    python tests/ci_split.py --update J...   # rewrite tests/ci_costs.json from the junit files of a whole run

The rules:

1. SIDE (below) runs in the side process: tests/kube and tests/deploy, which share the run's one control plane (a
   second plane would cost 20 to 60 s of start and half a gigabyte), and what balances the two processes by their
   measured cost, less the files in MAIN. Every other measured file runs in the main process.
2. A file without a measured cost (a new one) goes to the process with more slack: the one whose measured files
   (tests/ci_costs.json) add up to less, counting the side process's own start (SIDE_START_S). It counts as
   NEW_FILE_S there, so a handful of new files spread over both, and adding one moves no other file.

Rebalancing: deploy/test.sh writes each process's junit file to $FATIA_CACHE/junit/ on every whole run; after a CI
run on an idle machine, `--update $FATIA_CACHE/junit/*.xml` records the costs, `--show` prints each process's total,
and moving an entry into or out of SIDE (or MAIN) evens them out (the side process must not be the long pole: the
pytest step waits for it plus its start). Put the numbers in docs/benchmarks.md, "CI time".

Stdlib only: deploy/test.sh runs it before pytest.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET  # noqa: S405 (our own pytest's junit files)
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
COSTS = TESTS / "ci_costs.json"
# Run by the side process (rule 1): whole directories, or single files. Keep tests/kube and tests/deploy together.
SIDE = (
    "tests/kube",
    "tests/deploy",
    "tests/test_api_fuzz.py",
    "tests/browser",
    "tests/nodeagent/browser",
    # Session 14: measuring the sessions 12-13 files moved them to the main process (they ran on the side while
    # unmeasured), 1038 s against 921 s predicted; the dashboard's browser tests (48 s, on the side in session 8)
    # even it out again: 990 s against 969 s.
    "tests/dashboard/browser",
)
# Files inside SIDE's directories that run in the main process all the same (for the balance). By session 8's last
# CI run (idle machine: main 690 s, side 827 s), test_mobile (43 s) in the main process evens them out. Session 9 cut
# the endpoint matrix from 156 s to about 21 s (main) and the fuzz from 78 s to about 62 s (side), so test_words and
# test_api_docs (56 s) joined it (docs/benchmarks.md, "CI time"); that session's final run (idle: main 657 s, side
# 575 s) sent test_api_docs (24 s) back to the side. Session 10's run (loaded: main 1035 s, side 897 s) sent
# test_mobile (61 s) there too.
MAIN = ("tests/browser/test_words.py",)
# Only these must stay on the side (the control plane); the others are there for the balance.
CONTROL_PLANE_DIRS = ("tests/kube", "tests/deploy")
# What a file without a measured cost counts as (about the mean of the measured files' costs).
NEW_FILE_S = 5.0
# The side process starts after its own PostgreSQL and Redis and prepares its files and database first: the pytest
# step waits for it that much longer (840 s step, 826 s side process in session 7's final CI run).
SIDE_START_S = 14.0
PROCESSES = ("main", "side")


def test_files() -> list[str]:
    """Every test module pytest collects (testpaths = tests; test_*.py), as paths from the repository's root."""
    return sorted(str(path.relative_to(ROOT)) for path in TESTS.rglob("test_*.py") if "__pycache__" not in path.parts)


def under(path: str, entries: tuple[str, ...]) -> bool:
    return any(path == entry or path.startswith(f"{entry}/") for entry in entries)


def on_side(path: str) -> bool:
    return under(path, SIDE) and not under(path, MAIN)


def read_costs() -> dict[str, float]:
    if not COSTS.exists():
        return {}
    data = json.loads(COSTS.read_text())
    return {str(path): float(seconds) for path, seconds in data["seconds"].items()}


def plan(files: list[str], costs: dict[str, float]) -> tuple[dict[str, str], dict[str, float]]:
    """Each file's process and each process's expected seconds (rules 1 and 2)."""
    where = {path: "side" if on_side(path) else "main" for path in files if on_side(path) or path in costs}
    load = {"main": 0.0, "side": SIDE_START_S}
    for path, process in where.items():
        load[process] += costs.get(path, NEW_FILE_S)
    for path in sorted(path for path in files if path not in where):
        # The one with more slack; on a tie the main one (it starts first).
        process = min(PROCESSES, key=lambda name: (load[name], PROCESSES.index(name)))
        where[path] = process
        load[process] += NEW_FILE_S
    return where, load


def paths_for(process: str) -> list[str]:
    """The pytest arguments for `process`, in the order pytest would have run them (alphabetical), so that a
    process's tests keep their usual order: SIDE's directories as directories, every other file by itself."""
    where, _ = plan(test_files(), read_costs())
    chosen = [path for path, name in where.items() if name == process]
    if process == "side":
        whole = [entry for entry in SIDE if (ROOT / entry).is_dir() and not any(under(m, (entry,)) for m in MAIN)]
        chosen = [*whole, *(path for path in chosen if not any(path.startswith(f"{entry}/") for entry in whole))]
    return sorted(chosen)


def file_of(classname: str) -> str:
    """tests.kube.test_faults -> tests/kube/test_faults.py (a class inside the module is dropped)."""
    parts = classname.split(".")
    modules = [i for i, part in enumerate(parts) if part.startswith("test_")]
    return "/".join(parts[: modules[0] + 1]) + ".py" if modules else ""


def update(junits: list[Path]) -> None:
    seconds: dict[str, float] = {}
    for junit in junits:
        for case in ET.parse(junit).iter("testcase"):  # noqa: S314
            path = file_of(case.get("classname", ""))
            if path:
                seconds[path] = seconds.get(path, 0.0) + float(case.get("time", "0"))
    known = set(test_files())
    data = {
        "about": "seconds per test file (setup, call and teardown) in a whole run; tests/ci_split.py reads them",
        "from": [junit.name for junit in junits],
        "seconds": {path: round(seconds[path], 1) for path in sorted(seconds) if path in known},
    }
    COSTS.write_text(json.dumps(data, indent=1) + "\n")
    say(f"{len(data['seconds'])} files, {sum(seconds.values()):.0f} s, written to {COSTS.relative_to(ROOT)}")


def say(line: str) -> None:
    sys.stdout.write(f"{line}\n")


def show() -> None:
    costs = read_costs()
    where, load = plan(test_files(), costs)
    for path in sorted(where, key=lambda p: (where[p], -costs.get(p, NEW_FILE_S))):
        mark = "" if path in costs else " (new: not measured yet)"
        say(f"{where[path]:4}  {costs.get(path, NEW_FILE_S):7.1f}  {path}{mark}")
    say(" ".join(f"{name}: {load[name]:.0f} s" for name in PROCESSES))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("process", nargs="?", choices=PROCESSES)
    parser.add_argument("--show", action="store_true")
    parser.add_argument("--update", nargs="+", type=Path, metavar="JUNIT")
    options = parser.parse_args()
    if options.update:
        update(options.update)
    elif options.show:
        show()
    elif options.process:
        say("\n".join(paths_for(options.process)))
    else:
        parser.error("name a process (main or side), or give --show or --update")


if __name__ == "__main__":
    main()
