"""A fake of the adapter's check_cluster functions (allocations/cluster/kube.py, section "check_cluster"), for
tests that need a report without a control plane: formatting, the admin page, the browser. It answers from its
fields and records each call; tests install it with `install(monkeypatch)`, which replaces those functions of
the `kube` module and nothing else."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from allocations.cluster import kube
from allocations.cluster.checks import NEEDED_RESOURCES, NVIDIA_DEVICE_CLASSES, OWNED_BINDINGS
from allocations.cluster.permissions import BASELINE, PORTAL_PERMISSIONS

FUNCTIONS = (
    "api_server_url",
    "read_server_version",
    "served_group_versions",
    "served_resource_v1_resources",
    "list_device_class_names",
    "list_node_names_with_label",
    "list_driver_slices",
    "who_am_i",
    "may_i",
    "review_rules",
    "list_tenant_namespaces",
    "list_labelled_namespaces",
    "list_portal_role_bindings",
    "list_portal_claims",
)

PORTAL = "system:serviceaccount:fatia-system:fatia-portal"


def node_slices(node: str, gpus: int = 2, *, mode: str = "dynamic", generation: int = 1) -> list[kube.SliceSummary]:
    """The slices NVIDIA's driver publishes for `node`, reduced as the adapter reduces them: a counters slice and
    one slice per GPU ("dynamic"), MIG devices that exist already ("static"), or DynamicMIG specs whose counters
    the API server dropped ("no-counters"), or full GPUs only ("no-mig")."""
    counters_slice = 1 if mode == "dynamic" else 0

    def devices(i: int) -> tuple[kube.SliceDevice, ...]:
        full = kube.SliceDevice(f"gpu-{i}", "gpu", mode == "dynamic", True, "580.95.5")
        if mode == "no-mig":
            return (full,)
        mig = tuple(
            kube.SliceDevice(f"gpu-{i}-mig-1g10gb-19-{start}", "mig", mode == "dynamic", mode == "static", "580.95.5")
            for start in range(7)
        )
        return mig if mode == "static" else (full, *mig)

    slices = [
        kube.SliceSummary(f"{node}-counters", node, node, generation, gpus + counters_slice, gpus, ())
    ] * counters_slice
    slices += [
        kube.SliceSummary(f"{node}-gpu-{i}", node, node, generation, gpus + counters_slice, 0, devices(i))
        for i in range(gpus)
    ]
    return slices


def portal_rules() -> tuple[kube.ResourceRule, ...]:
    """What a rules review shows for an account holding exactly the portal's ClusterRole."""
    baseline = tuple(kube.ResourceRule((g,), (r,), (v,)) for g, r, v in sorted(BASELINE))
    return baseline + tuple(kube.ResourceRule((p.group,), (p.resource,), p.verbs) for p in PORTAL_PERMISSIONS)


