"""An empty FATIA_KUBECONFIG in a pod: the portal talks to the API server as the pod's ServiceAccount.

What a pod sees is played on the test control plane: the kubelet's environment (KUBERNETES_SERVICE_HOST/PORT) and
the mounted token and CA, at the paths the kubernetes client reads (the external boundary; nothing of ours is
replaced). The token is the portal ServiceAccount's, so the API server itself says who the portal is.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from django.core.exceptions import ImproperlyConfigured
from kubernetes import client
from kubernetes.config import incluster_config

from allocations.cluster import kube
from tests.kube.conftest import ControlPlane

PORTAL_SA = "system:serviceaccount:fatia-system:fatia-portal"
STRONG_SECRET = "k3y-" + "0123456789abcdefghijklmnopqrstuvwxyz" * 2


@pytest.fixture
def pod_mounts(tmp_path: Path, control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The ServiceAccount volume and environment the kubelet gives a pod, for the portal's ServiceAccount."""
    kubeconfig = yaml.safe_load(control_plane.portal_kubeconfig.read_text())
    token = tmp_path / "token"
    token.write_text(kubeconfig["users"][0]["user"]["token"])
    ca = tmp_path / "ca.crt"
    ca.write_bytes(base64.b64decode(kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"]))
    server = urlsplit(control_plane.server)
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", str(server.hostname))
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(server.port))
    kube._clients.pop(kube.IN_CLUSTER, None)
    yield tmp_path
    kube._clients.pop(kube.IN_CLUSTER, None)


def test_an_empty_kubeconfig_in_a_pod_calls_the_api_as_the_pods_service_account(pod_mounts: Path, settings) -> None:
    # given: the kubernetes backend with no kubeconfig, in a pod
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    settings.FATIA_KUBECONFIG = ""
    # when: the adapter makes its client and asks the API server who it is
    api = kube.api_client()
    review = client.AuthenticationV1Api(api).create_self_subject_review(body={})
    # then: the pod's ServiceAccount, over the pod's CA, against the service address of the environment
    assert review.status.user_info.username == PORTAL_SA
    assert (
        api.configuration.host
        == f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ['KUBERNETES_SERVICE_PORT']}"
    )
    assert kube.api_server_url() == api.configuration.host
    assert kube.api_client() is api


def test_a_pod_without_its_service_account_token_is_a_retryable_error_that_says_why(pod_mounts: Path, settings) -> None:
    # given: automountServiceAccountToken off (no token file) but the kubernetes backend on
    settings.FATIA_KUBECONFIG = ""
    (pod_mounts / "token").unlink()
    # when / then
    with pytest.raises(kube.KubeUnavailable) as excinfo:
        kube.api_client()
    assert excinfo.value.message == "the pod's ServiceAccount cannot be used: Service token file does not exist."


def test_an_empty_kubeconfig_outside_a_pod_is_a_configuration_error(settings, monkeypatch: pytest.MonkeyPatch) -> None:
    # given: no kubeconfig and no pod environment
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    settings.FATIA_KUBECONFIG = ""
    # when / then
    with pytest.raises(ImproperlyConfigured) as excinfo:
        kube.api_client()
    assert str(excinfo.value) == (
        "FATIA_CLUSTER_BACKEND is 'kubernetes' but FATIA_KUBECONFIG is not set and this is not a pod."
    )


BOOT = "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'portal.settings'; django.setup(); print('ok')"


def boot(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in {"FATIA_KUBECONFIG", "KUBERNETES_SERVICE_HOST", "DEBUG"}}
    base = {
        "DEBUG": "False",
        "SECRET_KEY": STRONG_SECRET,
        "DATABASE_URL": "postgres://x@127.0.0.1/x",
        "CELERY_BROKER_URL": "redis://127.0.0.1/0",
        "FATIA_CLUSTER_BACKEND": "kubernetes",
    }
    return subprocess.run(
        [sys.executable, "-c", BOOT], env={**clean, **base, **env}, capture_output=True, text=True, check=False
    )


def test_settings_accept_the_kubernetes_backend_without_a_kubeconfig_in_a_pod() -> None:
    result = boot(KUBERNETES_SERVICE_HOST="10.96.0.1", KUBERNETES_SERVICE_PORT="443")
    assert (result.returncode, result.stdout.strip()) == (0, "ok")


def test_settings_refuse_the_kubernetes_backend_without_a_kubeconfig_outside_a_pod() -> None:
    result = boot()
    assert result.returncode == 1
    assert (
        "FATIA_CLUSTER_BACKEND is 'kubernetes': set FATIA_KUBECONFIG (or run in a pod, to use its ServiceAccount)."
        in result.stderr
    )
