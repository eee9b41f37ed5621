"""The chart's MIG-manager rights (migManager.enabled): the mode's permissions and nothing else, off by default."""

from __future__ import annotations

from pathlib import Path

from allocations.cluster.permissions import MIG_MANAGER_PERMISSIONS
from tests.deploy.test_chart import by_kind, render


def test_without_mig_manager_mode_the_chart_grants_none_of_its_rights(helm: Path) -> None:
    # given the default Kubernetes render
    docs = render(helm, "kubernetes")
    # then: the portal's ClusterRole, the members' workload role (bound per namespace only), and web's token reviewer
    # (the CI values run the node agent); no MIG-manager role
    assert sorted(by_kind(docs, "ClusterRole")) == [
        "fatia-fatia",
        "fatia-member-fatia",
        "fatia-namespace-fatia",
        "fatia-web-fatia",
    ]
    assert sorted(by_kind(docs, "Role")) == ["fatia-web"]
    assert not any(
        "mig-manager" in name for kind in ("Role", "RoleBinding", "ClusterRoleBinding") for name in by_kind(docs, kind)
    )
    config = by_kind(docs, "ConfigMap")["fatia"]
    assert config["data"]["FATIA_MIG_MANAGER_NAMESPACE"] == "gpu-operator"
    assert config["data"]["FATIA_MIG_MANAGER_CONFIGMAP"] == "default-mig-parted-config"
    assert config["data"]["FATIA_MIG_MANAGER_TIMEOUT_S"] == "900"


def test_mig_manager_mode_grants_exactly_its_permissions_to_the_cluster_service_account(helm: Path) -> None:
    # given the render with the mode on and the operator in a namespace of its own
    docs = render(helm, "kubernetes", "fatia", "migManager.enabled=true", "migManager.namespace=nvidia-gpu-operator")
    roles = [d for d in docs if d["kind"] in ("Role", "ClusterRole") and d["metadata"]["name"].endswith(
        ("-mig-manager", "-mig-manager-events")
    )]  # fmt: skip
    # when: each rule spread into (group, resource, verb, where)
    granted = sorted(
        (group, resource, verb, role["metadata"].get("namespace", "*"))
        for role in roles
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    )
    # then: MIG_MANAGER_PERMISSIONS, the manager's namespace where the list says ""
    assert granted == sorted(
        (p.group, p.resource, verb, p.namespace or "nvidia-gpu-operator")
        for p in MIG_MANAGER_PERMISSIONS
        for verb in p.verbs
    )
    # and each is bound to the cluster ServiceAccount, the one the worker runs as
    bindings = [
        d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding") and "mig-manager" in d["metadata"]["name"]
    ]
    assert len(bindings) == 3
    for binding in bindings:
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "fatia-cluster", "namespace": "fatia"}]
        assert binding["roleRef"]["name"] == binding["metadata"]["name"]
    config = by_kind(docs, "ConfigMap")["fatia"]
    assert config["data"]["FATIA_MIG_MANAGER_NAMESPACE"] == "nvidia-gpu-operator"
