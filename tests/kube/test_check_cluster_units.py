"""check_cluster without a control plane: the decisions for findings a test cluster cannot show (an old
Kubernetes, an incomplete rules review, no GPU node at all), the holder image rules, the report's text and JSON,
and that the permission list, the RBAC manifest and the DeviceClass names agree. The adapter is faked at its
boundary (tests/kube/fake_cluster.py)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from allocations import services
from allocations.cluster import kube
from allocations.cluster.checks import (
    NVIDIA_DEVICE_CLASSES,
    CheckResult,
    ClusterReport,
    ImageReference,
    Level,
    check_cluster,
    format_report,
    parse_image_reference,
)
from allocations.cluster.fake_fleet import NVIDIA_DEVICE_CLASSES as FLEET_CLASSES
from allocations.cluster.permissions import MEMBER_WORKLOAD_RULES, PORTAL_PERMISSIONS, required_verbs
from allocations.services.tenant_namespaces import assign_namespace
from tenants.models import TenantNamespace
from tests.kube.fake_cluster import PORTAL, FakeCluster, node_slices

RBAC = Path(__file__).resolve().parents[2] / "deploy" / "control-plane" / "portal-rbac.yaml"
NOW = datetime(2026, 11, 30, 17, 0, 0, tzinfo=UTC)
ALL_OK = {
    "backend": Level.OK,
    "api": Level.OK,
    "resource-api": Level.OK,
    "device-classes": Level.OK,
    "driver-slices": Level.OK,
    "mig": Level.OK,
    "permissions": Level.OK,
    "extra-permissions": Level.OK,
    "pod-security": Level.OK,
    "tenant-namespaces": Level.OK,
    "holder-image": Level.OK,
}
# check_cluster reads the tenants' namespaces and requests (the tenant-namespaces check).
pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def kubernetes_backend(settings):
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    settings.FATIA_KUBE_NAMESPACE_PREFIX = "fatia-"


def levels(report: ClusterReport) -> dict[str, Level]:
    return {r.key: r.level for r in report.results}


def result(report: ClusterReport, key: str) -> CheckResult:
    (found,) = [r for r in report.results if r.key == key]
    return found


# --- one place for the permissions ---------------------------------------------------------------------------


def test_the_rbac_manifest_grants_exactly_the_permissions_the_code_lists():
    # given
    documents = list(yaml.safe_load_all(RBAC.read_text()))
    (role,) = [d for d in documents if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "fatia-portal"]

    # when
    granted = [
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    ]

    # then
    assert sorted(granted) == sorted(required_verbs())
    # 48, delete on roles and rolebindings (tenant namespaces), bind on the member ClusterRole (and on it only)
    assert len(granted) == len(set(granted)) == 51
    (bind,) = [rule for rule in role["rules"] if rule["verbs"] == ["bind"]]
    assert bind["resourceNames"] == ["fatia-tenant-member"]
    # and the member ClusterRole holds exactly the rules the code lists
    (member,) = [d for d in documents if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "fatia-tenant-member"]
    assert member["rules"] == list(MEMBER_WORKLOAD_RULES)


def test_the_checked_device_classes_are_those_the_fake_fleet_installs():
    assert sorted(NVIDIA_DEVICE_CLASSES) == sorted(c["metadata"]["name"] for c in FLEET_CLASSES)


def test_each_permission_says_why():
    assert [p.why for p in PORTAL_PERMISSIONS if not p.why] == []


# --- the cluster checks on findings a test control plane cannot make ------------------------------------------


def test_a_healthy_fake_cluster_is_all_ok(monkeypatch):
    # given
    fake = FakeCluster().install(monkeypatch)

    # when
    report = check_cluster(now=NOW)

    # then
    assert levels(report) == ALL_OK
    assert report.exit_code == 0
    assert (report.server, report.identity) == ("https://kube.example.com:6443", PORTAL)
    assert fake.calls.count("review_rules fatia-system") == 1


def test_kubernetes_older_than_1_34_fails_the_api_check(monkeypatch):
    # given
    FakeCluster(version="v1.33.4-gke.100", group_versions=("v1beta1", "v1beta2")).install(monkeypatch)

    # when
    report = check_cluster(now=NOW)

    # then
    api = result(report, "api")
    assert (api.level, api.found) == (
        Level.FAIL,
        "https://kube.example.com:6443 runs Kubernetes v1.33.4-gke.100; the portal needs 1.34 or later "
        "(resource.k8s.io/v1).",
    )
    assert result(report, "resource-api").found == "The API server serves v1beta1, v1beta2 of resource.k8s.io, not v1."
    assert report.exit_code == 1


def test_devicetaintrules_missing_from_resource_v1_fails_because_reconcile_lists_them(monkeypatch):
    # given: Kubernetes 1.36 serves DeviceTaintRule only in v1beta2
    FakeCluster(version="v1.36.2", resources=("resourceclaims", "resourceslices", "deviceclasses")).install(monkeypatch)

    # when
    report = check_cluster(now=NOW)

    # then
    check = result(report, "resource-api")
    assert (check.level, check.found) == (Level.FAIL, "resource.k8s.io/v1 is served without devicetaintrules.")


def test_an_unreachable_api_server_skips_the_other_cluster_checks(monkeypatch):
    # given
    fake = FakeCluster(unreachable="timed out").install(monkeypatch)

    # when
    report = check_cluster(now=NOW)

    # then
    assert levels(report) == {"backend": Level.OK, "api": Level.FAIL, "holder-image": Level.OK}
    assert result(report, "api").details == ("The other cluster checks did not run.",)
    assert fake.calls == ["api_server_url", "read_server_version"]


def test_no_gpu_node_at_all_fails(monkeypatch):
    # given
    FakeCluster(gpu_nodes=(), slices=[]).install(monkeypatch)

    # when
    report = check_cluster(now=NOW)

    # then
    assert (result(report, "driver-slices").level, result(report, "mig").level) == (Level.FAIL, Level.FAIL)
    assert result(report, "driver-slices").found == (
        "No GPU node: no node has a GPU label (nvidia.com/gpu.present=true, nvidia.com/gpu.count, "
        "feature.node.kubernetes.io/pci-10de.present=true) and gpu.nvidia.com publishes no ResourceSlices."
    )


def test_gpu_nodes_of_which_none_publishes_slices_fail(monkeypatch):
    # given
    FakeCluster(slices=[]).install(monkeypatch)

    # when
    check = result(check_cluster(now=NOW), "driver-slices")

    # then
    assert (check.level, check.found, check.details) == (
        Level.FAIL,
        "0 of 2 GPU nodes publish the driver's ResourceSlices.",
        ("No slices: gpu-a, gpu-b.",),
    )


def test_an_incomplete_pool_and_an_unlabelled_node_are_warnings(monkeypatch):
    # given: gpu-a's newest generation has one slice of three; gpu-c publishes but GFD did not label it
    slices = node_slices("gpu-a")[:1] + node_slices("gpu-a", generation=2)[:1] + node_slices("gpu-b")
    FakeCluster(slices=slices + node_slices("gpu-c")).install(monkeypatch)

    # when
    check = result(check_cluster(now=NOW), "driver-slices")

    # then
    assert (check.level, check.found, check.details) == (
        Level.WARN,
        "2 of 3 GPU nodes publish the driver's ResourceSlices (GPU driver 580.95.5).",
        (
            "Slices still being published (fewer than resourceSliceCount): gpu-a.",
            "Slices but no GPU labels (pools select nodes by GFD's labels): gpu-c.",
        ),
    )


def test_a_node_without_mig_devices_is_a_warning_and_static_mig_is_named(monkeypatch):
    # given
    FakeCluster(
        gpu_nodes=("gpu-a", "gpu-b", "gpu-c"),
        slices=node_slices("gpu-a") + node_slices("gpu-b", mode="static") + node_slices("gpu-c", mode="no-mig"),
    ).install(monkeypatch)

    # when
    check = result(check_cluster(now=NOW), "mig")

    # then
    assert (check.level, check.found, check.details) == (
        Level.WARN,
        "1 node DynamicMIG, 1 node static MIG, 1 node no MIG devices.",
        (
            "Static MIG (only the MIG devices mig-parted made can be handed out): gpu-b.",
            "No MIG devices (MIG off): gpu-c.",
        ),
    )


def test_an_incomplete_rules_review_is_a_warning(monkeypatch):
    # given
    FakeCluster(incomplete=True).install(monkeypatch)

    # when
    check = result(check_cluster(now=NOW), "extra-permissions")

    # then
    assert (check.level, check.found, check.details) == (
        Level.WARN,
        "Nothing extra among the rules listed (1 namespace reviewed: fatia-system), but the list is incomplete.",
        ("The authorizer could not list every rule, so more may be granted: fatia-system: webhook: no rules.",),
    )


def test_a_wildcard_grant_is_reported_as_extra(monkeypatch):
    # given: the portal runs as a cluster admin
    FakeCluster(rules={"*": (kube.ResourceRule(("*",), ("*",), ("*",)),)}).install(monkeypatch)

    # when
    check = result(check_cluster(now=NOW), "extra-permissions")

    # then
    assert (check.level, check.details) == (Level.WARN, ("*.*: * (in every namespace)",))


def test_tenant_namespaces_are_reviewed_and_an_unknown_pod_security_level_fails(monkeypatch, settings):
    # given
    settings.FATIA_TENANT_POD_SECURITY = "strict"
    namespaces = [kube.NamespaceLabels("fatia-team-a", {}), kube.NamespaceLabels("other-team", {})]
    fake = FakeCluster(namespaces=namespaces).install(monkeypatch)

    # when
    report = check_cluster(now=NOW)

    # then
    assert [c for c in fake.calls if c.startswith("review_rules")] == [
        "review_rules fatia-system",
        "review_rules fatia-team-a",
    ]
    check = result(report, "pod-security")
    assert (check.level, check.found) == (
        Level.FAIL,
        "FATIA_TENANT_POD_SECURITY is 'strict', not a Pod Security level.",
    )


def test_namespaces_the_portal_may_not_list_fail_the_pod_security_check_and_say_why(monkeypatch):
    # given
    refused = kube.KubeRejected('namespaces: namespaces is forbidden: User "x" cannot list resource', status=403)
    FakeCluster(namespaces_error=refused).install(monkeypatch)

    # when
    report = check_cluster(now=NOW)

    # then
    assert levels(report) == ALL_OK | {"pod-security": Level.FAIL, "tenant-namespaces": Level.FAIL}
    check = result(report, "pod-security")
    assert (check.found, check.action) == (
        'The API server answered: namespaces: namespaces is forbidden: User "x" cannot list resource',
        "The portal's account may not ask this: grant what 'Portal permissions' lists, then check again.",
    )


def test_an_unreadable_kubeconfig_fails_without_calling_the_api(monkeypatch):
    # given
    fake = FakeCluster(kubeconfig_error="FATIA_KUBECONFIG is not set: no cluster to check.").install(monkeypatch)

    # when
    report = check_cluster(now=NOW)

    # then
    assert levels(report) == {"backend": Level.OK, "api": Level.FAIL, "holder-image": Level.OK}
    assert result(report, "api").found == "FATIA_KUBECONFIG is not set: no cluster to check."
    assert fake.calls == ["api_server_url"]


def test_the_simulated_backend_is_a_warning(monkeypatch, settings):
    # given
    settings.FATIA_CLUSTER_BACKEND = "simulated"
    FakeCluster().install(monkeypatch)

    # when
    check = result(check_cluster(now=NOW), "backend")

    # then
    assert (check.level, check.action) == (
        Level.WARN,
        "Set FATIA_CLUSTER_BACKEND=kubernetes once the other checks pass.",
    )


# --- the holder image ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reference", "parsed"),
    [
        ("registry.k8s.io/pause:3.10", ImageReference("registry.k8s.io", "pause", "3.10", "")),
        ("mirror.corp:5000/k8s/pause:3.10", ImageReference("mirror.corp:5000", "k8s/pause", "3.10", "")),
        ("localhost/pause:3.10", ImageReference("localhost", "pause", "3.10", "")),
        (
            "registry.k8s.io/pause@sha256:" + "a" * 64,
            ImageReference("registry.k8s.io", "pause", "", "sha256:" + "a" * 64),
        ),
        ("pause:3.10", ImageReference("", "pause", "3.10", "")),
        ("library/pause", ImageReference("", "library/pause", "", "")),
        ("registry.k8s.io/Pause:3.10", None),
        ("registry.k8s.io/pause:3.10 ", None),
        ("registry.k8s.io/pause@sha256:abc", None),
        ("", None),
    ],
)
def test_image_references_are_read_as_container_runtimes_read_them(reference, parsed):
    assert parse_image_reference(reference) == parsed


@pytest.mark.parametrize(
    ("image", "level", "found"),
    [
        (
            "registry.k8s.io/pause:3.10",
            Level.OK,
            "FATIA_HOLDER_IMAGE registry.k8s.io/pause:3.10: registry registry.k8s.io, tag 3.10.",
        ),
        (
            "pause:3.10",
            Level.WARN,
            "FATIA_HOLDER_IMAGE pause:3.10 names no registry, so each node's container runtime picks one (or "
            "refuses it).",
        ),
        (
            "mirror.corp/pause",
            Level.WARN,
            "FATIA_HOLDER_IMAGE mirror.corp/pause has no tag or digest, so it means :latest, which changes under you.",
        ),
        (
            "Pause 3.10",
            Level.FAIL,
            "FATIA_HOLDER_IMAGE 'Pause 3.10' is not an image reference: the kubelet refuses it (InvalidImageName).",
        ),
    ],
)
def test_the_holder_image_must_be_fully_qualified(monkeypatch, settings, image, level, found):
    # given
    settings.FATIA_HOLDER_IMAGE = image
    FakeCluster().install(monkeypatch)

    # when
    check = result(check_cluster(now=NOW), "holder-image")

    # then
    assert (check.level, check.found) == (level, found)


# --- the report ----------------------------------------------------------------------------------------------


def report_with_problems() -> ClusterReport:
    return ClusterReport(
        server="https://kube.example.com:6443",
        identity=PORTAL,
        checked_at=NOW,
        results=(
            CheckResult("api", "API server", Level.OK, "Kubernetes v1.37.2."),
            CheckResult("device-classes", "NVIDIA DeviceClasses", Level.FAIL, "Missing: mig.nvidia.com.", "Install."),
            CheckResult("driver-slices", "Driver ResourceSlices", Level.WARN, "1 of 2.", "Look.", ("No slices: b.",)),
        ),
    )


def test_the_report_reads_one_line_per_check_with_what_to_do():
    assert format_report(report_with_problems()).splitlines() == [
        f"Cluster check of https://kube.example.com:6443 as {PORTAL}, 2026-11-30 17:00:00 UTC",
        "",
        "OK    API server             Kubernetes v1.37.2.",
        "FAIL  NVIDIA DeviceClasses   Missing: mig.nvidia.com. -> Install.",
        "WARN  Driver ResourceSlices  1 of 2. -> Look.",
        "                               No slices: b.",
        "",
        "FAIL: 1 blocking problem, 1 warning.",
    ]


def test_the_report_survives_its_json_form():
    # given
    report = report_with_problems()

    # when
    data = report.as_dict()

    # then
    assert data["level"] == "FAIL"
    assert data["checks"][2] == {
        "key": "driver-slices",
        "title": "Driver ResourceSlices",
        "level": "WARN",
        "found": "1 of 2.",
        "action": "Look.",
        "details": ["No slices: b."],
    }
    assert ClusterReport.from_dict(data) == report
    assert (report.exit_code, ClusterReport(server="", identity="", checked_at=NOW).exit_code) == (1, 0)


def test_mig_manager_mode_rights_are_not_extra_where_they_belong(monkeypatch, settings):
    # given: the MIG-manager ClusterRole (node patch) everywhere, its ConfigMap Role granted in the portal's own
    # namespace, which is also the manager's, and the same Role by mistake in a tenant namespace
    settings.FATIA_MIG_MANAGER_NAMESPACE = "fatia-system"
    configmaps = kube.ResourceRule(("",), ("configmaps",), ("get", "create", "patch"))
    namespaces = [kube.NamespaceLabels("fatia-team-a", {})]
    FakeCluster(
        namespaces=namespaces,
        rules={"*": (kube.ResourceRule(("",), ("nodes",), ("patch",)),), "fatia-system": (configmaps,),
               "fatia-team-a": (configmaps,)},
    ).install(monkeypatch)  # fmt: skip

    # when
    check = result(check_cluster(now=NOW), "extra-permissions")

    # then: only the tenant namespace's ConfigMap rights are extra
    assert (check.level, check.details) == (
        Level.WARN,
        (
            "configmaps: get (in fatia-team-a)",
            "configmaps: create (in fatia-team-a)",
            "configmaps: patch (in fatia-team-a)",
        ),
    )


# --- the namespaces the portal manages (issue 17) ---------------------------------------------------------------


def test_namespaces_without_their_bindings_left_with_bindings_or_holding_stray_claims_are_warnings(world, monkeypatch):
    # given: team A owns "ml-a" (its members' workload binding is missing) with a live request there; "old-b" left
    # team B with the portal's binding still in it; claims of the portal's that no request wants in managed
    # namespaces (one of no request, one of the live request but in the wrong namespace), and one elsewhere
    assign_namespace(tenant_id=world.tenant_a.pk, name="ml-a", actor=world.root)
    live, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="1g.10gb",
        count=1,
        lease_hours=2,
        purpose="own namespace",
        actor=world.alice,
        namespace="ml-a",
    )
    claim = live.kube_claim_names[0]
    label = str(live.uuid)

    def bound(ns: str, *names: str) -> list[kube.NamedObject]:
        return [kube.NamedObject(ns, name) for name in names]

    FakeCluster(
        namespaces=[kube.NamespaceLabels("fatia-team-a", {kube.LABEL_TENANT: "team-a"})],
        own_namespaces=[
            kube.NamespaceLabels("ml-a", {kube.LABEL_TENANT: "team-a"}),
            kube.NamespaceLabels("old-b", {kube.LABEL_TENANT: "team-b"}),
        ],
        bindings=bound("fatia-team-a", "fatia-member", "fatia-member-workloads")
        + bound("ml-a", "fatia-portal", "fatia-member")
        + bound("old-b", "fatia-portal"),
        claims=[
            kube.NamedObject("ml-a", claim, label),
            kube.NamedObject("ml-a", "mig-alloc-gone", str(uuid.uuid4())),
            kube.NamedObject("fatia-team-a", claim, label),
            kube.NamedObject("elsewhere", "x", label),
        ],
    ).install(monkeypatch)

    # when
    check = result(check_cluster(now=NOW), "tenant-namespaces")

    # then
    assert (check.level, check.found) == (
        Level.WARN,
        "2 namespaces managed (1 owned by a tenant): 1 without its bindings, 1 left with bindings, 2 stray claims.",
    )
    assert check.details == (
        "Bindings missing: ml-a (team-a): no RoleBinding fatia-member-workloads.",
        "Left their tenant with the portal's bindings still there: old-b (fatia-portal).",
        f"Claims of the portal's that no request wants: fatia-team-a/{claim}, ml-a/mig-alloc-gone.",
    )


def test_a_namespace_assigned_but_never_bound_says_so(world, monkeypatch):
    # given: the bind task has not run: the namespace carries no tenant label and no binding
    assign_namespace(tenant_id=world.tenant_b.pk, name="ml-b", actor=world.root)
    FakeCluster(bindings=[]).install(monkeypatch)
    # when
    check = result(check_cluster(now=NOW), "tenant-namespaces")
    # then
    assert check.level == Level.WARN
    assert check.details == (
        "Bindings missing: ml-b (team-b): not labelled fatia.io/tenant=team-b; its bindings were never made.",
    )


def test_a_system_namespace_a_tenant_owns_since_before_such_names_were_refused_warns(world, settings, monkeypatch):
    # given: rows written before assign_namespace refused kube-* and the drivers' namespaces (it refuses them now)
    settings.FATIA_MIG_MANAGER_NAMESPACE = "gpu-operator"
    for tenant, name in ((world.tenant_b, "kube-system"), (world.tenant_a, "gpu-operator"), (world.tenant_a, "ml-a")):
        TenantNamespace.objects.create(tenant=tenant, name=name, source=TenantNamespace.Source.ASSIGNED)
    FakeCluster(
        own_namespaces=[
            kube.NamespaceLabels("kube-system", {kube.LABEL_TENANT: "team-b"}),
            kube.NamespaceLabels("gpu-operator", {kube.LABEL_TENANT: "team-a"}),
            kube.NamespaceLabels("ml-a", {kube.LABEL_TENANT: "team-a"}),
        ],
    ).install(monkeypatch)
    # when
    check = result(check_cluster(now=NOW), "tenant-namespaces")
    # then: bound as any owned namespace, but named with its tenant
    assert (check.level, check.found) == (
        Level.WARN,
        "3 namespaces managed (3 owned by tenants): 0 without their bindings, 0 left with bindings, 0 stray claims, "
        "2 system namespaces owned by a tenant.",
    )
    assert check.details == (
        "System namespaces a tenant owns (its members may run pods as their accounts): gpu-operator (team-a), "
        "kube-system (team-b).",
    )
    assert check.action.startswith("System namespaces: remove each from its tenant")
