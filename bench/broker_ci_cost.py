"""What the RabbitMQ broker tests add to CI (issue 16): installing RabbitMQ and Erlang from Debian's packages into a
cache, cold and warm, starting and stopping the broker, and (with --junit) the time of each broker test.

    python bench/broker_ci_cost.py                         # install cold into a temporary cache, then warm; start/stop
    python bench/broker_ci_cost.py --junit a.xml b.xml     # and each test's time from pytest --junitxml files
    python bench/broker_ci_cost.py --no-write              # print only

Writes the "broker-ci-cost" section of docs/benchmarks.md unless --no-write. The machine is often shared: the
1-minute load average before and after is printed with the figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET  # noqa: S405 (our own pytest's junit file)
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.report import command_line, write_section  # noqa: E402
from tests.allocations.rabbitmq import INSTALL_SCRIPT, PrivateRabbitMQ  # noqa: E402

BASH = shutil.which("bash") or "/bin/bash"


def timed_install(cache: Path) -> float:
    start = time.monotonic()
    subprocess.run(
        [BASH, str(INSTALL_SCRIPT)], env={**os.environ, "FATIA_CACHE": str(cache)}, check=True, capture_output=True
    )
    return time.monotonic() - start


def broker_times(workdir: Path) -> tuple[float, float, float]:
    """Seconds to a listening broker (first boot), to stop it, and to boot it again on its data."""
    server = PrivateRabbitMQ(workdir)
    try:
        start = time.monotonic()
        server.start()
        first = time.monotonic() - start
        start = time.monotonic()
        server.stop()
        stop = time.monotonic() - start
        start = time.monotonic()
        server.start()
        again = time.monotonic() - start
    finally:
        server.close()
    return first, stop, again


def junit_times(path: Path) -> list[tuple[str, float]]:
    tree = ET.parse(path)  # noqa: S314 (our own file)
    cases = tree.iter("testcase")
    return [(f"{case.get('classname')}::{case.get('name')}", float(case.get("time", 0))) for case in cases]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--junit", type=Path, nargs="+", help="pytest --junitxml files of runs of the broker tests")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()

    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="broker-ci-cost.") as tmp:
        cache = Path(tmp) / "cache"
        cold = timed_install(cache)
        warm = timed_install(cache)
        (Path(tmp) / "node").mkdir()
        os.environ["FATIA_CACHE"] = str(cache)  # the broker below runs from this fresh cache
        first, stop, again = broker_times(Path(tmp) / "node")
    load_after = os.getloadavg()[0]

    lines = [
        "| step | seconds |",
        "| --- | ---: |",
        f"| install RabbitMQ + Erlang from Debian into an empty cache (download, unpack) | {cold:.1f} |",
        f"| the same, cache warm (one `apt-cache policy`) | {warm:.1f} |",
        f"| broker start to a listening AMQP port (first boot) | {first:.1f} |",
        f"| broker stop (SIGTERM, clean) | {stop:.1f} |",
        f"| broker start again on its data | {again:.1f} |",
    ]
    if args.junit:
        lines += ["", "| test | seconds |", "| --- | ---: |"]
        cases = [case for path in args.junit for case in junit_times(path)]
        lines += [f"| `{name}` | {seconds:.1f} |" for name, seconds in cases]
        lines.append(f"| **all of them** | **{sum(s for _, s in cases):.1f}** |")
    body = "\n".join(
        [
            f"`{command_line()}`",
            "",
            *lines,
            "",
            f"1-minute load average {load_before:.1f} before, {load_after:.1f} after (2 cores, shared).",
            "",
            "Where they run in CI: the RabbitMQ and visibility tests in deploy/test.sh's main pytest process "
            "(tests/allocations), the API-server outage test in the side process (tests/kube; its time includes "
            "the control plane's start when it is the first kube test, as in a run of it alone). The warm install "
            "is deploy/test.sh's `rabbitmq` step. Test times scale with the load: compare them with each other, "
            'and take CI\'s own figures from a run of the whole suite ("CI time").',
        ]
    )
    print(body)
    if not args.no_write:
        write_section("broker-ci-cost", body, title="Broker tests in CI: RabbitMQ with quorum queues")


if __name__ == "__main__":
    main()
