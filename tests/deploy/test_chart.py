"""The Helm chart (deploy/chart): lint, render with the Kubernetes and the OpenShift values (deploy/chart/ci), every
rendered object accepted by a real API server (server-side dry-run), the pod templates admitted by Pod Security
`restricted`, the portal's ServiceAccount allowed exactly what allocations/cluster/permissions.py lists, and a
static scan (checkov) with nothing failed.

The API server is the local control plane of tests/kube (deploy/control-plane.sh). OpenShift's Route and the
Prometheus Operator's ServiceMonitor are not Kubernetes kinds: minimal CRDs of them (tests/deploy/data, sources
named there) are installed first, so that those objects are validated too.
"""

from __future__ import annotations

import copy
import json
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from allocations.cluster.permissions import PORTAL_PERMISSIONS, required_verbs
from tests.kube.conftest import ROOT, ControlPlane, wait_for

CHART = ROOT / "deploy" / "chart"
DATA = Path(__file__).parent / "data"
VALUES = {"kubernetes": CHART / "ci" / "kubernetes-values.yaml", "openshift": CHART / "ci" / "openshift-values.yaml"}
KUBE_VERSION = "v1.37.2"
RELEASE = "fatia"

Doc = dict[str, Any]


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, check=False, timeout=120)


def render(helm: Path, values: str | None, namespace: str = "fatia", *sets: str) -> list[Doc]:
    args = ["template", RELEASE, str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION]
    if values:
        args += ["-f", str(VALUES[values])]
    for s in sets:
        args += ["--set", s]
    result = run_helm(helm, *args)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind(docs: list[Doc], kind: str) -> dict[str, Doc]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def pod_templates(docs: list[Doc]) -> dict[str, Doc]:
    """Every pod the chart would start: Deployments', DaemonSets' and Jobs' templates, by the owner's name."""
    kinds = ("Deployment", "DaemonSet", "Job")
    return {d["metadata"]["name"]: d["spec"]["template"] for d in docs if d["kind"] in kinds}


# --- helm lint and the values schema --------------------------------------------------------------------------------


@pytest.mark.parametrize("values", sorted(VALUES))
def test_helm_lint_passes_strictly(helm: Path, values: str) -> None:
    result = run_helm(helm, "lint", str(CHART), "--strict", "-f", str(VALUES[values]), "--kube-version", KUBE_VERSION)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("cluster.backend=aws", "at '/cluster/backend': value must be one of 'kubernetes', 'simulated'"),
        ("web.replicas=-1", "at '/web/replicas': minimum: got -1, want 0"),
        (
            "image.pullPolicy=Sometimes",
            "at '/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'",
        ),
        ("database.url=mysql://x@db/fatia", "at '/database/url': 'mysql://x@db/fatia' does not match pattern"),
        (
            "securityContext.allowPrivilegeEscalation=true",
            "at '/securityContext/allowPrivilegeEscalation': value must be false",
        ),
        ("webReplicas=3", "additional properties 'webReplicas' not allowed"),
        ("route.enabled=true", "at '/ingress/enabled': value must be false"),
        ("broker.queueType=stream", "at '/broker/queueType': value must be one of 'classic', 'quorum'"),
        ("broker.visibilityTimeouts=urgent", "at '/broker/visibilityTimeouts': 'urgent' does not match pattern"),
    ],
)
def test_the_values_schema_refuses_bad_values_and_names_the_field(helm: Path, setting: str, message: str) -> None:
    # when: the Kubernetes values with one bad value
    result = run_helm(
        helm, "template", RELEASE, str(CHART), "-f", str(VALUES["kubernetes"]), "--set", setting, "--kube-version",
        KUBE_VERSION,
    )  # fmt: skip
    # then: refused before anything renders, with the field's name
    assert result.returncode == 1
    assert result.stdout == ""
    assert message in result.stderr


