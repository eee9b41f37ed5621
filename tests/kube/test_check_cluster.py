"""`manage.py check_cluster` against a real control plane: a healthy cluster passes, then each problem is made
for real and seen.

These tests run on a control plane of their own (started once for the module), not the session's: they break
the cluster on purpose (DeviceClasses deleted, the portal's ClusterRole edited), and they need a cluster that is
whole to begin with, while the shared one carries other tests' leftovers (test_reconcile brings a node back
without its slices). Each test puts back what it broke.

The healthy cluster: NVIDIA's DeviceClasses, three GPU nodes of the fake fleet (DynamicMIG slices of three
models), the portal's RBAC as deploy/control-plane.sh applies it, and a tenant namespace onboarded through the
adapter.
"""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from kubernetes import client

from allocations.cluster import fake_fleet, kube
from allocations.cluster.checks import ENFORCE_LABEL, ClusterReport, Level, check_cluster
from allocations.mig.catalog import load_catalog
from tests.kube.conftest import ControlPlane, started_control_plane, wait_for
from tests.kube.fake_cluster import PORTAL
from tests.kube.test_check_cluster_units import ALL_OK

ROOT = Path(__file__).resolve().parents[2]
MODELS = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "NVIDIA B200")
PREFIX = "check-"
TENANT_NAMESPACE = f"{PREFIX}team-a"
# check_cluster reads the tenants' namespaces and requests (the tenant-namespaces check).
pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with started_control_plane(tmp_path_factory.mktemp("check-cluster")) as plane:
        admin = plane.api_client(plane.admin_kubeconfig)
        fake_fleet.ensure_device_classes(admin)
        catalog = load_catalog()
        for i, model in enumerate(MODELS):
            fake_fleet.publish_node(admin, catalog.model(model), f"gpu-node-{i}", 2)
        with override_settings(FATIA_KUBECONFIG=str(plane.portal_kubeconfig)):
            kube.ensure_tenant_namespace(
                kube.TenantSpec(
                    namespace=TENANT_NAMESPACE,
                    tenant_slug="team-a",
                    member_group="fatia:tenant:team-a",
                    max_devices=16,
                    member_role="fatia-tenant-member",
                )
            )
        # The Pod Security label, as the holder package's onboarding writes it (harmless once it does).
        client.CoreV1Api(admin).patch_namespace(
            TENANT_NAMESPACE, body={"metadata": {"labels": {ENFORCE_LABEL: "restricted"}}}
        )
        yield plane


@pytest.fixture
def admin(cluster: ControlPlane) -> client.ApiClient:
    return cluster.api_client(cluster.admin_kubeconfig)


@pytest.fixture(autouse=True)
def portal_settings(settings: Any, cluster: ControlPlane) -> None:
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    settings.FATIA_KUBECONFIG = str(cluster.portal_kubeconfig)
    settings.FATIA_KUBE_NAMESPACE_PREFIX = PREFIX


def levels(report: ClusterReport) -> dict[str, Level]:
    return {r.key: r.level for r in report.results}


def run_command(*args: str) -> tuple[str, CommandError | None]:
    """manage.py check_cluster in this process: its output, and the CommandError (exit 1) if it raised one."""
    out = StringIO()
    try:
        call_command("check_cluster", *args, stdout=out)
    except CommandError as exc:
        return out.getvalue(), exc
    return out.getvalue(), None


def check_lines(output: str) -> dict[str, str]:
    """The report's check lines by title, without the level's padding: {"API server": "OK ..."}."""
    lines = {}
    for line in output.splitlines()[2:]:
        level, _, rest = line.partition("  ")
        if level.strip() in ("OK", "WARN", "FAIL"):
            title, _, found = rest.strip().partition("  ")
            lines[title] = f"{level.strip()} {found.strip()}"
    return lines


# --- the portal's ClusterRole, edited and put back --------------------------------------------------------------


@pytest.fixture
def portal_role(admin: client.ApiClient) -> Iterator[Callable[[Callable[[list[dict[str, Any]]], None]], None]]:
    """edit(change) applies `change` to the rules of ClusterRole fatia-portal; the rules are put back after."""
    rbac = client.RbacAuthorizationV1Api(admin)
    original = admin.sanitize_for_serialization(rbac.read_cluster_role("fatia-portal"))["rules"]

    def edit(change: Callable[[list[dict[str, Any]]], None]) -> None:
        rules = copy.deepcopy(original)
        change(rules)
        rbac.patch_cluster_role("fatia-portal", body={"rules": rules})

    yield edit
    rbac.patch_cluster_role("fatia-portal", body={"rules": original})
    wait_for("the portal's role to be whole again", lambda: levels(check_cluster())["permissions"] == Level.OK)


