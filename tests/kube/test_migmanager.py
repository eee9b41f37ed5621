"""MIG-manager mode on the local control plane: the mig-parted ConfigMap, the node label, and a fake MIG manager.

No GPU Operator runs here. `FakeMigManager` plays the part of NVIDIA's MIG manager on one node the way
shared/reference/dra-mig.md §4 describes it: it watches `nvidia.com/mig.config`, looks the named entry up in the
ConfigMap, sets `nvidia.com/mig.config.state` to `pending` and then to `success` or `failed` (with a Warning event
about the node saying why). The portal's side runs as the portal's ServiceAccount with the rights of
deploy/control-plane/mig-manager-rbac.yaml, applied for these tests and removed afterwards.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.utils import timezone
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from allocations.cluster import migmanager
from allocations.cluster import sync as kube_sync
from allocations.cluster.fake_fleet import create_ready_node
from allocations.cluster.permissions import MIG_MANAGER_PERMISSIONS
from allocations.mig.catalog import load_catalog
from allocations.mig.migparted import CONFIG_KEY, InvalidManagerLayout
from tests.conftest import H100, World
from tests.kube.conftest import GFD_LABELS, ControlPlane, wait_for

RBAC = Path(__file__).resolve().parents[2] / "deploy" / "control-plane" / "mig-manager-rbac.yaml"
MANAGER_NAMESPACE = "gpu-operator"
OPERATOR_CONFIG = """version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
"""
LAYOUT = {0: {"3g.40gb": 2}, 1: {"1g.10gb": 7}}


def model() -> Any:
    return load_catalog().model(H100)


# --- the rights ------------------------------------------------------------------------------------------------


def test_the_rbac_manifest_grants_exactly_the_mig_manager_permissions() -> None:
    # given
    documents = list(yaml.safe_load_all(RBAC.read_text()))
    # when: each rule spread into (group, resource, verb, where)
    granted = sorted(
        (group, resource, verb, doc["metadata"].get("namespace", "*"))
        for doc in documents
        if doc["kind"] in ("Role", "ClusterRole")
        for rule in doc["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    )
    # then: the manager's namespace stands for "" in the list
    expected = sorted(
        (p.group, p.resource, verb, p.namespace or MANAGER_NAMESPACE)
        for p in MIG_MANAGER_PERMISSIONS
        for verb in p.verbs
    )
    assert granted == expected
    assert [p.why for p in MIG_MANAGER_PERMISSIONS if not p.why] == []


@pytest.fixture(scope="module")
def mig_manager_rights(admin: client.ApiClient, portal: client.ApiClient) -> Iterator[None]:
    """deploy/control-plane/mig-manager-rbac.yaml applied (and its namespace made), removed at the end."""
    core = client.CoreV1Api(admin)
    rbac = client.RbacAuthorizationV1Api(admin)
    try:
        core.create_namespace(body={"metadata": {"name": MANAGER_NAMESPACE}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    documents = list(yaml.safe_load_all(RBAC.read_text()))
    create: dict[str, Callable[[dict[str, Any]], Any]] = {
        "Role": lambda d: rbac.create_namespaced_role(d["metadata"]["namespace"], d),
        "RoleBinding": lambda d: rbac.create_namespaced_role_binding(d["metadata"]["namespace"], d),
        "ClusterRole": lambda d: rbac.create_cluster_role(d),
        "ClusterRoleBinding": lambda d: rbac.create_cluster_role_binding(d),
    }
    delete: dict[str, Callable[[dict[str, Any]], Any]] = {
        "Role": lambda d: rbac.delete_namespaced_role(d["metadata"]["name"], d["metadata"]["namespace"]),
        "RoleBinding": lambda d: rbac.delete_namespaced_role_binding(d["metadata"]["name"], d["metadata"]["namespace"]),
        "ClusterRole": lambda d: rbac.delete_cluster_role(d["metadata"]["name"]),
        "ClusterRoleBinding": lambda d: rbac.delete_cluster_role_binding(d["metadata"]["name"]),
    }
    for doc in documents:
        create[doc["kind"]](doc)
    auth = client.AuthorizationV1Api(portal)

    def allowed(verb: str, resource: str, namespace: str) -> bool:
        attrs = {"verb": verb, "resource": resource, "namespace": namespace}
        review = auth.create_self_subject_access_review(body={"spec": {"resourceAttributes": attrs}})
        return bool(review.status.allowed)

    # The authorizer sees new bindings through its informers, a moment after they are stored.
    wait_for(
        "the MIG-manager rights",
        lambda: allowed("patch", "nodes", "") and allowed("patch", "configmaps", MANAGER_NAMESPACE),
    )
    try:
        yield
    finally:
        for doc in reversed(documents):
            delete[doc["kind"]](doc)


@pytest.fixture
def manager_env(mig_manager_rights: None, control_plane: ControlPlane, settings: Any) -> Callable[[], tuple[str, str]]:
    """The portal's identity, a ConfigMap name of this test's own; makes Ready nodes with GFD's labels."""
    settings.FATIA_KUBECONFIG = str(control_plane.portal_kubeconfig)
    settings.FATIA_MIG_MANAGER_NAMESPACE = MANAGER_NAMESPACE
    settings.FATIA_MIG_MANAGER_CONFIGMAP = f"mig-parted-{uuid.uuid4().hex[:8]}"
    settings.FATIA_MIG_MANAGER_TIMEOUT_S = 900

    def make() -> tuple[str, str]:
        return settings.FATIA_MIG_MANAGER_CONFIGMAP, f"mig-node-{uuid.uuid4().hex[:8]}"

    return make