@dataclass
class FakeCluster:
    server: str = "https://kube.example.com:6443"
    version: str = "v1.37.2"
    kubeconfig_error: str = ""
    unreachable: str = ""
    group_versions: tuple[str, ...] = ("v1",)
    resources: tuple[str, ...] = (*NEEDED_RESOURCES, "resourceclaimtemplates")
    device_classes: tuple[str, ...] = NVIDIA_DEVICE_CLASSES
    gpu_nodes: tuple[str, ...] = ("gpu-a", "gpu-b")
    slices: list[kube.SliceSummary] = field(default_factory=lambda: node_slices("gpu-a") + node_slices("gpu-b"))
    identity: str = PORTAL
    denied: set[tuple[str, str, str]] = field(default_factory=set)
    rules: dict[str, tuple[kube.ResourceRule, ...]] = field(default_factory=dict)
    incomplete: bool = False
    namespaces: list[kube.NamespaceLabels] = field(default_factory=list)
    namespaces_error: kube.KubeError | None = None
    # Namespaces labelled fatia.io/tenant without the portal's prefix (tenants' own, issue 17).
    own_namespaces: list[kube.NamespaceLabels] = field(default_factory=list)
    # The portal's RoleBindings; None: every labelled namespace holds all of them.
    bindings: list[kube.NamedObject] | None = None
    claims: list[kube.NamedObject] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
        for name in FUNCTIONS:
            monkeypatch.setattr(kube, name, getattr(self, name))
        return self

    def api_server_url(self) -> str:
        self.calls.append("api_server_url")
        if self.kubeconfig_error:
            raise ImproperlyConfigured(self.kubeconfig_error)
        return self.server

    def read_server_version(self) -> kube.ServerVersion:
        self.calls.append("read_server_version")
        if self.unreachable:
            raise kube.KubeUnavailable(f"{self.server} is unreachable: {self.unreachable}")
        major, minor = self.version.removeprefix("v").split(".")[:2]
        return kube.ServerVersion(self.version, int(major), int(minor))

    def served_group_versions(self, group: str) -> tuple[str, ...]:
        self.calls.append(f"served_group_versions {group}")
        return self.group_versions

    def served_resource_v1_resources(self) -> tuple[str, ...]:
        self.calls.append("served_resource_v1_resources")
        return self.resources

    def list_device_class_names(self) -> tuple[str, ...]:
        self.calls.append("list_device_class_names")
        return tuple(sorted(self.device_classes))

    def list_node_names_with_label(self, label_selector: str) -> tuple[str, ...]:
        self.calls.append(f"list_node_names_with_label {label_selector}")
        return tuple(sorted(self.gpu_nodes))

    def list_driver_slices(self, driver: str) -> list[kube.SliceSummary]:
        self.calls.append(f"list_driver_slices {driver}")
        return list(self.slices)

    def who_am_i(self) -> str:
        self.calls.append("who_am_i")
        return self.identity

    def may_i(self, group: str, resource: str, verb: str, namespace: str = "", name: str = "") -> bool:
        self.calls.append(f"may_i {verb} {resource}")
        return (group, resource, verb) not in self.denied

    def review_rules(self, namespace: str) -> kube.RulesReview:
        self.calls.append(f"review_rules {namespace}")
        rules = portal_rules() + self.rules.get(namespace, ()) + self.rules.get("*", ())
        return kube.RulesReview(namespace, rules, self.incomplete, "webhook: no rules" if self.incomplete else "")

    def list_tenant_namespaces(self, prefix: str) -> list[kube.NamespaceLabels]:
        self.calls.append(f"list_tenant_namespaces {prefix}")
        if self.namespaces_error is not None:
            raise self.namespaces_error
        return [n for n in self.namespaces if n.name.startswith(prefix)]

    def list_labelled_namespaces(self) -> list[kube.NamespaceLabels]:
        self.calls.append("list_labelled_namespaces")
        if self.namespaces_error is not None:
            raise self.namespaces_error
        return sorted(self.namespaces + self.own_namespaces, key=lambda n: n.name)

    def list_portal_role_bindings(self) -> list[kube.NamedObject]:
        self.calls.append("list_portal_role_bindings")
        if self.bindings is not None:
            return list(self.bindings)
        return [
            kube.NamedObject(n.name, binding, n.labels.get(kube.LABEL_TENANT, ""))
            for n in self.namespaces + self.own_namespaces
            for binding in sorted(OWNED_BINDINGS)
        ]

    def list_portal_claims(self) -> list[kube.NamedObject]:
        self.calls.append("list_portal_claims")
        return list(self.claims)


@dataclass
class RefusingCluster:
    """Fails the test on any call: for pages that must not ask the cluster."""

    def install(self, monkeypatch: pytest.MonkeyPatch) -> RefusingCluster:
        for name in FUNCTIONS:
            monkeypatch.setattr(kube, name, self._refuse(name))
        return self

    @staticmethod
    def _refuse(name: str) -> Any:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError(f"kube.{name} was called")

        return refuse
