"""The cluster check page, /manage/cluster-check/: platform admins only; a GET reads the last report and never
asks the cluster; the button queues one check_cluster_task (a second click while it waits queues nothing); the
task's report then shows, one row per check. The adapter is faked at its boundary (tests/kube/fake_cluster.py)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import time_machine
from celery.exceptions import SoftTimeLimitExceeded
from django.test import Client
from django.utils import timezone

from allocations import tasks
from allocations.cluster import check_runs, kube
from tests.conftest import World
from tests.kube.fake_cluster import PORTAL, FakeCluster, RefusingCluster

URL = "/manage/cluster-check/"


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture(autouse=True)
def kubernetes_backend(settings):
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"


def rows(html: str) -> list[tuple[str, str, str]]:
    """(check, result, found) per row of the results table."""
    return [
        (title, level, re.sub(r"<[^>]+>", " ", found).split("  ")[0].strip())
        for title, level, found in re.findall(
            r'<tr data-check="[^"]+">\s*<th scope="row">([^<]+)</th>\s*<td data-label="Result"><span class="badge '
            r'[^"]+">(\w+)</span></td>\s*<td data-label="Found">(.*?)</td>',
            html,
            re.S,
        )
    ]


def test_anonymous_visitors_go_to_the_login_page(world: World):
    # when
    response = Client().get(URL)
    # then
    assert (response.status_code, response["Location"]) == (302, f"/login/?next={URL}")


@pytest.mark.parametrize("username", ["alice", "mallory"])
def test_members_and_managers_get_403_and_queue_nothing(
    world: World, username: str, monkeypatch, django_capture_on_commit_callbacks
):
    # given
    RefusingCluster().install(monkeypatch)
    client = client_for(getattr(world, username))

    # when
    with django_capture_on_commit_callbacks() as callbacks:
        got = client.get(URL)
        posted = client.post(URL)

    # then
    assert (got.status_code, posted.status_code) == (403, 403)
    assert callbacks == []
    assert check_runs.read_cluster_check().pending is False


def test_the_page_reads_the_last_report_and_never_the_cluster(world: World, monkeypatch):
    # given: any call to the cluster fails the test
    RefusingCluster().install(monkeypatch)

    # when
    response = client_for(world.root).get(URL)

    # then
    html = response.content.decode()
    assert response.status_code == 200
    assert "No check has run yet." in html
    assert 'http-equiv="refresh"' not in html
    assert rows(html) == []


def test_the_button_queues_one_check_and_a_second_click_queues_nothing(
    world: World, monkeypatch, django_capture_on_commit_callbacks
):
    # given
    RefusingCluster().install(monkeypatch)
    client = client_for(world.root)

    # when
    with django_capture_on_commit_callbacks() as first:
        response = client.post(URL, follow=True)
    with django_capture_on_commit_callbacks() as second:
        again = client.post(URL, follow=True)

    # then
    assert [c.func.__self__.name for c in first] == [tasks.check_cluster_task.name]
    assert second == []
    html = response.content.decode()
    assert "The check is queued; this page shows its report when a worker has run it." in html
    assert "Asked for by root at " in html
    assert '<meta http-equiv="refresh" content="3">' in html
    assert re.search(r'<button type="submit" class="button button--primary" disabled>Run the check</button>', html)
    assert "A check is already waiting for a worker" in again.content.decode()


def test_the_task_s_report_shows_one_row_per_check(world: World, monkeypatch, settings):
    # given: a cluster without the MIG DeviceClass, a GPU node without slices, and a short holder image name
    settings.FATIA_HOLDER_IMAGE = "pause:3.10"
    settings.FATIA_KUBE_NAMESPACE_PREFIX = "fatia-"
    fake = FakeCluster(device_classes=("gpu.nvidia.com",), gpu_nodes=("gpu-a", "gpu-b", "gpu-c")).install(monkeypatch)
    client = client_for(world.root)
    client.post(URL)

    # when: a worker runs the task
    tasks.check_cluster_task()
    calls = len(fake.calls)
    response = client.get(URL)

    # then
    html = response.content.decode()
    assert len(fake.calls) == calls  # the page asked nothing
    assert check_runs.read_cluster_check().pending is False
    assert 'http-equiv="refresh"' not in html
    assert re.search(
        r'<span class="badge badge--failed">FAIL</span> 1 blocking problem, 2 warnings\. Checked \d{4}-\d\d-\d\d '
        rf"\d\d:\d\d:\d\d UTC against <code>https://kube.example.com:6443</code> as <code>{PORTAL}</code>\.",
        html,
    )
    assert rows(html) == [
        ("Backend", "OK", "FATIA_CLUSTER_BACKEND is kubernetes."),
        ("API server", "OK", "https://kube.example.com:6443 runs Kubernetes v1.37.2 (1.34 or later needed)."),
        (
            "resource.k8s.io/v1",
            "OK",
            "resource.k8s.io/v1 is served with resourceclaims, resourceslices, deviceclasses, devicetaintrules.",
        ),
        (
            "NVIDIA DeviceClasses",
            "FAIL",
            "Missing: mig.nvidia.com, vfio.gpu.nvidia.com. The portal&#x27;s claims name mig.nvidia.com.",
        ),
        (
            "Driver ResourceSlices",
            "WARN",
            "2 of 3 GPU nodes publish the driver&#x27;s ResourceSlices (GPU driver 580.95.5).",
        ),
        ("MIG mode", "OK", "2 nodes DynamicMIG."),
        (
            "Portal permissions",
            "OK",
            f"{PORTAL} may use all 51 verbs the portal uses on 12 resources, in every namespace.",
        ),
        ("Extra permissions", "OK", "Nothing beyond what the portal needs (1 namespace reviewed: fatia-system)."),
        (
            "Pod Security",
            "OK",
            "No tenant namespace yet; each one the portal makes is labelled "
            "pod-security.kubernetes.io/enforce=restricted.",
        ),
        ("Tenant namespaces", "OK", "No tenant namespace yet."),
        (
            "Holder image",
            "WARN",
            "FATIA_HOLDER_IMAGE pause:3.10 names no registry, so each node&#x27;s container runtime picks one (or "
            "refuses it).",
        ),
    ]
    assert "<li>No slices: gpu-c.</li>" in html


def test_a_check_no_worker_answers_says_what_to_look_at_and_the_button_works_again(world: World, monkeypatch):
    # given: a check asked for, and no worker to run it
    RefusingCluster().install(monkeypatch)
    client = client_for(world.root)
    client.post(URL)

    # when: well past the time a run may take
    with time_machine.travel(timezone.now() + timedelta(seconds=181), tick=False):
        html = client.get(URL).content.decode()

    # then
    assert "no worker has answered in 181 s. Is a Celery worker running" in html
    assert 'http-equiv="refresh"' not in html
    assert '<button type="submit" class="button button--primary">Run the check</button>' in html


def test_a_check_past_its_time_limit_says_so(world: World, monkeypatch):
    # given: the API server takes so long that Celery's soft time limit ends the run
    def slow() -> kube.ServerVersion:
        raise SoftTimeLimitExceeded()

    FakeCluster().install(monkeypatch)
    monkeypatch.setattr(kube, "read_server_version", slow)
    client_for(world.root).post(URL)

    # when
    tasks.check_cluster_task()
    html = client_for(world.root).get(URL).content.decode()

    # then
    assert rows(html) == [("Check", "FAIL", "The check did not finish within 120 s.")]
    assert check_runs.read_cluster_check().pending is False