def test_a_render_without_the_required_secrets_says_which_value_to_set(helm: Path) -> None:
    result = run_helm(helm, "template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION)
    assert result.returncode == 1
    assert "SECRET_KEY: set secretKey.value or secretKey.existingSecret" in result.stderr


def test_a_service_monitor_without_a_metrics_token_is_refused(helm: Path) -> None:
    result = run_helm(
        helm, "template", RELEASE, str(CHART), "-f", str(VALUES["kubernetes"]), "--set", "metrics.token=",
        "--kube-version", KUBE_VERSION,
    )  # fmt: skip
    assert result.returncode == 1
    assert "metrics.serviceMonitor.enabled needs metrics.token or metrics.existingSecret" in result.stderr


# --- what the renders contain -------------------------------------------------------------------------------------


def test_the_cluster_role_grants_exactly_the_portals_permissions(helm: Path) -> None:
    # given: the Kubernetes render
    docs = render(helm, "kubernetes")
    roles = by_kind(docs, "ClusterRole")
    # (the CI values turn the node agent on: web's token-review role; the namespace role is bound per namespace)
    assert sorted(roles) == ["fatia-fatia", "fatia-member-fatia", "fatia-namespace-fatia", "fatia-web-fatia"]
    role = roles["fatia-fatia"]
    # when: its rules are spread into (group, resource, verb)
    granted = [
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    ]
    # then: PORTAL_PERMISSIONS, each once, nothing more
    assert sorted(granted) == sorted(required_verbs())
    assert len(granted) == len(set(granted))
    binding = by_kind(docs, "ClusterRoleBinding")["fatia-fatia"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "fatia-cluster", "namespace": "fatia"}]
    # and web's reviewer may create TokenReviews and nothing else cluster-wide
    assert roles["fatia-web-fatia"]["rules"] == [
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]}
    ]
    assert by_kind(docs, "ClusterRoleBinding")["fatia-web-fatia"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "fatia-web", "namespace": "fatia"}
    ]


def test_the_kubernetes_render_has_every_component_and_only_the_api_callers_get_a_token(helm: Path) -> None:
    docs = render(helm, "kubernetes")
    deployments = by_kind(docs, "Deployment")
    assert sorted(deployments) == [
        "fatia-beat", "fatia-discover", "fatia-events", "fatia-ingest", "fatia-web", "fatia-worker"
    ]  # fmt: skip
    assert {n: d["spec"]["replicas"] for n, d in deployments.items()} == {
        "fatia-beat": 1,
        "fatia-discover": 1,
        "fatia-events": 1,
        "fatia-ingest": 1,
        "fatia-web": 2,
        "fatia-worker": 2,
    }
    # exactly one beat and one discover, never two at once
    assert deployments["fatia-beat"]["spec"]["strategy"] == {"type": "Recreate"}
    assert deployments["fatia-discover"]["spec"]["strategy"] == {"type": "Recreate"}
    assert deployments["fatia-ingest"]["spec"]["strategy"] == {"type": "Recreate"}
    templates = pod_templates(docs)
    roles = {name: t["spec"]["containers"][0]["args"] for name, t in templates.items()}
    assert roles == {
        "fatia-beat": ["beat"],
        "fatia-discover": ["discover"],
        "fatia-events": ["events"],
        "fatia-ingest": ["ingest"],
        "fatia-web": ["web"],
        "fatia-worker": ["worker"],
        "fatia-migrate": ["migrate"],
        "fatia-agent": ["agent"],
    }
    tokens = {
        name: (t["spec"].get("serviceAccountName"), t["spec"]["automountServiceAccountToken"])
        for name, t in templates.items()
    }
    assert tokens == {
        "fatia-beat": ("fatia", False),
        "fatia-discover": ("fatia-cluster", True),
        "fatia-events": ("fatia", False),
        "fatia-ingest": ("fatia", False),
        # web reviews the node agents' bootstrap tokens (agent.enabled in the CI values), as its own narrow identity
        "fatia-web": ("fatia-web", True),
        "fatia-worker": ("fatia-cluster", True),
        "fatia-migrate": (None, False),
        # the agent's only token is the projected one for the portal (tests/deploy/test_chart_agent.py)
        "fatia-agent": ("fatia-agent", False),
    }
    ports = {
        n: [(p["containerPort"]) for p in t["spec"]["containers"][0].get("ports", [])] for n, t in templates.items()
    }
    assert ports["fatia-web"] == [8000] and ports["fatia-events"] == [8001]
    for name in ("fatia-web", "fatia-events"):
        container = templates[name]["spec"]["containers"][0]
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}


