"""A real Kubernetes control plane for the DRA tests, and helpers that play NVIDIA's DRA driver on it.

`control_plane` (session) builds the binaries when missing (deploy/build-control-plane.sh: about half an
hour the first time on 2 cores, a second afterwards), starts etcd, kube-apiserver, kube-scheduler and
kube-controller-manager on loopback (deploy/control-plane.sh) and stops them at the end of the run.

No kubelet runs. A test plays the parts a kubelet and the `gpu.nvidia.com` kubelet plugin would: `gpu_node`
writes a Ready Node with GPU feature discovery's labels and publishes the driver's ResourceSlices for it
(tests/kube/data, NVIDIA's format with DynamicMIG on). What is real is the API server's validation and the
scheduler's DRA allocator: a pod that references a claim gets a node, and the claim gets devices, exactly as
in a cluster. Each test takes nodes and namespaces of its own, so tests do not see each other's allocations.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from allocations import services
from allocations.cluster import sync as kube_sync
from allocations.cluster.fake_fleet import NVIDIA_DEVICE_CLASSES, create_ready_node, ensure_device_classes
from allocations.models import NodePool
from tests.conftest import H100, World

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "deploy" / "build-control-plane.sh"
CONTROL_PLANE_SCRIPT = ROOT / "deploy" / "control-plane.sh"
DATA = Path(__file__).parent / "data"
BASH = shutil.which("bash") or "/bin/bash"

DRIVER = "gpu.nvidia.com"
# The example driver output was written for this node; gpu_node renames it.
EXAMPLE_NODE = "gpu-node-1"
EXAMPLE_SLICES = DATA / "nvidia-dra-dynamic-mig-2x-h100-80gb.json"

T = TypeVar("T")


@dataclass(frozen=True)
class ControlPlane:
    dir: Path
    server: str
    bin_dir: Path
    admin_kubeconfig: Path
    portal_kubeconfig: Path

    def api_client(self, kubeconfig: Path) -> client.ApiClient:
        return config.new_client_from_config(config_file=str(kubeconfig), persist_config=False)

    def kubectl(self, *args: str) -> str:
        """kubectl as the admin, for what a test wants to show a person (describe, events)."""
        return subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.admin_kubeconfig}", *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} is missing)"


def _ensure_built(log: Path) -> None:
    if subprocess.run([BASH, str(BUILD_SCRIPT), "--check"], check=False).returncode == 0:
        return
    # First run on this machine: build from the Go module proxy (tens of minutes on 2 cores).
    with log.open("w") as out:
        build = subprocess.run(
            [BASH, str(BUILD_SCRIPT)], stdout=out, stderr=subprocess.STDOUT, check=False, timeout=3 * 3600
        )
    if build.returncode != 0:
        pytest.fail(f"deploy/build-control-plane.sh failed ({build.returncode}); the end of {log}:\n{_tail(log)}")


@contextmanager
def started_control_plane(work: Path) -> Iterator[ControlPlane]:
    """A control plane of its own under `work`, stopped (and its etcd data deleted) on leaving."""
    _ensure_built(work / "build.log")
    failures = []
    # A second try in a fresh folder: once in a few dozen starts on a loaded 2-core machine, etcd is gone before
    # its first log line (cause not found yet); a fresh start has always worked.
    for attempt in range(2):
        run_dir = work / f"control-plane-{attempt}"
        start = subprocess.run(
            [BASH, str(CONTROL_PLANE_SCRIPT), "start", str(run_dir), "--owner", str(os.getpid())],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        if start.returncode == 0:
            break
        subprocess.run([BASH, str(CONTROL_PLANE_SCRIPT), "stop", str(run_dir)], check=False, timeout=60)
        failures.append(f"deploy/control-plane.sh start failed ({start.returncode}):\n{start.stdout}\n{start.stderr}")
    else:
        pytest.fail("\n".join(failures))
    if failures:
        warnings.warn("the control plane started at the second try:\n" + "\n".join(failures), stacklevel=1)
    env = dict(line.split("=", 1) for line in (run_dir / "cluster.env").read_text().splitlines() if "=" in line)
    try:
        yield ControlPlane(
            dir=run_dir,
            server=env["FATIA_K8S_SERVER"],
            bin_dir=Path(env["FATIA_K8S_BIN"]),
            admin_kubeconfig=run_dir / "admin.kubeconfig",
            portal_kubeconfig=run_dir / "portal.kubeconfig",
        )
    finally:
        subprocess.run([BASH, str(CONTROL_PLANE_SCRIPT), "stop", str(run_dir)], check=False, timeout=60)
        shutil.rmtree(run_dir / "etcd", ignore_errors=True)


_SHARED_PLANE = pytest.StashKey[ControlPlane]()


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> ControlPlane:
    """The run's one control plane, for tests/kube and tests/deploy alike.

    Kept on the pytest config rather than in the fixture's own cache: a conftest that imports this fixture
    (tests/deploy does) defines it again, and each definition would otherwise start a plane of its own (20 to
    60 s and half a gigabyte each). It stops when the run ends. Tests share it the way they share the session
    plane within tests/kube: each takes nodes and namespaces of its own and removes cluster-wide objects it made.
    """
    plane = request.config.stash.get(_SHARED_PLANE, None)
    if plane is None:
        stack = ExitStack()
        plane = stack.enter_context(started_control_plane(tmp_path_factory.mktemp("kube")))
        request.config.stash[_SHARED_PLANE] = plane
        request.config.add_cleanup(stack.close)
    return plane


@pytest.fixture(scope="session")
def admin(control_plane: ControlPlane) -> client.ApiClient:
    """The cluster admin (client certificate in group system:masters): writes nodes, slices, classes."""
    return control_plane.api_client(control_plane.admin_kubeconfig)


@pytest.fixture(scope="session")
def portal(control_plane: ControlPlane) -> client.ApiClient:
    """The portal's identity: ServiceAccount fatia-system/fatia-portal (deploy/control-plane/portal-rbac.yaml)."""
    return control_plane.api_client(control_plane.portal_kubeconfig)