def operator_configmap(admin: client.ApiClient, name: str) -> None:
    """What the GPU Operator installs: its stock entries, and a key of someone else's."""
    body = {"metadata": {"name": name}, "data": {CONFIG_KEY: OPERATOR_CONFIG, "notes.txt": "kept"}}
    client.CoreV1Api(admin).create_namespaced_config_map(MANAGER_NAMESPACE, body)


def config_of(admin: client.ApiClient, name: str) -> tuple[dict[str, Any], dict[str, str], str]:
    found = client.CoreV1Api(admin).read_namespaced_config_map(name, MANAGER_NAMESPACE)
    return yaml.safe_load(found.data[CONFIG_KEY]), found.data, found.metadata.resource_version


def labels_of(admin: client.ApiClient, node: str) -> dict[str, str]:
    return dict(client.CoreV1Api(admin).read_node(node).metadata.labels or {})


# --- the ConfigMap and the label ------------------------------------------------------------------------------------


def test_the_config_joins_the_operators_entries_and_the_node_points_at_it(
    admin: client.ApiClient, manager_env: Callable[[], tuple[str, str]]
) -> None:
    # given the operator's ConfigMap and a node the operator had set to all-disabled, successfully
    configmap, node = manager_env()
    operator_configmap(admin, configmap)
    create_ready_node(
        admin, node, {**GFD_LABELS, migmanager.CONFIG_LABEL: "all-disabled", migmanager.STATE_LABEL: "success"}
    )

    # when
    name = migmanager.apply_manager_layout(node_name=node, layout=LAYOUT, model=model())

    # then: Fatia's entry next to the operator's, the other key untouched
    config, data, _ = config_of(admin, configmap)
    assert sorted(config["mig-configs"]) == sorted(["all-disabled", "all-1g.10gb", name])
    assert config["mig-configs"][name] == [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        {"devices": [1], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
    ]
    assert data["notes.txt"] == "kept"
    # and the node names it, its stale state is gone, so the change reads as pending rather than the old success
    labels = labels_of(admin, node)
    assert labels[migmanager.CONFIG_LABEL] == name
    assert migmanager.STATE_LABEL not in labels
    assert labels["nvidia.com/gpu.product"] == GFD_LABELS["nvidia.com/gpu.product"]
    assert migmanager.manager_apply_state(node, name) == "pending"


def test_applying_the_same_layout_again_writes_nothing(
    admin: client.ApiClient, manager_env: Callable[[], tuple[str, str]]
) -> None:
    # given a layout applied once, and the manager done with it
    configmap, node = manager_env()
    operator_configmap(admin, configmap)
    create_ready_node(admin, node, GFD_LABELS)
    first = migmanager.apply_manager_layout(node_name=node, layout=LAYOUT, model=model())
    _, _, version = config_of(admin, configmap)
    client.CoreV1Api(admin).patch_node(node, {"metadata": {"labels": {migmanager.STATE_LABEL: "success"}}})
    node_version = client.CoreV1Api(admin).read_node(node).metadata.resource_version

    # when
    second = migmanager.apply_manager_layout(node_name=node, layout=LAYOUT, model=model())

    # then: same name, neither the ConfigMap nor the node was written, and the state still reads success
    assert second == first
    assert config_of(admin, configmap)[2] == version
    assert client.CoreV1Api(admin).read_node(node).metadata.resource_version == node_version
    assert migmanager.manager_apply_state(node, first) == "success"


def test_a_missing_configmap_is_created(admin: client.ApiClient, manager_env: Callable[[], tuple[str, str]]) -> None:
    # given no ConfigMap yet
    configmap, node = manager_env()
    create_ready_node(admin, node, GFD_LABELS)
    # when
    name = migmanager.apply_manager_layout(node_name=node, layout={0: {"7g.80gb": 1}}, model=model())
    # then
    config, _, _ = config_of(admin, configmap)
    assert config == {
        "version": "v1",
        "mig-configs": {name: [{"devices": [0], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}}]},
    }