def test_every_container_is_read_only_with_tmp_writable_and_secrets_as_files(helm: Path) -> None:
    docs = render(helm, "kubernetes")
    config = by_kind(docs, "ConfigMap")["fatia"]["data"]
    for name, template in pod_templates(docs).items():
        (container,) = template["spec"]["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True, name
        assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"], name  # noqa: S108 (the pod's /tmp)
        tmp = next(v for v in template["spec"]["volumes"] if v["name"] == "tmp")
        assert tmp == {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}}, name
        assert set(container["resources"]) == {"requests", "limits"}, name
        if name == "fatia-agent":  # no secret and no portal setting at all: tests/deploy/test_chart_agent.py
            assert "envFrom" not in container
            continue
        # secrets only as <NAME>_FILE, never as values in the environment
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env == {
            n + "_FILE": f"/var/run/secrets/fatia/{n}"
            for n in (
                "SECRET_KEY",
                "DATABASE_URL",
                "CELERY_BROKER_URL",
                "CACHE_URL",
                "FATIA_OIDC_CLIENT_SECRET",
                "FATIA_METRICS_TOKEN",
                "FATIA_INGEST_QUEUE_URL",  # ingest.enabled in the CI values: web queues, the ingest pod drains
            )
        }, name
    assert config["FATIA_KUBECONFIG"] == "" and config["FATIA_CLUSTER_BACKEND"] == "kubernetes"
    assert config["FATIA_OIDC_ISSUER"] == "https://login.example.com/realms/company"
    assert config["FATIA_OIDC_ADMIN_GROUPS"] == "gpu-platform-admins"
    assert config["ALLOWED_HOSTS"] == "fatia.example.com"
    assert config["FATIA_HOLDER_IMAGE"] == "registry.k8s.io/pause:3.10"
    assert config["FATIA_HOLDER_RUN_AS_USER"] == "65535"
    assert config["FATIA_BEAT_SCHEDULE_FILE"] == "/tmp/celerybeat-schedule"  # noqa: S108 (the pod's /tmp)


def test_the_migrations_run_as_a_hook_before_install_and_upgrade(helm: Path) -> None:
    docs = render(helm, "openshift")
    hooks = {
        (d["kind"], d["metadata"]["name"]): d["metadata"]["annotations"]
        for d in docs
        if "helm.sh/hook" in d["metadata"].get("annotations", {})
    }
    assert sorted(hooks) == [("ConfigMap", "fatia-migrate"), ("Job", "fatia-migrate"), ("Secret", "fatia-migrate")]
    for hook in hooks.values():
        assert hook["helm.sh/hook"] == "pre-install,pre-upgrade"
    # the hook's own copies of the settings exist before it runs (lower weight), with the same contents
    assert hooks[("ConfigMap", "fatia-migrate")]["helm.sh/hook-weight"] == "-10"
    assert hooks[("Job", "fatia-migrate")]["helm.sh/hook-weight"] == "0"
    assert by_kind(docs, "ConfigMap")["fatia-migrate"]["data"] == by_kind(docs, "ConfigMap")["fatia"]["data"]
    assert by_kind(docs, "Secret")["fatia-migrate"]["data"] == by_kind(docs, "Secret")["fatia"]["data"]


def test_the_kubernetes_render_routes_event_streams_to_the_asgi_server(helm: Path) -> None:
    docs = render(helm, "kubernetes")
    paths = {
        path["path"]: path["backend"]["service"]["name"]
        for ingress in by_kind(docs, "Ingress").values()
        for rule in ingress["spec"]["rules"]
        for path in rule["http"]["paths"]
    }
    assert paths == {"/": "fatia-web", "/dashboard/events/": "fatia-events"}
    assert by_kind(docs, "Route") == {}
    (monitor,) = by_kind(docs, "ServiceMonitor").values()
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert monitor["spec"]["endpoints"][0]["authorization"]["credentials"] == {
        "name": "fatia",
        "key": "FATIA_METRICS_TOKEN",
    }
    assert sorted(by_kind(docs, "DeviceClass")) == ["gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com"]


