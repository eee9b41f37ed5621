"""The chart tests' tools: Helm (built from the Go module proxy by deploy/build-helm.sh), checkov (its own virtualenv,
deploy/install-checkov.sh), both cached under $FATIA_CACHE, and the local control plane of tests/kube."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kube.conftest import BASH, ROOT, _tail, admin, control_plane  # noqa: F401 (fixtures used here)

BUILD_HELM = ROOT / "deploy" / "build-helm.sh"
INSTALL_CHECKOV = ROOT / "deploy" / "install-checkov.sh"


def _tool(script: Path, log: Path, timeout: float) -> Path:
    """Runs `script` (it builds or installs when the cache lacks the tool) and returns the path it prints last."""
    with log.open("w") as out:
        run = subprocess.run([BASH, str(script)], stdout=out, stderr=subprocess.STDOUT, check=False, timeout=timeout)
    if run.returncode != 0:
        pytest.fail(f"{script.relative_to(ROOT)} failed ({run.returncode}); the end of {log}:\n{_tail(log)}")
    return Path(log.read_text().splitlines()[-1])


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tool(BUILD_HELM, tmp_path_factory.mktemp("helm") / "build.log", timeout=3600)


@pytest.fixture(scope="session")
def checkov(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tool(INSTALL_CHECKOV, tmp_path_factory.mktemp("checkov") / "install.log", timeout=1800)


@pytest.fixture(scope="session")
def nvidia_runtime_class(admin: client.ApiClient) -> str:  # noqa: F811 (the fixture imported above)
    """The RuntimeClass the GPU Operator makes (the agent's pods name it; admission refuses a pod whose class is
    missing)."""
    try:
        client.NodeV1Api(admin).create_runtime_class(body={"metadata": {"name": "nvidia"}, "handler": "nvidia"})
    except ApiException as exc:
        if exc.status != 409:
            raise
    return "nvidia"