# --- a healthy cluster ------------------------------------------------------------------------------------------


def test_a_healthy_cluster_passes_every_check_and_the_command_exits_0() -> None:
    # when
    report = check_cluster()
    output, error = run_command()

    # then
    assert levels(report) == ALL_OK
    assert error is None
    server = report.server
    assert check_lines(output) == {
        "Backend": "OK FATIA_CLUSTER_BACKEND is kubernetes.",
        "API server": f"OK {server} runs Kubernetes v1.37.2 (1.34 or later needed).",
        "resource.k8s.io/v1": "OK resource.k8s.io/v1 is served with resourceclaims, resourceslices, deviceclasses, "
        "devicetaintrules.",
        "NVIDIA DeviceClasses": "OK Present: gpu.nvidia.com, mig.nvidia.com, vfio.gpu.nvidia.com.",
        "Driver ResourceSlices": "OK 3 of 3 GPU nodes publish the driver's ResourceSlices (GPU driver 580.95.5).",
        "MIG mode": "OK 3 nodes DynamicMIG.",
        "Portal permissions": f"OK {PORTAL} may use all 51 verbs the portal uses on 12 resources, in every namespace.",
        "Extra permissions": "OK Nothing beyond what the portal needs (2 namespaces reviewed: fatia-system, "
        "check-team-a).",
        "Pod Security": "OK Every tenant namespace (1) enforces restricted.",
        "Tenant namespaces": "OK 1 namespace managed (0 owned by tenants): every one bound, no stray claim.",
        "Holder image": "OK FATIA_HOLDER_IMAGE registry.k8s.io/pause:3.10: registry registry.k8s.io, tag 3.10.",
    }
    assert output.splitlines()[-1] == "OK: 0 blocking problems, 0 warnings."


def test_the_json_report_says_the_same() -> None:
    # when
    output, error = run_command("--json")

    # then
    data = json.loads(output)
    assert error is None
    assert (data["level"], data["identity"]) == ("OK", PORTAL)
    assert {c["key"]: c["level"] for c in data["checks"]} == {k: str(v) for k, v in ALL_OK.items()}


# --- each problem, made for real ------------------------------------------------------------------------------------


def test_deleted_device_classes_fail_the_check(admin: client.ApiClient) -> None:
    # given
    resource = client.ResourceV1Api(admin)
    for body in fake_fleet.NVIDIA_DEVICE_CLASSES:
        resource.delete_device_class(body["metadata"]["name"])
    try:
        # when
        report = check_cluster()
        output, error = run_command()
    finally:
        fake_fleet.ensure_device_classes(admin)

    # then
    assert levels(report) == ALL_OK | {"device-classes": Level.FAIL}
    assert check_lines(output)["NVIDIA DeviceClasses"] == (
        "FAIL Missing: gpu.nvidia.com, mig.nvidia.com, vfio.gpu.nvidia.com. The portal's claims name mig.nvidia.com. "
        "-> Install NVIDIA's DRA driver for GPUs (its Helm chart installs the DeviceClasses)."
    )
    assert error is not None
    assert (error.returncode, str(error)) == (1, "the cluster is not ready for the portal: NVIDIA DeviceClasses failed")


def test_a_device_class_the_portal_does_not_use_missing_is_a_warning(admin: client.ApiClient) -> None:
    # given
    client.ResourceV1Api(admin).delete_device_class("vfio.gpu.nvidia.com")
    try:
        # when
        report = check_cluster()
        _, error = run_command()
    finally:
        fake_fleet.ensure_device_classes(admin)

    # then
    assert levels(report) == ALL_OK | {"device-classes": Level.WARN}
    assert error is None


def test_a_gpu_node_without_slices_is_a_warning_that_names_it(admin: client.ApiClient) -> None:
    """WARN, not FAIL: the portal places only where the driver publishes devices, so the node is only unused;
    and a driver restart or upgrade leaves a node without slices for a while on a healthy cluster."""
    # given: a node Node Feature Discovery found an NVIDIA PCI device on, but no driver slices (nor GFD labels)
    name = f"gpu-bare-{uuid.uuid4().hex[:6]}"
    fake_fleet.create_ready_node(admin, name, {"feature.node.kubernetes.io/pci-10de.present": "true"})
    try:
        # when
        report = check_cluster()
        output, error = run_command()
    finally:
        remove_node(admin, name)

    # then
    assert levels(report) == ALL_OK | {"driver-slices": Level.WARN}
    (slices,) = [r for r in report.results if r.key == "driver-slices"]
    assert (slices.found, slices.details) == (
        "3 of 4 GPU nodes publish the driver's ResourceSlices (GPU driver 580.95.5).",
        (f"No slices: {name}.",),
    )
    assert f"No slices: {name}." in output
    assert error is None