def test_the_openshift_render_has_routes_and_leaves_the_uid_to_the_scc(helm: Path) -> None:
    docs = render(helm, "openshift")
    assert by_kind(docs, "Ingress") == {}
    routes = {r["spec"]["path"]: r["spec"]["to"]["name"] for r in by_kind(docs, "Route").values()}
    assert routes == {"/": "fatia-web", "/dashboard/events/": "fatia-events"}
    for name, template in pod_templates(docs).items():
        assert "runAsUser" not in template["spec"]["securityContext"], name
        assert "fsGroup" not in template["spec"]["securityContext"], name
        assert template["spec"]["securityContext"]["runAsNonRoot"] is True, name
    # and the holder pods in tenant namespaces name no UID either (restricted-v2 refuses 65535)
    assert by_kind(docs, "ConfigMap")["fatia"]["data"]["FATIA_HOLDER_RUN_AS_USER"] == ""
    (monitor,) = by_kind(docs, "ServiceMonitor").values()
    assert monitor["spec"]["endpoints"][0]["authorization"]["credentials"] == {"name": "fatia-metrics", "key": "token"}
    assert by_kind(docs, "DeviceClass") == {}


def test_the_simulated_backend_has_no_discover_no_cluster_role_and_no_token(helm: Path) -> None:
    docs = render(
        helm, "kubernetes", "fatia", "cluster.backend=simulated", "agent.enabled=false", "ingest.enabled=false"
    )
    assert sorted(by_kind(docs, "Deployment")) == ["fatia-beat", "fatia-events", "fatia-web", "fatia-worker"]
    assert by_kind(docs, "ClusterRole") == {}
    assert sorted(by_kind(docs, "ServiceAccount")) == ["fatia"]
    assert not any(t["spec"]["automountServiceAccountToken"] for t in pod_templates(docs).values())


# --- against the API server ----------------------------------------------------------------------------------------