def test_concurrent_writers_converge_and_nobodys_entry_is_lost(
    admin: client.ApiClient, manager_env: Callable[[], tuple[str, str]]
) -> None:
    # given six nodes, each with a layout of its own, and an admin who adds entries of their own at the same time
    configmap, _ = manager_env()
    operator_configmap(admin, configmap)
    layouts = [{0: {"1g.10gb": n}, 1: {"7g.80gb": 1}} for n in range(1, 7)]
    nodes = [manager_env()[1] for _ in layouts]
    for node in nodes:
        create_ready_node(admin, node, GFD_LABELS)
    names: dict[int, str] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(len(layouts) + 1)

    def portal_writer(k: int) -> None:
        try:
            start.wait()
            names[k] = migmanager.apply_manager_layout(node_name=nodes[k], layout=layouts[k], model=model())
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)

    def foreign_writer() -> None:
        # Read-modify-write with the resourceVersion, as kubectl edit does; retried on a conflict.
        core = client.CoreV1Api(admin)
        start.wait()
        for n in range(3):
            while True:
                found = core.read_namespaced_config_map(configmap, MANAGER_NAMESPACE)
                data = yaml.safe_load(found.data[CONFIG_KEY])
                data["mig-configs"][f"admin-{n}"] = [{"devices": "all", "mig-enabled": False}]
                found.data[CONFIG_KEY] = yaml.safe_dump(data)
                try:
                    core.replace_namespaced_config_map(configmap, MANAGER_NAMESPACE, found)
                    break
                except ApiException as exc:
                    if exc.status != 409:
                        raise

    threads = [threading.Thread(target=portal_writer, args=(k,)) for k in range(len(layouts))]
    threads.append(threading.Thread(target=foreign_writer))

    # when all write at once
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)

    # then every entry is there: the operator's, the admin's and each node's
    assert errors == []
    config, _, _ = config_of(admin, configmap)
    expected = {"all-disabled", "all-1g.10gb", "admin-0", "admin-1", "admin-2", *names.values()}
    assert set(config["mig-configs"]) == expected
    assert len(set(names.values())) == 6
    assert [labels_of(admin, nodes[k])[migmanager.CONFIG_LABEL] for k in range(6)] == [names[k] for k in range(6)]


