"""Agent bootstrap benchmark: how fast the portal trades agent pods' ServiceAccount tokens for node credentials, as a
DaemonSet rollout on a whole fleet asks it to at once.

    python bench/agent_bootstrap.py                       # 200 nodes, 1 and 8 at a time; writes docs/benchmarks.md
    python bench/agent_bootstrap.py --nodes 50 --no-write

1. A private PostgreSQL (as bench/harness.py starts one, or a fresh database on DATABASE_URL) and the local Kubernetes
   control plane (deploy/control-plane.sh); the portal's settings as the chart sets them with agent.enabled.
2. N Ready nodes with GPU feature discovery's labels, each registered in the portal; the agents' ServiceAccount; one
   pod per node bound to it (no kubelet runs them) and a TokenRequest per pod, bound to it, audience fatia-agent
   (what the kubelet projects; timed apart, it is not the portal's work).
3. `bootstrap_agent_credential` (allocations/nodeagent/bootstrap.py) for every node: the TokenReview and the pod
   read as the portal's identity, then the credential's transaction. First one at a time, then from 8 threads (web
   workers answering at once); the second round rotates every credential the first issued. Latency per bootstrap
   (p50, p99) and bootstraps per second; the API server, etcd and PostgreSQL share the machine's cores with it.
4. A table on stdout, and the "agent-bootstrap" section of docs/benchmarks.md unless --no-write.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import (  # noqa: E402
    install_cleanups,
    log,
    open_database,
    portal_settings,
    start_control_plane,
    temporary_dir,
)
from bench.report import command_line, write_section  # noqa: E402

NAMESPACE = "fatia-agents"
ACCOUNT = "fatia-agent"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)

    install_cleanups()
    command = command_line(["bench/agent_bootstrap.py", *(argv if argv is not None else sys.argv[1:])])
    database_url = open_database()
    cp = start_control_plane()
    data_dir = temporary_dir("fatia-bench-data-")
    os.environ.update(
        {
            **portal_settings(database_url=database_url, data_dir=data_dir),
            "FATIA_CLUSTER_BACKEND": "kubernetes",
            "FATIA_KUBECONFIG": str(cp / "portal.kubeconfig"),
            "FATIA_AGENT_SERVICE_ACCOUNT": f"{NAMESPACE}:{ACCOUNT}",
        }
    )
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from kubernetes import client, config

    from allocations import services
    from allocations.cluster.fake_fleet import create_ready_node
    from allocations.nodeagent.bootstrap import bootstrap_agent_credential
    from allocations.nodeagent.models import AgentCredential

    call_command("migrate", verbosity=0)
    admin = config.new_client_from_config(config_file=str(cp / "admin.kubeconfig"), persist_config=False)
    core = client.CoreV1Api(admin)
    root = User.objects.create_user("root", is_staff=True)
    pool = services.create_node_pool(name="bench", slug="bench", gpu_model="NVIDIA H100 80GB HBM3", actor=root)
    # Any: the client accepts API JSON for any body, its annotations name only the model classes.
    namespace: Any = {"metadata": {"name": NAMESPACE}}
    account: Any = {"metadata": {"name": ACCOUNT}}
    core.create_namespace(body=namespace)
    core.create_namespaced_service_account(NAMESPACE, body=account)
    labels = {"nvidia.com/gpu.present": "true", "nvidia.com/mig.capable": "true"}
    nodes = [f"gpu-node-{n:04d}" for n in range(args.nodes)]
    log(f"{args.nodes} nodes, pods and tokens")
    pods: dict[str, tuple[str, str]] = {}
    for node in nodes:
        create_ready_node(admin, node, labels)
        services.register_node(pool_id=pool.pk, name=node, gpu_count=8, actor=root)
        body: Any = {
            "metadata": {"name": f"agent-{node}"},
            "spec": {
                "nodeName": node,
                "serviceAccountName": ACCOUNT,
                "automountServiceAccountToken": False,
                "containers": [{"name": "agent", "image": "registry.k8s.io/pause:3.10"}],
            },
        }
        pod = core.create_namespaced_pod(NAMESPACE, body=body)
        pods[node] = (str(getattr(pod.metadata, "name", "")), str(getattr(pod.metadata, "uid", "")))

    def token_for(node: str) -> str:
        name, uid = pods[node]
        spec = {
            "audiences": ["fatia-agent"],
            "expirationSeconds": 3600,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid},
        }
        request: Any = {"spec": spec}
        answer = core.create_namespaced_service_account_token(ACCOUNT, NAMESPACE, body=request)
        return str(getattr(answer.status, "token", ""))

    started = time.perf_counter()
    tokens = {node: token_for(node) for node in nodes}
    token_s = time.perf_counter() - started

    def bootstrap(node: str) -> float:
        # Each thread keeps its own database connection across calls, as a web worker does (CONN_MAX_AGE).
        t0 = time.perf_counter()
        bootstrap_agent_credential(node_name=node, token=tokens[node])
        return time.perf_counter() - t0

    load = os.getloadavg()[0]
    rows = []
    for label, threads in (("one at a time", 1), (f"{args.threads} at a time, rotating", args.threads)):
        log(label)
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=threads) as pool_:
            latencies = list(pool_.map(bootstrap, nodes))
        wall = time.perf_counter() - started
        rows.append((label, latencies, wall))
    active = AgentCredential.objects.filter(revoked_at__isnull=True).count()
    revoked = AgentCredential.objects.filter(revoked_at__isnull=False).count()
    assert (active, revoked) == (args.nodes, args.nodes), (active, revoked)  # noqa: S101 -- the bench's own check

    def ms(value: float) -> str:
        return f"{value * 1000:.1f} ms"

    table = [
        "| bootstraps | p50 | p99 | mean | per second |",
        "| --- | ---: | ---: | ---: | ---: |",
        *(
            f"| {args.nodes}, {label} | {ms(statistics.median(lat))} | {ms(percentile(lat, 0.99))} | "
            f"{ms(statistics.fmean(lat))} | {args.nodes / wall:.0f} |"
            for label, lat, wall in rows
        ),
    ]
    body = (
        f"`{command}`: the portal's side of agent bootstrap (`bootstrap_agent_credential`: a TokenReview and a pod "
        "read as the portal's identity on the local control plane, then the credential's transaction in PostgreSQL), "
        f"for {args.nodes} nodes, each with an agent pod bound to it and a pod-bound token of audience fatia-agent. "
        "The second round rotates every credential of the first (revokes it, issues a new one). In-process calls, "
        f"no HTTP; the API server, etcd and PostgreSQL share the cores (load average {load:.1f} when it started: "
        "other work on the machine too).\n\n"
        + "\n".join(table)
        + f"\n\nMinting the {args.nodes} tokens (TokenRequest, the kubelet's part in a cluster) took "
        f"{token_s:.1f} s. A DaemonSet rollout on 1,000 nodes therefore costs the portal about "
        f"{1000 / (args.nodes / rows[-1][2]):.0f} s of bootstrap work at {args.threads} at a time; the `anon` "
        "throttle (120 a minute per address) is the tighter bound unless FATIA_NUM_PROXIES lets it count per node "
        '(docs/operations.md, "Node agent").\n'
    )
    print(body)
    if not args.no_write:
        print(f"written to {write_section('agent-bootstrap', body, title='Node agent bootstrap (TokenReview)')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