def kubectl(plane: ControlPlane, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(plane.bin_dir / "kubectl"), f"--kubeconfig={plane.admin_kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


@pytest.fixture(scope="session")
def crds(control_plane: ControlPlane) -> None:
    """OpenShift's Route and the Prometheus Operator's ServiceMonitor, served once they are Established."""
    for name in ("route-crd.yaml", "servicemonitor-crd.yaml"):
        applied = kubectl(control_plane, "apply", "--server-side", "-f", str(DATA / name))
        assert applied.returncode == 0, applied.stderr
    for crd in ("routes.route.openshift.io", "servicemonitors.monitoring.coreos.com"):
        done = kubectl(control_plane, "wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
        assert done.returncode == 0, done.stderr


@pytest.fixture
def namespace(admin: client.ApiClient) -> Callable[..., str]:
    """A fresh namespace (Pod Security labels optional) whose default ServiceAccount exists."""
    core = client.CoreV1Api(admin)

    def make(**labels: str) -> str:
        name = f"chart-{uuid.uuid4().hex[:6]}"
        core.create_namespace(body={"metadata": {"name": name, "labels": labels}})

        def has_default() -> bool:
            return bool(core.list_namespaced_service_account(name, field_selector="metadata.name=default").items)

        wait_for(f"ServiceAccount {name}/default", has_default, timeout=60)
        return name

    return make


RESTRICTED = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")}


@pytest.mark.parametrize("values", sorted(VALUES))
def test_every_rendered_object_is_accepted_by_the_api_server(
    helm: Path, control_plane: ControlPlane, crds: None, namespace: Callable[..., str], values: str, tmp_path: Path
) -> None:
    # given: a namespace that warns of anything Pod Security `restricted` would refuse
    ns = namespace(**RESTRICTED)
    docs = render(helm, values, ns)
    manifest = tmp_path / "rendered.yaml"
    manifest.write_text(yaml.safe_dump_all(docs))
    # when: every object goes to the API server, validated strictly (unknown fields refused), but not stored
    applied = kubectl(
        control_plane, "apply", "--server-side", "--dry-run=server", "--field-manager=helm", "--validate=strict",
        "-f", str(manifest),
    )  # fmt: skip
    # then: each one accepted, and not one warning (Pod Security, deprecations)
    assert applied.returncode == 0, applied.stderr
    assert applied.stderr == ""
    accepted = [line for line in applied.stdout.splitlines() if line.endswith("serverside-applied (server dry run)")]
    assert len(accepted) == len(docs), applied.stdout


@pytest.mark.parametrize("values", sorted(VALUES))
def test_restricted_pod_security_admits_every_pod_the_chart_starts(
    helm: Path, admin: client.ApiClient, namespace: Callable[..., str], values: str, nvidia_runtime_class: str
) -> None:
    # given: a namespace that enforces `restricted`, with the chart's ServiceAccounts in it
    ns = namespace(**RESTRICTED)
    docs = render(helm, values, ns)
    core = client.CoreV1Api(admin)
    for account in by_kind(docs, "ServiceAccount").values():
        core.create_namespaced_service_account(ns, body=account)
    templates = pod_templates(docs)
    assert sorted(templates) == [
        "fatia-agent",
        "fatia-beat",
        "fatia-discover",
        "fatia-events",
        "fatia-ingest",
        "fatia-migrate",
        "fatia-web",
        "fatia-worker",
    ]
    # when: each pod template is created as a Pod (dry run: admission runs, nothing is stored)
    for name, template in templates.items():
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, **template["metadata"]},
            "spec": template["spec"],
        }
        created = core.create_namespaced_pod(ns, body=pod, dry_run="All")
        # then: admitted as it is
        assert created.metadata.name == name
    # and the check can fail: the same web pod with privilege escalation allowed is refused
    bad = copy.deepcopy(templates["fatia-web"])
    bad["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(ns, body={"metadata": {"name": "bad"}, "spec": bad["spec"]}, dry_run="All")
    assert refused.value.status == 403
    assert (
        'violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false'
        in json.loads(refused.value.body)["message"]
    )


def can(
    admin: client.ApiClient, user: str, verb: str, group: str, resource: str, namespace: str = "", obj: str = ""
) -> bool:
    """SubjectAccessReview: may `user` (a ServiceAccount, with the groups the API server gives it) do this (to the
    object named `obj`, or any)?"""
    name, _, sub = resource.partition("/")
    _, _, ns_of_sa, _ = user.split(":", 3)
    attributes = {"verb": verb, "group": group, "resource": name, "subresource": sub, "namespace": namespace}
    if obj:
        attributes["name"] = obj
    review = client.AuthorizationV1Api(admin).create_subject_access_review(
        body={
            "spec": {
                "user": user,
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{ns_of_sa}", "system:authenticated"],
                "resourceAttributes": attributes,
            }
        }
    )
    return bool(review.status.allowed)


NAMESPACED = {"resourceclaims", "pods", "resourcequotas", "roles", "rolebindings"}


def test_the_portals_service_account_may_make_every_call_and_nothing_it_must_not(
    helm: Path, admin: client.ApiClient, control_plane: ControlPlane, namespace: Callable[..., str]
) -> None:
    # given: the chart's ServiceAccounts and RBAC applied for real
    ns = namespace()
    docs = render(helm, "kubernetes", ns)
    rbac = [
        d for d in docs if d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
    ]
    applied = kubectl(control_plane, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(rbac))
    assert applied.returncode == 0, applied.stderr
    portal = f"system:serviceaccount:{ns}:fatia-cluster"
    web = f"system:serviceaccount:{ns}:fatia"
    tenant_ns = "fatia-ml-research"
    try:
        # then: every verb of PORTAL_PERMISSIONS is allowed (in a tenant's namespace for namespaced kinds)
        # (the one named grant, `bind`, on the release's member ClusterRole)
        member_role = f"fatia-member-{ns}"
        denied = [
            (p.group, p.resource, verb)
            for p in PORTAL_PERMISSIONS
            for verb in p.verbs
            if not can(
                admin,
                portal,
                verb,
                p.group,
                p.resource,
                tenant_ns if p.resource in NAMESPACED else "",
                member_role if p.named_by else "",
            )
        ]
        assert denied == []
        # and what it must not do is forbidden: secrets, pod writes beyond the role, node writes, RBAC escalation
        forbidden = [
            ("get", "", "secrets", tenant_ns),
            ("list", "", "secrets", ""),
            ("create", "", "secrets", ns),
            ("update", "", "pods", "kube-system"),
            ("create", "", "pods/exec", tenant_ns),
            ("create", "", "pods/eviction", "kube-system"),
            ("create", "apps", "deployments", "kube-system"),
            ("create", "", "nodes", ""),
            ("patch", "", "nodes", ""),
            ("delete", "", "nodes", ""),
            ("delete", "", "namespaces", ""),
            ("create", "rbac.authorization.k8s.io", "clusterrolebindings", ""),
            ("bind", "rbac.authorization.k8s.io", "clusterroles", ""),
            ("escalate", "rbac.authorization.k8s.io", "roles", tenant_ns),
            ("delete", "resource.k8s.io", "deviceclasses", ""),
            ("create", "resource.k8s.io", "resourceslices", ""),
        ]
        allowed = [f for f in forbidden if can(admin, portal, f[0], f[1], f[2], f[3])]
        assert allowed == []
        # (binding any ClusterRole but the member one is escalation too)
        assert not can(admin, portal, "bind", "rbac.authorization.k8s.io", "clusterroles", "", "cluster-admin")
        # the web's ServiceAccount has no cluster rights at all
        assert not can(admin, web, "list", "", "nodes")
        assert not can(admin, web, "create", "resource.k8s.io", "resourceclaims", tenant_ns)
        # web's reviewer identity (agent bootstrap) may review tokens and read pods in its namespace, nothing more
        reviewer = f"system:serviceaccount:{ns}:fatia-web"
        assert can(admin, reviewer, "create", "authentication.k8s.io", "tokenreviews")
        assert can(admin, reviewer, "get", "", "pods", ns)
        assert [
            f
            for f in [
                *forbidden,
                ("list", "", "nodes", ""),
                ("create", "resource.k8s.io", "resourceclaims", tenant_ns),
                ("get", "", "pods", tenant_ns),
                ("list", "", "pods", ns),
                ("delete", "", "pods", ns),
            ]
            if can(admin, reviewer, f[0], f[1], f[2], f[3])
        ] == []
        # and the same, as real calls impersonating the ServiceAccount
        nodes = kubectl(control_plane, "get", "nodes", f"--as={portal}", "--as-group=system:serviceaccounts")
        assert nodes.returncode == 0, nodes.stderr
        secrets = kubectl(control_plane, "get", "secrets", "-n", "kube-system", f"--as={portal}")
        assert secrets.returncode == 1
        assert (
            f'User "{portal}" cannot list resource "secrets" in API group "" in the namespace "kube-system"'
            in secrets.stderr
        )
    finally:
        kubectl(control_plane, "delete", "clusterrolebinding,clusterrole", f"fatia-{ns}", "--ignore-not-found")
        kubectl(control_plane, "delete", "clusterrolebinding,clusterrole", f"fatia-web-{ns}", "--ignore-not-found")
        kubectl(control_plane, "delete", "clusterrole", f"fatia-member-{ns}", "--ignore-not-found")


# --- static scan ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("values", sorted(VALUES))
def test_checkov_fails_no_check_and_every_skip_says_why(helm: Path, checkov: Path, values: str, tmp_path: Path) -> None:
    # given: the render as one manifest
    manifest = tmp_path / "rendered.yaml"
    docs = render(helm, values)
    manifest.write_text(yaml.safe_dump_all(docs))
    # when: checkov scans it (no network: its own policies only)
    scan = subprocess.run(
        [
            str(checkov),
            "--file",
            str(manifest),
            "--framework",
            "kubernetes",
            "--output",
            "json",
            "--skip-download",
            "--compact",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "BC_SKIP_MAPPING": "TRUE",
            "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false",
        },
    )
    report = json.loads(scan.stdout)
    results = report["results"]
    # then: no failed check at all (whatever its severity), and each skip carries the chart's reason
    failed = sorted(f"{r['check_id']} {r['resource']}" for r in results.get("failed_checks", []))
    assert failed == []
    assert scan.returncode == 0
    assert report["summary"]["parsing_errors"] == 0
    # every object was read, and each Deployment's and Job's pod template once more on its own
    assert report["summary"]["resource_count"] == len(docs) + len(pod_templates(docs))
    skipped = results["skipped_checks"]
    assert all(len(s["check_result"].get("suppress_comment", "")) > 20 for s in skipped)
    # exactly the exceptions the chart explains (_helpers.tpl fatia.checkovSkips), and no others
    expected = {"CKV_K8S_8", "CKV_K8S_9", "CKV_K8S_15", "CKV_K8S_38", "CKV_K8S_43"}
    if values == "openshift":
        expected.add("CKV_K8S_40")
    assert {s["check_id"] for s in skipped} == expected
    assert report["summary"]["passed"] > 0
