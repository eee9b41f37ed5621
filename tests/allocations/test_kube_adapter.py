"""The Kubernetes adapter's error mapping against real HTTP peers that are not a healthy API server (issue 10)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from allocations.cluster import kube


class OldApiServer(BaseHTTPRequestHandler):
    """An API server that predates DeviceTaintRules in resource.k8s.io/v1: that list is a 404."""

    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        OldApiServer.seen.append(self.path)
        body = (
            b'{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,'
            b'"message":"the server could not find the requested resource"}'
        )
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def old_api_server(tmp_path: Path, settings) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), OldApiServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: old\n"
        f"clusters: [{{name: old, cluster: {{server: '{url}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: old, context: {cluster: old, user: u}}]\n"
    )
    settings.FATIA_KUBECONFIG = str(kubeconfig)
    yield url
    server.shutdown()
    kube._clients.pop(str(kubeconfig), None)


def test_steering_taints_are_none_where_the_api_server_does_not_serve_them(old_api_server):
    # when: reconcile asks for our DeviceTaintRules on a Kubernetes without them in resource.k8s.io/v1
    found = kube.list_steering()
    # then: none, instead of a KubeRejected that failed every reconcile pass
    assert found == set()
    assert OldApiServer.seen[-1].startswith("/apis/resource.k8s.io/v1/devicetaintrules")


def test_an_unusable_kubeconfig_is_a_retryable_error_that_says_why(tmp_path: Path, settings):
    # given: a kubeconfig that is not one (a broken secret mount)
    broken = tmp_path / "kubeconfig"
    broken.write_text("this: [is not, a kubeconfig")
    settings.FATIA_KUBECONFIG = str(broken)
    # when / then: the tasks retry, and the message names the file
    with pytest.raises(kube.KubeUnavailable) as excinfo:
        kube.api_client()
    assert excinfo.value.message.startswith(f"the kubeconfig {broken} cannot be used:")