def publish_slices(admin: client.ApiClient, name: str, change: Callable[[list[dict[str, Any]]], None]) -> None:
    """A GPU node of the first model whose slices `change` rewrote before they were published."""
    model = load_catalog().model(MODELS[0])
    uid = fake_fleet.create_ready_node(admin, name, fake_fleet.gfd_labels(model, 2))
    bodies = fake_fleet.resource_slices(model, name, uid, 2)
    change(bodies)
    resource = client.ResourceV1Api(admin)
    for body in bodies:
        resource.create_resource_slice(body=body)


def without_counters(bodies: list[dict[str, Any]], *, static: bool) -> None:
    """What the API server keeps of DynamicMIG slices when DRAPartitionableDevices is off (no counters), or
    (static) what the driver publishes once mig-parted made seven 1g.10gb on each GPU: those MIG devices, each
    with its uuid, no counters, no full-GPU device."""
    del bodies[0]  # the counters-only slice
    for body in bodies:
        body["spec"]["pool"]["resourceSliceCount"] = len(bodies)
        devices = body["spec"]["devices"]
        if static:
            devices = [d for d in devices if d["attributes"].get("profile", {}).get("string") == "1g.10gb"]
            for device in devices:
                device["attributes"]["uuid"] = {"string": f"MIG-{uuid.uuid5(uuid.NAMESPACE_DNS, device['name'])}"}
        for device in devices:
            device.pop("consumesCounters")
        body["spec"]["devices"] = devices


def remove_node(admin: client.ApiClient, name: str) -> None:
    """The node and its slices at once (the garbage collector would take the slices only some time later)."""
    client.ResourceV1Api(admin).delete_collection_resource_slice(field_selector=f"spec.nodeName={name}")
    client.CoreV1Api(admin).delete_node(name)


def test_a_static_mig_node_passes_and_is_named(admin: client.ApiClient) -> None:
    # given
    name = f"gpu-static-{uuid.uuid4().hex[:6]}"
    publish_slices(admin, name, lambda bodies: without_counters(bodies, static=True))
    try:
        # when
        report = check_cluster()
    finally:
        remove_node(admin, name)

    # then
    assert levels(report) == ALL_OK
    (mig,) = [r for r in report.results if r.key == "mig"]
    assert (mig.found, mig.details) == (
        "3 nodes DynamicMIG, 1 node static MIG.",
        (f"Static MIG (only the MIG devices mig-parted made can be handed out): {name}.",),
    )


def test_dynamic_mig_devices_without_counters_fail(admin: client.ApiClient) -> None:
    # given: DynamicMIG specs as an API server with DRAPartitionableDevices off stores them
    name = f"gpu-nocounters-{uuid.uuid4().hex[:6]}"
    publish_slices(admin, name, lambda bodies: without_counters(bodies, static=False))
    try:
        # when
        report = check_cluster()
        _, error = run_command()
    finally:
        remove_node(admin, name)

    # then
    assert levels(report) == ALL_OK | {"mig": Level.FAIL}
    (mig,) = [r for r in report.results if r.key == "mig"]
    assert (mig.found, mig.details) == (
        "3 nodes DynamicMIG, 1 node MIG specs without counters.",
        (f"Without counters: {name}.",),
    )
    assert error is not None


def test_a_verb_missing_from_the_portal_role_fails_naming_it(portal_role: Any) -> None:
    # given: the portal may no longer delete pods
    def no_pod_delete(rules: list[dict[str, Any]]) -> None:
        (pods,) = [r for r in rules if r["resources"] == ["pods"]]
        pods["verbs"].remove("delete")

    portal_role(no_pod_delete)
    wait_for("the role change to be seen", lambda: not kube.may_i("", "pods", "delete"))

    # when
    report = check_cluster()
    output, error = run_command()

    # then
    assert levels(report) == ALL_OK | {"permissions": Level.FAIL}
    assert check_lines(output)["Portal permissions"] == (
        f"FAIL {PORTAL} may not: pods: delete. -> Grant them cluster-wide in the portal's ClusterRole; "
        "deploy/control-plane/portal-rbac.yaml lists exactly what it needs."
    )
    assert error is not None
    assert str(error) == "the cluster is not ready for the portal: Portal permissions failed"


