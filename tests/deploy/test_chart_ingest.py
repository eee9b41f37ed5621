"""The chart's queued telemetry ingest (ingest.enabled): the drain worker's Deployment (`fatia ingest`), and
FATIA_INGEST_QUEUE_URL given to every Fatia pod from the queue's own Redis or, by default, the cache's. The CI values
turn it on (Kubernetes with a queue URL of its own, OpenShift on the cache's Redis), so the server-side dry run, Pod
Security and checkov of tests/deploy/test_chart.py cover the Deployment too."""

from __future__ import annotations

import base64
from pathlib import Path

from tests.deploy.test_chart import CHART, KUBE_VERSION, RELEASE, VALUES, by_kind, pod_templates, render, run_helm

INGEST = "fatia-ingest"
QUEUE_FILE = {"name": "FATIA_INGEST_QUEUE_URL_FILE", "value": "/var/run/secrets/fatia/FATIA_INGEST_QUEUE_URL"}


def _queue_source(template: dict) -> dict:
    """Where the pod's FATIA_INGEST_QUEUE_URL file comes from: {secret name: [{key, path}]}."""
    (volume,) = [v for v in template["spec"]["volumes"] if v["name"] == "secrets"]
    (source,) = [
        s["secret"]
        for s in volume["projected"]["sources"]
        if s["secret"]["items"][0]["path"] == "FATIA_INGEST_QUEUE_URL"
    ]
    return source


def test_off_by_default_no_drain_worker_and_no_queue_for_anyone(helm: Path) -> None:
    # given: the Kubernetes values with queued ingest off
    docs = render(helm, "kubernetes", "fatia", "ingest.enabled=false")
    # then: no ingest Deployment or NetworkPolicy, and no pod gets a queue URL (reports are applied in the request)
    assert INGEST not in by_kind(docs, "Deployment")
    assert INGEST not in by_kind(docs, "NetworkPolicy")
    for name, template in pod_templates(docs).items():
        assert QUEUE_FILE not in template["spec"]["containers"][0].get("env", []), name
    assert "FATIA_INGEST_QUEUE_URL" not in by_kind(docs, "Secret")["fatia"]["data"]


def test_on_one_drain_worker_runs_the_ingest_role_and_every_portal_pod_reaches_the_queue(helm: Path) -> None:
    # given: the CI values (a queue URL of its own)
    docs = render(helm, "kubernetes")
    deployment = by_kind(docs, "Deployment")[INGEST]
    template = deployment["spec"]["template"]
    (container,) = template["spec"]["containers"]
    # then: exactly one worker, never two at once, running the image's `ingest` role with the portal's settings
    assert (deployment["spec"]["replicas"], deployment["spec"]["strategy"]) == (1, {"type": "Recreate"})
    assert container["args"] == ["ingest"]
    assert container["envFrom"] == [{"configMapRef": {"name": "fatia"}}]
    assert container["resources"] == {
        "requests": {"cpu": "200m", "memory": "256Mi"},
        "limits": {"cpu": "1", "memory": "512Mi"},
    }
    assert "ports" not in container and template["spec"]["automountServiceAccountToken"] is False
    # and the queue's URL comes from the chart's Secret under its own key, to the worker and to every web process
    secret = by_kind(docs, "Secret")["fatia"]["data"]
    assert base64.b64decode(secret["FATIA_INGEST_QUEUE_URL"]) == b"redis://redis.fatia-data.svc:6379/2"
    for name in (INGEST, "fatia-web", "fatia-worker"):
        pod = pod_templates(docs)[name]
        assert QUEUE_FILE in pod["spec"]["containers"][0]["env"], name
        assert _queue_source(pod) == {
            "name": "fatia",
            "items": [{"key": "FATIA_INGEST_QUEUE_URL", "path": "FATIA_INGEST_QUEUE_URL"}],
        }, name
    # and its NetworkPolicy lets it reach DNS and the database and Redis only, nothing in
    policy = by_kind(docs, "NetworkPolicy")[INGEST]["spec"]
    assert policy["ingress"] == []
    assert [sorted(p["port"] for p in rule["ports"]) for rule in policy["egress"]] == [[53, 53], [5432, 6379]]


def test_without_a_queue_url_the_queue_is_the_caches_redis(helm: Path) -> None:
    # given: the OpenShift values (cache.url in the chart's Secret, no ingest.queue)
    openshift = render(helm, "openshift")
    # then: the same Secret key as CACHE_URL, mounted under the queue's name
    assert _queue_source(pod_templates(openshift)[INGEST]) == {
        "name": "fatia",
        "items": [{"key": "CACHE_URL", "path": "FATIA_INGEST_QUEUE_URL"}],
    }
    # and with the cache from a Secret of the user's, the queue comes from there too
    existing = render(helm, "kubernetes", "fatia", "ingest.queue.url=", "cache.url=", "cache.existingSecret=redis-urls")
    assert _queue_source(pod_templates(existing)[INGEST]) == {
        "name": "redis-urls",
        "items": [{"key": "CACHE_URL", "path": "FATIA_INGEST_QUEUE_URL"}],
    }
    # and a queue Secret of its own wins over both
    own = render(helm, "kubernetes", "fatia", "ingest.queue.existingSecret=queue", "ingest.queue.key=url")
    assert _queue_source(pod_templates(own)["fatia-web"]) == {
        "name": "queue",
        "items": [{"key": "url", "path": "FATIA_INGEST_QUEUE_URL"}],
    }


def test_on_without_any_redis_the_render_says_what_to_set(helm: Path) -> None:
    result = run_helm(
        helm, "template", RELEASE, str(CHART), "-f", str(VALUES["kubernetes"]), "--set", "ingest.queue.url=",
        "--set", "cache.url=", "--kube-version", KUBE_VERSION,
    )  # fmt: skip
    assert result.returncode == 1
    assert (
        "FATIA_INGEST_QUEUE_URL: ingest.enabled needs a Redis: set ingest.queue.url, ingest.queue.existingSecret or "
        "cache.url" in result.stderr
    )


def test_the_schema_refuses_a_queue_url_that_is_not_redis(helm: Path) -> None:
    result = run_helm(
        helm, "template", RELEASE, str(CHART), "-f", str(VALUES["kubernetes"]), "--set",
        "ingest.queue.url=amqp://rabbit:5672//", "--kube-version", KUBE_VERSION,
    )  # fmt: skip
    assert result.returncode == 1
    assert "at '/ingest/queue/url': 'amqp://rabbit:5672//' does not match pattern" in result.stderr