# --- waiting ------------------------------------------------------------------------------------------


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60.0, interval: float = 0.2) -> T:
    """Polls `probe` until it returns something other than None or False; fails with `what` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def as_json(api: client.ApiClient, obj: Any) -> dict[str, Any]:
    """The object as the API server's JSON (camelCase keys, no nulls), whatever model the client returned."""
    data = api.sanitize_for_serialization(obj)
    assert isinstance(data, dict)
    return data


# --- what NVIDIA's driver installs and publishes ------------------------------------------------------


@pytest.fixture(scope="session")
def nvidia_device_classes(admin: client.ApiClient) -> list[str]:
    # Applied, not created: on the shared plane another directory's tests may have installed them already.
    ensure_device_classes(admin)
    return [body["metadata"]["name"] for body in NVIDIA_DEVICE_CLASSES]


# The placeholder GPU UUIDs of the example, GPU 0 and GPU 1. gpu_node gives every node GPUs of its own, as
# real GPUs have, so that a selector on a GPU's UUID (the `parentUUID` of its MIG devices) means one GPU.
EXAMPLE_GPU_UUIDS = ("GPU-5f0e2a7c-3b1d-4c8e-9a61-0d2b7e4f9c13", "GPU-a81c4d92-6e07-4b3f-8d25-71c9e0b6a548")


def gpu_uuids_for(node: str) -> tuple[str, str]:
    gpu0, gpu1 = (f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'gpu{i}.{node}.fatia.test')}" for i in range(2))
    return gpu0, gpu1


def nvidia_slices_for(node: str, node_uid: str) -> list[dict[str, Any]]:
    """The example driver output for `node`: node, pool and GPU UUIDs renamed, owned by the real Node."""
    text = EXAMPLE_SLICES.read_text()
    for example, ours in zip(EXAMPLE_GPU_UUIDS, gpu_uuids_for(node), strict=True):
        assert text.count(example) > 1
        text = text.replace(example, ours)
    slices = []
    for body in json.loads(text):
        meta = body["metadata"]
        meta.pop("name")  # a placeholder: the driver sets generateName and lets the server pick
        meta["generateName"] = meta["generateName"].replace(EXAMPLE_NODE, node)
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}
        ]
        assert body["spec"]["nodeName"] == EXAMPLE_NODE and body["spec"]["pool"]["name"] == EXAMPLE_NODE
        body["spec"]["nodeName"] = node
        body["spec"]["pool"]["name"] = node
        slices.append(body)
    return slices


# What GPU feature discovery labels a node with two H100 80GB HBM3 (shared/reference/dra-mig.md §4).
GFD_LABELS = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.family": "hopper",
    "nvidia.com/gpu.count": "2",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/gpu.compute.major": "9",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mps.capable": "true",
    "nvidia.com/cuda.driver-version.full": "580.95.05",
}


@dataclass(frozen=True)
class GpuNode:
    name: str
    uid: str
    gpu_uuids: tuple[str, str]  # GPU 0 and GPU 1: the `uuid` of gpu-<i>, the `parentUUID` of its MIG devices
    slices: list[dict[str, Any]]  # the ResourceSlices as published (the bodies sent)
    slice_names: list[str]  # the names the server gave them