def test_counts_that_cannot_be_packed_write_nothing(
    admin: client.ApiClient, manager_env: Callable[[], tuple[str, str]]
) -> None:
    # given
    configmap, node = manager_env()
    create_ready_node(admin, node, GFD_LABELS)
    # when
    with pytest.raises(InvalidManagerLayout) as caught:
        migmanager.apply_manager_layout(node_name=node, layout={0: {"4g.40gb": 1, "7g.80gb": 1}}, model=model())
    # then
    assert caught.value.problems == [
        "GPU 0: 1 x 4g.40gb + 1 x 7g.80gb cannot be packed on one NVIDIA H100 80GB HBM3 "
        "(11 compute slices; the GPU has 7)"
    ]
    with pytest.raises(ApiException) as missing:
        client.CoreV1Api(admin).read_namespaced_config_map(configmap, MANAGER_NAMESPACE)
    assert missing.value.status == 404
    assert migmanager.CONFIG_LABEL not in labels_of(admin, node)


def test_the_gpu_model_comes_from_the_nodes_pool(
    admin: client.ApiClient, manager_env: Callable[[], tuple[str, str]], world: World
) -> None:
    # given a node of the H100 pool
    configmap, node = manager_env()
    create_ready_node(admin, node, GFD_LABELS)
    kube_sync.register_cluster_node(pool_id=world.pool.pk, name=node, gpu_uuids=["GPU-0", "GPU-1"])
    # when no model is given
    name = migmanager.apply_manager_layout(node_name=node, layout={0: {"3g.40gb": 2}})
    # then the pool's H100 judged it (3g.40gb is an H100 profile) and the entry was written
    assert name in config_of(admin, configmap)[0]["mig-configs"]
    # and a node the portal does not know is refused
    with pytest.raises(migmanager.MigManagerError, match="no node named ghost-node in the portal"):
        migmanager.apply_manager_layout(node_name="ghost-node", layout={0: {"3g.40gb": 2}})


# --- following the manager ------------------------------------------------------------------------------------


class FakeMigManager(threading.Thread):
    """NVIDIA's MIG manager on one node, as far as the portal can see it: labels, and an event on failure."""

    def __init__(self, admin: client.ApiClient, node: str, configmap: str, *, fail_with: str = "") -> None:
        super().__init__(daemon=True)
        self.core = client.CoreV1Api(admin)
        self.node, self.configmap, self.fail_with = node, configmap, fail_with
        self.applied: list[dict[str, Any]] = []
        self.done = threading.Event()

    def label(self, state: str) -> None:
        self.core.patch_node(self.node, {"metadata": {"labels": {migmanager.STATE_LABEL: state}}})

    def run(self) -> None:
        try:
            name = wait_for(f"{migmanager.CONFIG_LABEL} on {self.node}", self._requested, timeout=60)
            self.label("pending")
            found = self.core.read_namespaced_config_map(self.configmap, MANAGER_NAMESPACE)
            self.applied = yaml.safe_load(found.data[CONFIG_KEY])["mig-configs"][name]
            if self.fail_with:
                self._warn(self.fail_with)
                self.label("failed")
            else:
                self.label("success")
        finally:
            self.done.set()

    def _requested(self) -> str | None:
        labels = self.core.read_node(self.node).metadata.labels or {}
        return labels.get(migmanager.CONFIG_LABEL) if migmanager.STATE_LABEL not in labels else None

    def _warn(self, message: str) -> None:
        now = timezone.now()
        self.core.create_namespaced_event(
            "default",
            {
                "metadata": {"generateName": f"{self.node}."},
                "involvedObject": {"kind": "Node", "name": self.node, "apiVersion": "v1"},
                "reason": "MigConfigFailed",
                "message": message,
                "type": "Warning",
                "source": {"component": "nvidia-mig-manager", "host": self.node},
                "firstTimestamp": now.isoformat(),
                "lastTimestamp": now.isoformat(),
                "count": 1,
            },
        )


def follow(node: str, name: str) -> list[str]:
    """The states the orchestration's step function reports until it stops answering pending."""
    seen: list[str] = []

    def step() -> bool:
        seen.append(migmanager.manager_apply_state(node, name))
        return seen[-1] != "pending"

    wait_for(f"the MIG manager on {node}", step, timeout=60, interval=0.05)
    return seen