def test_an_extra_verb_granted_is_a_warning_that_says_where(portal_role: Any, admin: client.ApiClient) -> None:
    # given: the portal may also read Secrets everywhere, and create ConfigMaps in a tenant namespace
    portal_role(lambda rules: rules.append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}))
    rbac = client.RbacAuthorizationV1Api(admin)
    meta = {"name": "extra", "namespace": TENANT_NAMESPACE}
    rbac.create_namespaced_role(
        TENANT_NAMESPACE,
        body={"metadata": meta, "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}]},
    )
    rbac.create_namespaced_role_binding(
        TENANT_NAMESPACE,
        body={
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "extra"},
            "subjects": [{"kind": "ServiceAccount", "name": "fatia-portal", "namespace": "fatia-system"}],
        },
    )
    try:
        wait_for("the grants to be seen", lambda: kube.may_i("", "configmaps", "create", TENANT_NAMESPACE))
        wait_for("the role change to be seen", lambda: kube.may_i("", "secrets", "list"))

        # when
        report = check_cluster()
        output, error = run_command()
    finally:
        rbac.delete_namespaced_role_binding("extra", TENANT_NAMESPACE)
        rbac.delete_namespaced_role("extra", TENANT_NAMESPACE)

    # then
    assert levels(report) == ALL_OK | {"extra-permissions": Level.WARN}
    (extra,) = [r for r in report.results if r.key == "extra-permissions"]
    assert (extra.found, extra.details) == (
        f"{PORTAL} may do 3 things the portal never does (2 namespaces reviewed: fatia-system, check-team-a).",
        ("secrets: get, list (in every namespace)", "configmaps: create (in check-team-a)"),
    )
    assert "configmaps: create (in check-team-a)" in output
    assert error is None


def test_a_tenant_namespace_without_the_pod_security_label_is_a_warning(admin: client.ApiClient) -> None:
    # given
    core = client.CoreV1Api(admin)
    core.patch_namespace(TENANT_NAMESPACE, body={"metadata": {"labels": {ENFORCE_LABEL: None}}})
    try:
        # when
        report = check_cluster()
    finally:
        core.patch_namespace(TENANT_NAMESPACE, body={"metadata": {"labels": {ENFORCE_LABEL: "restricted"}}})

    # then
    assert levels(report) == ALL_OK | {"pod-security": Level.WARN}
    (pod_security,) = [r for r in report.results if r.key == "pod-security"]
    assert (pod_security.found, pod_security.details) == (
        "1 of 1 tenant namespaces do not enforce restricted.",
        ("check-team-a: no label",),
    )


def test_a_holder_image_without_registry_is_a_warning(settings: Any) -> None:
    # given
    settings.FATIA_HOLDER_IMAGE = "pause:3.10"

    # when
    report = check_cluster()
    output, error = run_command()

    # then
    assert levels(report) == ALL_OK | {"holder-image": Level.WARN}
    assert check_lines(output)["Holder image"] == (
        "WARN FATIA_HOLDER_IMAGE pause:3.10 names no registry, so each node's container runtime picks one (or "
        "refuses it). -> Name it fully: registry/repository:tag or @sha256 digest (e.g. registry.k8s.io/pause:3.10, "
        "or its copy in your mirror)."
    )
    assert error is None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_api_server_fails_with_a_clear_message_and_no_traceback(
    cluster: ControlPlane, tmp_path: Path
) -> None:
    # given: the portal's kubeconfig with a port nothing listens on
    port = free_port()
    wrong = tmp_path / "wrong-port.kubeconfig"
    wrong.write_text(cluster.portal_kubeconfig.read_text().replace(cluster.server, f"https://127.0.0.1:{port}"))
    env = {**os.environ, "FATIA_CLUSTER_BACKEND": "kubernetes", "FATIA_KUBECONFIG": str(wrong)}

    # when: the real command, as an admin runs it
    run = subprocess.run(
        [sys.executable, "manage.py", "check_cluster"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    # then
    assert run.returncode == 1
    assert run.stderr == "CommandError: the cluster is not ready for the portal: API server failed\n"
    assert check_lines(run.stdout) == {
        "Backend": "OK FATIA_CLUSTER_BACKEND is kubernetes.",
        "API server": f"FAIL https://127.0.0.1:{port} is unreachable: Failed to establish a new connection: [Errno "
        f"111] Connection refused -> Check FATIA_KUBECONFIG (server https://127.0.0.1:{port}), that the API server "
        "runs, and that this host reaches it.",
        "Holder image": "OK FATIA_HOLDER_IMAGE registry.k8s.io/pause:3.10: registry registry.k8s.io, tag 3.10.",
    }
    assert "The other cluster checks did not run." in run.stdout
    assert "Traceback" not in run.stdout + run.stderr