def _create_ready_node(api: client.ApiClient, name: str) -> str:
    return create_ready_node(api, name, GFD_LABELS)


@pytest.fixture
def gpu_node(admin: client.ApiClient, nvidia_device_classes: list[str]) -> Callable[..., GpuNode]:
    """Makes a Ready node with two H100s and publishes NVIDIA's DynamicMIG ResourceSlices for it."""

    def make(device_taints: dict[str, list[dict[str, Any]]] | None = None) -> GpuNode:
        """`device_taints` maps device names to the taints the driver puts on them (an unhealthy GPU, say)."""
        name = f"gpu-node-{uuid.uuid4().hex[:8]}"
        uid = _create_ready_node(admin, name)
        api = client.ResourceV1Api(admin)
        bodies = nvidia_slices_for(name, uid)
        taints = dict(device_taints or {})
        for body in bodies:
            for device in body["spec"].get("devices", []):
                if device["name"] in taints:
                    device["taints"] = taints.pop(device["name"])
        assert not taints, f"no such devices: {sorted(taints)}"
        names = [api.create_resource_slice(body=copy.deepcopy(body)).metadata.name for body in bodies]
        return GpuNode(name=name, uid=uid, gpu_uuids=gpu_uuids_for(name), slices=bodies, slice_names=names)

    return make


@pytest.fixture
def namespace(portal: client.ApiClient, admin: client.ApiClient) -> Callable[[str], str]:
    """Makes a namespace as the portal and waits for its default ServiceAccount, which every pod needs
    (the ServiceAccount admission plugin rejects a pod until kube-controller-manager has made it)."""

    def make(prefix: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        client.CoreV1Api(portal).create_namespace(body={"metadata": {"name": name}})
        core = client.CoreV1Api(admin)

        def service_account() -> bool:
            try:
                core.read_namespaced_service_account("default", name)
            except ApiException as exc:
                if exc.status == 404:
                    return False
                raise
            return True

        wait_for(f"ServiceAccount {name}/default", service_account, timeout=60)
        return name

    return make


# --- the portal on the control plane -----------------------------------------------------------------------


@dataclass
class KubeWorld:
    world: World
    pool: NodePool
    nodes: list[GpuNode]
    prefix: str

    def namespace(self, slug: str) -> str:
        return f"{self.prefix}{slug}"


@pytest.fixture(autouse=True)
def steer_slots(settings: Any) -> None:
    """Slots by the scheduler's first fit, as these tests were written (steering was off by default then);
    test_steering.py overrides this fixture and steers."""
    settings.FATIA_KUBE_STEER_SLOTS = "off"


@pytest.fixture
def kube_world(
    world: World, control_plane: ControlPlane, admin: client.ApiClient, gpu_node: Callable[..., GpuNode], settings: Any
) -> KubeWorld:
    """The Kubernetes backend on the test control plane, and a pool of one fake node with two H100s."""
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    settings.FATIA_KUBECONFIG = str(control_plane.portal_kubeconfig)
    settings.FATIA_KUBE_NAMESPACE_PREFIX = f"t{uuid.uuid4().hex[:6]}-"
    pool = services.create_node_pool(name="H100 on Kubernetes", slug="h100-kube", gpu_model=H100, actor=world.root)
    node = gpu_node()
    kube_sync.register_cluster_node(pool_id=pool.pk, name=node.name, gpu_uuids=list(node.gpu_uuids))
    for tenant in (world.tenant_a, world.tenant_b):
        services.set_tenant_quota(
            tenant_id=tenant.pk, pool_id=pool.pk, compute_slices_limit=14, memory_slices_limit=16, actor=world.root
        )
    kw = KubeWorld(world, pool, [node], settings.FATIA_KUBE_NAMESPACE_PREFIX)
    # What onboard_tenant_task does when a tenant is created: namespace, RBAC, quota. The pods of a new
    # namespace wait for its default ServiceAccount and the quota controller's first count (retryable).
    for tenant in (world.tenant_a, world.tenant_b):
        kube_sync.onboard_tenant(tenant_id=tenant.pk)
        ns = kw.namespace(tenant.slug)
        wait_for(f"namespace {ns} to be ready", partial(ready, admin, ns))
    return kw


def ready(admin: client.ApiClient, ns: str) -> bool:
    core = client.CoreV1Api(admin)
    accounts = core.list_namespaced_service_account(ns, field_selector="metadata.name=default").items
    quota = core.read_namespaced_resource_quota("fatia-devices", ns)
    return len(accounts) == 1 and quota.status is not None and quota.status.hard is not None
