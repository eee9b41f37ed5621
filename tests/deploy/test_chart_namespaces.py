"""The chart's side of tenant namespaces (issue 17): the claim admission policy, the same as the control plane's,
with the release's ServiceAccount; the per-namespace ClusterRole; the settings the portal binds with."""

from __future__ import annotations

from pathlib import Path

import yaml

from allocations.cluster.permissions import MEMBER_WORKLOAD_RULES
from tests.deploy.test_chart import by_kind, render
from tests.kube.conftest import ROOT

CONTROL_PLANE_POLICY = ROOT / "deploy" / "control-plane" / "claim-admission-policy.yaml"


def _local() -> dict[str, dict]:
    docs = [d for d in yaml.safe_load_all(CONTROL_PLANE_POLICY.read_text()) if d]
    return {d["kind"]: d for d in docs}


def test_the_chart_renders_the_claim_policy_for_its_own_service_account(helm: Path) -> None:
    # given: the Kubernetes render in namespace "fatia"
    docs = render(helm, "kubernetes")
    policies = by_kind(docs, "ValidatingAdmissionPolicy")
    bindings = by_kind(docs, "ValidatingAdmissionPolicyBinding")
    # then: one policy and its binding, deny, scoped to the namespaces the portal manages
    assert sorted(policies) == ["fatia-nvidia-claims-fatia"]
    binding = bindings["fatia-nvidia-claims-fatia"]
    assert binding["spec"]["policyName"] == "fatia-nvidia-claims-fatia"
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {"matchLabels": {"fatia.io/managed": "true"}}
    # and: the same rules as the policy the control-plane tests prove, but for the release's cluster ServiceAccount
    spec = policies["fatia-nvidia-claims-fatia"]["spec"]
    local = _local()["ValidatingAdmissionPolicy"]["spec"]
    expected = yaml.safe_dump(local).replace(
        "system:serviceaccount:fatia-system:fatia-portal", "system:serviceaccount:fatia:fatia-cluster"
    )
    assert yaml.safe_dump(spec) == expected
    assert _local()["ValidatingAdmissionPolicyBinding"]["spec"]["matchResources"] == binding["spec"]["matchResources"]


def test_the_claim_policy_can_be_switched_off(helm: Path) -> None:
    docs = render(helm, "kubernetes", "fatia", "claimAdmissionPolicy.enabled=false")
    assert by_kind(docs, "ValidatingAdmissionPolicy") == {}
    assert by_kind(docs, "ValidatingAdmissionPolicyBinding") == {}


def test_the_portal_is_told_its_identity_and_the_namespace_role(helm: Path) -> None:
    # given: the Kubernetes render
    docs = render(helm, "kubernetes")
    config = by_kind(docs, "ConfigMap")["fatia"]["data"]
    # then: the ServiceAccount the RoleBindings bind, and a ClusterRole of claim and pod verbs only, bound nowhere
    assert config["FATIA_KUBE_PORTAL_SERVICE_ACCOUNT"] == "fatia:fatia-cluster"
    role = by_kind(docs, "ClusterRole")[config["FATIA_KUBE_NAMESPACE_ROLE"]]
    assert {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]} == {
        ("resource.k8s.io", "resourceclaims"),
        ("", "pods"),
    }
    bound = [b["roleRef"]["name"] for b in by_kind(docs, "ClusterRoleBinding").values()]
    assert config["FATIA_KUBE_NAMESPACE_ROLE"] not in bound
    # and the members' workload ClusterRole: the code's rules, bound nowhere, the one the portal may bind
    member = by_kind(docs, "ClusterRole")[config["FATIA_KUBE_MEMBER_ROLE"]]
    assert member["rules"] == list(MEMBER_WORKLOAD_RULES)
    assert config["FATIA_KUBE_MEMBER_ROLE"] not in bound
    (bind,) = [r for r in by_kind(docs, "ClusterRole")["fatia-fatia"]["rules"] if r["verbs"] == ["bind"]]
    assert bind["resourceNames"] == [config["FATIA_KUBE_MEMBER_ROLE"]]