def test_the_manager_applies_the_config_and_the_portal_follows_it_to_success(
    admin: client.ApiClient, manager_env: Callable[[], tuple[str, str]]
) -> None:
    # given a node under a fake MIG manager
    configmap, node = manager_env()
    operator_configmap(admin, configmap)
    create_ready_node(admin, node, GFD_LABELS)
    manager = FakeMigManager(admin, node, configmap)
    manager.start()

    # when the portal asks for a layout and follows the state
    name = migmanager.apply_manager_layout(node_name=node, layout=LAYOUT, model=model())
    seen = follow(node, name)

    # then the manager found the entry the label names, and the portal saw it through to success
    assert manager.done.wait(30)
    assert manager.applied == [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        {"devices": [1], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
    ]
    assert seen[-1] == "success"
    assert set(seen[:-1]) <= {"pending"}
    assert labels_of(admin, node)[migmanager.STATE_LABEL] == "success"


def test_a_failed_change_is_reported_with_the_managers_reason(
    admin: client.ApiClient, manager_env: Callable[[], tuple[str, str]]
) -> None:
    # given a fake MIG manager that fails, and says why in an event about the node
    configmap, node = manager_env()
    operator_configmap(admin, configmap)
    create_ready_node(admin, node, GFD_LABELS)
    manager = FakeMigManager(admin, node, configmap, fail_with="error applying MIG configuration: GPU 1 is in use")
    manager.start()

    # when
    name = migmanager.apply_manager_layout(node_name=node, layout=LAYOUT, model=model())
    seen = follow(node, name)

    # then
    assert manager.done.wait(30)
    assert seen[-1] == "failed"
    assert migmanager.manager_apply_status(node, name) == migmanager.ManagerApplyStatus(
        "failed", "nvidia-mig-manager: MigConfigFailed: error applying MIG configuration: GPU 1 is in use"
    )


def test_a_failure_without_an_event_still_says_where_to_look(
    admin: client.ApiClient, manager_env: Callable[[], tuple[str, str]]
) -> None:
    # given a change the manager failed without leaving an event
    configmap, node = manager_env()
    create_ready_node(admin, node, GFD_LABELS)
    name = migmanager.apply_manager_layout(node_name=node, layout={0: {"7g.80gb": 1}}, model=model())
    client.CoreV1Api(admin).patch_node(node, {"metadata": {"labels": {migmanager.STATE_LABEL: "failed"}}})
    # when / then
    assert migmanager.manager_apply_status(node, name) == migmanager.ManagerApplyStatus(
        "failed",
        f"the MIG manager set nvidia.com/mig.config.state=failed for {name} on {node} (its pod's log has the cause)",
    )


def test_a_change_pending_past_the_bound_fails_and_a_relabelled_node_fails(
    admin: client.ApiClient, manager_env: Callable[[], tuple[str, str]], settings: Any
) -> None:
    # given a change the manager has marked pending
    configmap, node = manager_env()
    create_ready_node(admin, node, GFD_LABELS)
    name = migmanager.apply_manager_layout(node_name=node, layout={0: {"7g.80gb": 1}}, model=model())
    client.CoreV1Api(admin).patch_node(node, {"metadata": {"labels": {migmanager.STATE_LABEL: "pending"}}})
    settings.FATIA_MIG_MANAGER_TIMEOUT_S = 600
    annotations = client.CoreV1Api(admin).read_node(node).metadata.annotations
    asked = datetime.fromisoformat(annotations[migmanager.REQUESTED_AT])

    # when / then: within the bound it waits, past it it has failed
    assert migmanager.manager_apply_status(node, name, now=asked + timedelta(seconds=600)).state == "pending"
    assert migmanager.manager_apply_status(
        node, name, now=asked + timedelta(seconds=601)
    ) == migmanager.ManagerApplyStatus(
        "failed",
        f"the MIG manager left {node} pending for more than 600 s after nvidia.com/mig.config={name}",
    )
    # and when someone points the node at another config, this change is over
    client.CoreV1Api(admin).patch_node(node, {"metadata": {"labels": {migmanager.CONFIG_LABEL: "all-disabled"}}})
    assert migmanager.manager_apply_status(node, name) == migmanager.ManagerApplyStatus(
        "failed", f"nvidia.com/mig.config on {node} is now all-disabled, not {name}"
    )
    assert migmanager.manager_apply_state("no-such-node", name) == "failed"
