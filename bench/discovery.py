"""Fleet discovery benchmark: a large fake fleet on the local API server, discovered by `manage.py discover_fleet`.

    python bench/discovery.py                          # 1,000 nodes x 8 H100, 40 changes
    python bench/discovery.py --nodes 50 --no-write    # a quick look, docs left alone

What it does, in order:

1. PostgreSQL as bench/harness.py starts it (private, or a fresh database on DATABASE_URL's server) and the local
   Kubernetes control plane (deploy/control-plane.sh).
2. The fleet: N Ready nodes labelled as GPU feature discovery does, each with NVIDIA's DynamicMIG slices for
   8 H100 80GB (allocations/cluster/fake_fleet.py: 9 slices, about 450 kB, per node), and one pool whose node
   selector takes them.
3. Full sync: `manage.py discover_fleet --once` in a process of its own: wall time and peak RSS (the kernel's
   ru_maxrss of that process), and whether the database then holds every node and GPU.
4. Change -> database: `manage.py discover_fleet` runs (the long-lived process, watching); a series of changes is
   made through the API, one at a time, each kind in turn: a node relabelled out of the pool's selector, back in;
   a driver version changed in one GPU's slice; a node deleted; a node created with its slices. The latency of
   each is from the API call's return to the change being visible in the database (polled every 5 ms); p50, p99.
   The long-lived process's peak RSS (VmHWM) at the end.
5. A table on stdout, and the "discovery" section of docs/benchmarks.md (bench/report.py) unless --no-write.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GPU_MODEL = "NVIDIA H100 80GB HBM3"
OUT_LABEL = "bench.fatia.io/out"
TARGETS = {"sync_s": 60.0, "rss_mb": 300.0, "p99_s": 2.0}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def done(response: Any) -> None:
    """Read an unparsed response to the end (the connection goes back to the pool clean) and let it go."""
    response.drain_conn()
    response.release_conn()


def wait_until(what: str, probe: Callable[[str], bool], node: str, timeout: float, interval: float = 0.005) -> float:
    """Seconds until `probe(node)` holds (measured from now); fails after `timeout`."""
    started = time.perf_counter()
    while not probe(node):
        if time.perf_counter() - started > timeout:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:  # noqa: PLR0915 - one script, read top to bottom
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--changes", type=int, default=40, help="changes in the latency series (5 kinds, in turn)")
    parser.add_argument("--threads", type=int, default=8, help="API writers while the fleet is published")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(ROOT))
    from bench.harness import (
        install_cleanups,
        open_database,
        portal_settings,
        start_control_plane,
        stop_at_exit,
        temporary_dir,
    )
    from bench.report import command_line, write_section

    install_cleanups()
    command = command_line(["bench/discovery.py", *(argv if argv is not None else sys.argv[1:])])
    database_url = open_database()
    cp = start_control_plane()
    data_dir = temporary_dir("fatia-bench-data-")
    env = {
        **os.environ,
        **portal_settings(database_url=database_url, data_dir=data_dir),
        "PYTHONPATH": str(ROOT),
        "FATIA_CLUSTER_BACKEND": "kubernetes",
        "FATIA_KUBECONFIG": str(cp / "portal.kubeconfig"),
    }
    os.environ.update(env)
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.db import connection
    from kubernetes import client, config

    from allocations import services
    from allocations.cluster import fake_fleet
    from allocations.mig.catalog import load_catalog
    from allocations.models import Gpu, Node

    call_command("migrate", verbosity=0)
    admin = config.new_client_from_config(config_file=str(cp / "admin.kubeconfig"), persist_config=False)
    core = client.CoreV1Api(admin)
    resource_api = client.ResourceV1Api(admin)
    model = load_catalog().model(GPU_MODEL)
    labels = fake_fleet.gfd_labels(model, 8)
    names = [f"h100-{n:04d}" for n in range(args.nodes)]

    # 2. The fleet.
    fake_fleet.ensure_device_classes(admin)
    root = User.objects.create_user("bench-root", is_staff=True)
    pool = services.create_node_pool(
        name="H100 fleet",
        slug="h100",
        gpu_model=GPU_MODEL,
        node_selector=f"nvidia.com/gpu.product={labels['nvidia.com/gpu.product']},!{OUT_LABEL}",
        actor=root,
    )

    def publish(name: str) -> None:
        uid = fake_fleet.create_ready_node(admin, name, labels)
        # Any: the client accepts API JSON for any body, its annotations name only the model classes.
        bodies: list[Any] = fake_fleet.resource_slices(model, name, uid, 8)
        for body in bodies:
            done(resource_api.create_resource_slice(body=body, _preload_content=False))

    started = time.perf_counter()
    with ThreadPoolExecutor(args.threads) as pool_of_writers:
        list(pool_of_writers.map(publish, names))
    publish_s = time.perf_counter() - started
    print(f"published {args.nodes} nodes x 8 GPUs ({9 * args.nodes} slices) in {publish_s:.0f} s", flush=True)

    # 3. Full sync, in a process of its own.
    manage = [sys.executable, str(ROOT / "manage.py"), "discover_fleet"]
    started = time.perf_counter()
    once = subprocess.Popen([*manage, "--once"], env=env, cwd=ROOT)  # noqa: S603
    _, status, usage = os.wait4(once.pid, 0)
    sync_s = time.perf_counter() - started
    once.returncode = os.waitstatus_to_exitcode(status)
    if once.returncode != 0:
        raise SystemExit(f"discover_fleet --once failed ({once.returncode})")
    sync_rss_mb = usage.ru_maxrss / 1024  # KiB on Linux
    found = (
        Node.objects.filter(pool=pool).count(),
        Gpu.objects.filter(node__pool=pool).exclude(uuid="").exclude(figures=None).count(),
    )
    print(f"full sync: {sync_s:.1f} s, peak RSS {sync_rss_mb:.0f} MB; in the pool: {found[0]} nodes, {found[1]} GPUs")

    # 4. Change -> database, the long-lived process watching.
    follower = subprocess.Popen(  # noqa: S603
        manage, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    stop_at_exit(follower, timeout=30)
    connection.close()

    def node_row(name: str) -> tuple[int | None, str, str, int] | None:
        row = Node.objects.filter(name=name).values_list("pool_id", "state", "driver_version").first()
        if row is None:
            return None
        return (*row, Gpu.objects.filter(node__name=name).count())

    # The process's first writes are no-ops (the database has the fleet); wait until it follows the watches:
    # a first change made and seen, not counted.
    probe = names[0]
    core.patch_node(probe, body={"metadata": {"labels": {OUT_LABEL: "warmup"}}})
    wait_until("the process to follow the cluster", lambda n: (node_row(n) or (1,))[0] is None, probe, timeout=300)
    core.patch_node(probe, body={"metadata": {"labels": {OUT_LABEL: None}}})
    wait_until("the warm-up node to rejoin", lambda n: (node_row(n) or (None,))[0] == pool.pk, probe, timeout=60)

    def slice_of(name: str, gpu: int) -> Any:
        listed = resource_api.list_resource_slice(field_selector=f"spec.nodeName={name}")
        return next(s for s in listed.items if s.spec.devices and s.spec.devices[-1].name.startswith(f"gpu-{gpu}-"))

    latencies: dict[str, list[float]] = {"relabel out": [], "relabel in": [], "driver": [], "delete": [], "create": []}
    kinds = list(latencies)
    victims = iter(names[1:])
    created = iter(f"h100-new-{n:04d}" for n in range(args.changes))
    relabelled: list[str] = []
    for i in range(args.changes):
        kind = kinds[i % len(kinds)]
        if kind == "relabel out":
            name = next(victims)
            core.patch_node(name, body={"metadata": {"labels": {OUT_LABEL: "true"}}})
            relabelled.append(name)
            took = wait_until(kind, lambda n: (node_row(n) or (1,))[0] is None, name, timeout=30)
        elif kind == "relabel in":
            name = relabelled.pop()
            core.patch_node(name, body={"metadata": {"labels": {OUT_LABEL: None}}})
            took = wait_until(kind, lambda n: (node_row(n) or (None,))[0] == pool.pk, name, timeout=30)
        elif kind == "driver":
            name = next(victims)
            found_slice = slice_of(name, 3)
            devices = admin.sanitize_for_serialization(found_slice.spec.devices)
            for device in devices:
                device["attributes"]["driverVersion"] = {"version": "590.10.0"}
            response = resource_api.patch_resource_slice(
                found_slice.metadata.name,
                body={"spec": {"devices": devices}},
                _content_type="application/merge-patch+json",
                _preload_content=False,
            )
            done(response)
            took = wait_until(kind, lambda n: "590.10.0" in (node_row(n) or (0, "", "", 0))[2], name, timeout=30)
        elif kind == "delete":
            name = next(victims)
            core.delete_node(name)
            took = wait_until(kind, lambda n: (node_row(n) or (0, ""))[1] == Node.State.GONE, name, timeout=30)
        else:
            name = next(created)
            publish(name)  # the node, then its slices as the driver publishes them: complete once this returns
            took = wait_until(kind, lambda n: (node_row(n) or (0, "", "", 0))[3] == 8, name, timeout=30)
        latencies[kind].append(took)
        time.sleep(0.2)
    status_text = Path(f"/proc/{follower.pid}/status").read_text()
    follow_rss_mb = next(int(line.split()[1]) for line in status_text.splitlines() if line.startswith("VmHWM")) / 1024
    everything = [t for values in latencies.values() for t in values]
    p50, p99 = percentile(everything, 0.5), percentile(everything, 0.99)

    rows = [
        ("full sync (`discover_fleet --once`)", f"{sync_s:.1f} s", f"< {TARGETS['sync_s']:.0f} s"),
        ("peak RSS of that process", f"{sync_rss_mb:.0f} MB", f"< {TARGETS['rss_mb']:.0f} MB"),
        ("nodes and GPUs written", f"{found[0]} and {found[1]}", f"{args.nodes} and {8 * args.nodes}"),
        (f"change -> database, p50 ({len(everything)} changes)", f"{p50 * 1000:.0f} ms", ""),
        (f"change -> database, p99 ({len(everything)} changes)", f"{p99 * 1000:.0f} ms", f"< {TARGETS['p99_s']:.0f} s"),
        ("peak RSS of the long-lived process (VmHWM)", f"{follow_rss_mb:.0f} MB", f"< {TARGETS['rss_mb']:.0f} MB"),
    ]
    by_kind = [
        (kind, f"{percentile(values, 0.5) * 1000:.0f} ms", f"{max(values) * 1000:.0f} ms")
        for kind, values in latencies.items()
        if values
    ]
    table = "| measure | result | target |\n| --- | --- | --- |\n" + "\n".join(
        f"| {a} | {b} | {c} |" for a, b, c in rows
    )
    kinds_table = "| change | p50 | max |\n| --- | --- | --- |\n" + "\n".join(
        f"| {a} | {b} | {c} |" for a, b, c in by_kind
    )
    print(table)
    print(kinds_table)
    if not args.no_write:
        body = (
            f"`{command}`: {args.nodes} nodes x 8 H100 80GB of NVIDIA's DynamicMIG slices ({9 * args.nodes} slices) "
            f"published on the local API server in {publish_s:.0f} s, one pool whose node selector takes them, "
            "everything on one 2-core machine (API server, etcd, PostgreSQL, the discovery process).\n\n"
            f"{table}\n\nChange -> database by kind (from the API call's return to the row in PostgreSQL; a new node "
            "from its last slice's creation to its 8 GPUs written):\n\n"
            f"{kinds_table}\n\nThe dashboard's event stream reads the versions once a second "
            "(allocations/live.py), so a browser hears of a change at most about a second after the database has it."
        )
        write_section("discovery", body, title="Fleet discovery")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
