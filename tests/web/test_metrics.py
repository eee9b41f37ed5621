"""GET /metrics (portal/metrics/): the token, and figures that equal what the database and the processes did."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import time_machine
from django.test import Client
from django.test.utils import override_settings
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from allocations import metrics as fleet_metrics
from allocations import services
from allocations.cluster import kube
from allocations.cluster.watcher import FleetDiscovery
from allocations.models import Allocation, ClaimedDevice, Gpu, Node, NodePool, SlicePlacement
from allocations.placement import pool_capacity
from allocations.selectors import fleet_pool_summaries
from allocations.services import provisioning
from allocations.tasks import reconcile_cluster_task
from portal.metrics import events
from tests.conftest import H100, World

TOKEN = "metrics-token-for-tests-0123456789"
AUTH = {"HTTP_AUTHORIZATION": f"Bearer {TOKEN}"}
POD_IP = "10.244.3.17:8000"

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def metrics_token(settings: Any) -> None:
    settings.FATIA_METRICS_TOKEN = TOKEN


def scrape(**headers: Any) -> str:
    response = Client().get("/metrics", HTTP_HOST=POD_IP, **(headers or AUTH))
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return response.content.decode()


def samples(text: str) -> list[Sample]:
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def value(text: str, name: str, **labels: str) -> float:
    found = [s.value for s in samples(text) if s.name == name and s.labels == labels]
    assert len(found) == 1, f"{name}{labels}: {found}"
    return found[0]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- the token ----------------------------------------------------------------------------------------------


def test_there_is_no_metrics_endpoint_without_a_token(settings: Any) -> None:
    # given
    settings.FATIA_METRICS_TOKEN = None
    # when: even with a bearer header
    response = Client().get("/metrics", HTTP_HOST="localhost", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    # then: the portal's ordinary 404
    assert response.status_code == 404


@pytest.mark.parametrize(
    "header",
    [None, "", "Bearer", "Bearer ", f"Basic {TOKEN}", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", "Bearer \x00"],
)
def test_a_missing_or_wrong_token_is_401_with_a_json_reason(header: str | None) -> None:
    headers = {} if header is None else {"HTTP_AUTHORIZATION": header}
    response = Client().get("/metrics", HTTP_HOST=POD_IP, **headers)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert json.loads(response.content) == {"detail": "Send the metrics token as 'Authorization: Bearer <token>'."}
    assert b"fatia_" not in response.content


def test_only_get_and_head_are_answered() -> None:
    response = Client().post("/metrics", HTTP_HOST=POD_IP, **AUTH)
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"


def test_prometheus_scrapes_the_pods_ip_with_the_token_and_the_scheme_in_any_case() -> None:
    text = scrape(HTTP_AUTHORIZATION=f"bearer {TOKEN}")
    assert "# TYPE fatia_requests gauge" in text


# --- figures from the database ------------------------------------------------------------------------------


def make_request(world: World, *, profile: str, count: int, actor: Any = None) -> Allocation:
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile=profile,
        count=count,
        lease_hours=4,
        purpose="metrics",
        actor=actor or world.alice,
    )
    return allocation


def test_requests_quotas_and_slices_equal_the_database(world: World) -> None:
    # given: two active requests of team A (1 and 2 x 1g.10gb), one pending (beyond auto-approval), one released
    active = [make_request(world, profile="1g.10gb", count=n) for n in (1, 2)]
    released = make_request(world, profile="1g.20gb", count=1, actor=world.mallory)
    for allocation in [*active, released]:
        services.provision_allocation(allocation_id=allocation.pk)
    services.release_allocation(allocation_id=released.pk, actor=world.mallory)
    provisioning.teardown_allocation(allocation_id=released.pk)  # what the worker's teardown task runs
    pending = make_request(world, profile="3g.40gb", count=2)
    assert pending.status == Allocation.Status.PENDING
    # when
    text = scrape()
    # then: requests by state, every state present
    assert value(text, "fatia_requests", pool="h100", state="active") == 2
    assert value(text, "fatia_requests", pool="h100", state="pending") == 1
    assert value(text, "fatia_requests", pool="h100", state="released") == 1
    assert value(text, "fatia_requests", pool="h100", state="failed") == 0
    # quota used and limit per tenant and pool: 3 x 1g.10gb = 3 compute, 3 memory slices
    assert value(text, "fatia_quota_compute_slices_used", tenant="team-a", pool="h100") == 3
    assert value(text, "fatia_quota_memory_slices_used", tenant="team-a", pool="h100") == 3
    assert value(text, "fatia_quota_compute_slices_limit", tenant="team-a", pool="h100") == 14
    assert value(text, "fatia_quota_memory_slices_limit", tenant="team-a", pool="h100") == 16
    assert value(text, "fatia_quota_compute_slices_used", tenant="team-b", pool="h100") == 0
    # slices in use per profile; fits-now equals what the API's capacity endpoint computes
    assert value(text, "fatia_slices_in_use", pool="h100", profile="1g.10gb") == 3
    assert value(text, "fatia_slices_in_use", pool="h100", profile="3g.40gb") == 0
    capacity = pool_capacity(world.pool)
    for profile, fits in capacity.items():
        assert value(text, "fatia_slices_fit_now", pool="h100", profile=profile) == fits
    assert capacity["7g.80gb"] == 15  # 16 GPUs, one holds the three 1g.10gb slices
    # the pool: 2 nodes x 8 GPUs, 7 compute slices each, fragmentation as the dashboard measures it
    assert value(text, "fatia_pool_gpus", pool="h100") == 16
    assert value(text, "fatia_pool_nodes", pool="h100", state="ready") == 2
    assert value(text, "fatia_pool_compute_slices", pool="h100") == 16 * 7
    assert value(text, "fatia_pool_compute_slices_used", pool="h100") == 3
    (summary,) = fleet_pool_summaries()
    assert value(text, "fatia_pool_free_compute_slices", pool="h100") == summary.fragmentation_free == 16 * 7 - 3
    assert value(text, "fatia_pool_stranded_compute_slices", pool="h100") == summary.fragmentation_stranded
    assert value(text, "fatia_pool_fragmentation_ratio", pool="h100") == pytest.approx(
        summary.fragmentation_stranded / summary.fragmentation_free
    )


def test_the_pool_figures_equal_the_dashboards_with_outside_devices_and_a_cordoned_node(world: World) -> None:
    # given: requests of several profiles on several GPUs, a second pool, a whole GPU and a 3g.40gb slice held by
    # claims made outside the portal, a cordoned node, and a request released again
    second = services.create_node_pool(name="Second", slug="second", gpu_model=H100, actor=world.root)
    node = services.register_node(pool_id=second.pk, name="second-node-0", gpu_count=4, actor=world.root)
    for profile, count in (("1g.10gb", 2), ("2g.20gb", 1), ("1g.20gb", 1), ("1g.10gb", 1)):
        services.provision_allocation(allocation_id=make_request(world, profile=profile, count=count).pk)
    gone = make_request(world, profile="1g.10gb", count=1)
    services.provision_allocation(allocation_id=gone.pk)
    services.release_allocation(allocation_id=gone.pk, actor=world.alice)
    gpus = list(Gpu.objects.filter(node__pool=world.pool).order_by("node__name", "index"))
    ClaimedDevice.objects.create(
        namespace="ml", claim_name="whole", claim_uid="u1", node_name="n", gpu=gpus[-1], device="gpu-15", size=8
    )
    ClaimedDevice.objects.create(
        namespace="ml", claim_name="part", claim_uid="u2", node_name="n", gpu=gpus[-2], device="mig-x",
        profile="3g.40gb", start=4, size=4,
    )  # fmt: skip
    Node.objects.filter(pk=node.pk).update(state=Node.State.CORDONED)
    # when
    figures = {f.slug: f for f in fleet_metrics.pool_figures()}
    summaries = {s.slug: s for s in fleet_pool_summaries()}
    # then: the same numbers, computed from per-GPU layouts joined in the database
    assert set(figures) == set(summaries) == {"h100", "second"}
    for slug, summary in summaries.items():
        mine = figures[slug]
        assert mine.fits_now == summary.fits_now
        assert (mine.stranded, mine.free) == (summary.fragmentation_stranded, summary.fragmentation_free)
        assert (mine.gpu_count, mine.compute_total, mine.compute_used) == (
            summary.gpu_count, summary.compute_total, summary.compute_used,
        )  # fmt: skip
        assert mine.node_states == summary.states
    ours = set(
        SlicePlacement.objects.filter(allocation__status=Allocation.Status.ACTIVE).values_list("gpu_id", flat=True)
    )
    assert not ours & {gpus[-1].pk, gpus[-2].pk}
    assert figures["h100"].fits_now["7g.80gb"] == 16 - len(ours) - 2  # whole GPUs: not ours, not held outside
    assert figures["second"].node_states == {"cordoned": 1}
    held = SlicePlacement.objects.filter(allocation__status__in=Allocation.QUOTA_HOLDING, allocation__pool=world.pool)
    placed = {p: held.filter(profile=p).count() for p in world.pool.profiles}
    assert figures["h100"].slices_in_use == placed
    # the released request is still releasing (its teardown task has not run): its slice is in use
    assert {p: n for p, n in placed.items() if n} == {"1g.10gb": 4, "2g.20gb": 1, "1g.20gb": 1}
    assert set(figures["second"].slices_in_use.values()) == {0}
    assert figures["second"].free == 0  # no ready GPU


def test_a_static_pool_reports_its_free_instances_and_what_fits_after_a_layout_change(world: World) -> None:
    # given: a static-agent pool whose 16 GPUs each publish a free 7g.80gb, beside a dynamic pool
    second = services.create_node_pool(name="Second", slug="second", gpu_model=H100, actor=world.root)
    services.register_node(pool_id=second.pk, name="second-node-0", gpu_count=1, actor=world.root)
    NodePool.objects.filter(pk=world.pool.pk).update(mig_mode=NodePool.MigMode.STATIC_AGENT)
    Gpu.objects.filter(node__pool=world.pool).update(
        static_instances=[{"profile": "7g.80gb", "start": 0, "size": 8, "uuid": "MIG-x", "device": "d"}]
    )
    # when
    text = scrape()
    # then: fit now counts the free instances; after a layout change, seven 1g.10gb per GPU
    assert value(text, "fatia_slices_fit_now", pool="h100", profile="7g.80gb") == 16
    assert value(text, "fatia_slices_fit_now", pool="h100", profile="1g.10gb") == 0
    assert value(text, "fatia_slices_fit_after_reconfiguration", pool="h100", profile="1g.10gb") == 16 * 7
    assert value(text, "fatia_slices_fit_now", pool="second", profile="1g.10gb") == 7
    assert not [
        s for s in samples(text) if s.name.startswith("fatia_slices_fit_after") and s.labels["pool"] == "second"
    ]


def test_no_label_carries_a_user_name_an_email_or_an_id(world: World) -> None:
    # given: requests by several users, and API calls that name a request by id in the path
    allocation = make_request(world, profile="1g.10gb", count=1)
    make_request(world, profile="1g.10gb", count=1, actor=world.mallory)
    client = world.client(world.alice)
    assert client.get(f"/api/v1/allocations/{allocation.pk}/", HTTP_HOST="localhost").status_code == 200
    assert client.get("/api/v1/allocations/987654/", HTTP_HOST="localhost").status_code == 404
    # when
    text = scrape()
    # then: label values are slugs, profiles, states, route names, methods and status classes only
    users = [world.alice, world.mallory, world.charlie, world.root]
    label_values = {v for s in samples(text) for k, v in s.labels.items() if k != "le"}
    for user in users:
        assert user.username not in label_values
        assert user.email not in text
    assert not [v for v in label_values if "/" in v or v.isdigit() or str(allocation.uuid) in v]
    assert "987654" not in text
    assert value(text, "fatia_http_request_duration_seconds_count", view="allocation-detail", method="GET",
                 status="2xx") == 1  # fmt: skip
    assert value(text, "fatia_http_request_duration_seconds_count", view="allocation-detail", method="GET",
                 status="4xx") == 1  # fmt: skip


def test_provisioning_latency_comes_from_the_requests_timestamps(world: World) -> None:
    # given: three requests that became active 0.3 s, 7 s and 4000 s after approval, and one still approved
    decided = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    for seconds in (0.3, 7, 4000):
        allocation = make_request(world, profile="1g.10gb", count=1)
        services.provision_allocation(allocation_id=allocation.pk)
        Allocation.objects.filter(pk=allocation.pk).update(
            decided_at=decided, activated_at=decided + timedelta(seconds=seconds)
        )
    make_request(world, profile="1g.10gb", count=1)
    # when
    text = scrape()
    # then: cumulative buckets, +Inf equal to the count, the sum in seconds
    bucket = {
        s.labels["le"]: s.value
        for s in samples(text)
        if s.name == "fatia_provisioning_duration_seconds_bucket" and s.labels["pool"] == "h100"
    }
    assert bucket["0.5"] == 1
    assert bucket["5.0"] == 1
    assert bucket["10.0"] == 2
    assert bucket["3600.0"] == 2
    assert bucket["+Inf"] == 3
    assert value(text, "fatia_provisioning_duration_seconds_count", pool="h100") == 3
    assert value(text, "fatia_provisioning_duration_seconds_sum", pool="h100") == pytest.approx(4007.3)


# --- figures the processes record ---------------------------------------------------------------------------


def test_http_latency_counts_every_request_by_route_method_and_status_class(world: World) -> None:
    # given
    client = world.client(world.alice)
    for _ in range(3):
        assert client.get("/api/v1/pools/", HTTP_HOST="localhost").status_code == 200
    assert client.post("/api/v1/allocations/", {"pool": "x"}, format="json", HTTP_HOST="localhost").status_code == 400
    assert Client().get("/no/such/page/", HTTP_HOST="localhost").status_code == 404
    # probes and /metrics itself are answered before the timing and are not counted
    assert Client().get("/healthz", HTTP_HOST=POD_IP).status_code == 200
    # when
    text = scrape()
    scrape()
    # then
    count = "fatia_http_request_duration_seconds_count"
    assert value(text, count, view="pool-list", method="GET", status="2xx") == 3
    assert value(text, count, view="allocation-list", method="POST", status="4xx") == 1
    assert value(text, count, view="unmatched", method="GET", status="4xx") == 1
    views = {s.labels["view"] for s in samples(text) if s.name == count}
    assert views == {"pool-list", "allocation-list", "unmatched"}


def test_every_histogram_has_monotonic_buckets_ending_in_its_count(world: World) -> None:
    # given: some requests and some provisioning
    for _ in range(2):
        allocation = make_request(world, profile="1g.10gb", count=1)
        services.provision_allocation(allocation_id=allocation.pk)
    Client().get("/login/", HTTP_HOST="localhost")
    text = scrape()
    # then
    histograms = [f for f in text_string_to_metric_families(text) if f.type == "histogram"]
    assert {f.name for f in histograms} == {
        "fatia_provisioning_duration_seconds",
        "fatia_http_request_duration_seconds",
    }
    for family in histograms:
        series: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
        counts: dict[tuple[tuple[str, str], ...], float] = {}
        for s in family.samples:
            key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
            if s.name.endswith("_bucket"):
                series.setdefault(key, []).append((float(s.labels["le"]), s.value))
            elif s.name.endswith("_count"):
                counts[key] = s.value
        assert series, family.name
        for key, buckets in series.items():
            buckets.sort()
            values = [v for _, v in buckets]
            assert values == sorted(values), (family.name, key)
            assert buckets[-1][0] == math.inf
            assert values[-1] == counts[key]


def test_a_dead_shared_cache_leaves_the_database_figures_and_says_so(world: World) -> None:
    with override_settings(CACHE_URL=f"redis://127.0.0.1:{closed_port()}/1"):
        text = scrape()
    assert value(text, "fatia_metrics_store_up") == 0
    assert value(text, "fatia_pool_gpus", pool="h100") == 16
    assert "fatia_http_request_duration_seconds" not in text
    assert value(scrape(), "fatia_metrics_store_up") == 1


def test_reconcile_and_discovery_passes_report_when_they_last_succeeded(world: World) -> None:
    # given: nothing has run yet
    text = scrape()
    assert [s for s in samples(text) if s.name.endswith("_last_success_timestamp_seconds")] == []
    # when: a reconcile pass (the beat's task, run here directly) and a discovery list, at known times
    with time_machine.travel(datetime(2026, 11, 30, 9, 0, tzinfo=UTC), tick=False):
        reconcile_cluster_task()
    with time_machine.travel(datetime(2026, 11, 30, 9, 5, tzinfo=UTC), tick=False):
        FleetDiscovery(EmptyCluster()).sync_once()
    # then
    text = scrape()
    assert (
        value(text, "fatia_reconcile_last_success_timestamp_seconds")
        == datetime(2026, 11, 30, 9, 0, tzinfo=UTC).timestamp()
    )
    assert (
        value(text, "fatia_discovery_last_success_timestamp_seconds")
        == datetime(2026, 11, 30, 9, 5, tzinfo=UTC).timestamp()
    )
    # and a discovery pass that cannot read the cluster leaves the time alone
    with pytest.raises(kube.KubeUnavailable):
        FleetDiscovery(UnreachableCluster()).sync_once()
    assert (
        value(scrape(), "fatia_discovery_last_success_timestamp_seconds")
        == datetime(2026, 11, 30, 9, 5, tzinfo=UTC).timestamp()
    )


class EmptyCluster:
    """The Kubernetes adapter's boundary (allocations/cluster/watcher.py, Adapter): a cluster with nothing in it."""

    def list_collection(self, kind: str, each: Any) -> str:
        return "1"

    def watch_collection(self, kind: str, resource_version: str, *, timeout_s: int) -> Any:
        return iter(())


class UnreachableCluster(EmptyCluster):
    def list_collection(self, kind: str, each: Any) -> str:
        raise kube.KubeUnavailable("the Kubernetes API is unreachable (test)")


def test_request_times_add_up_whether_or_not_they_are_whole_seconds() -> None:
    # given: a whole number of seconds after a fraction (Redis refuses to add an integer to "2.3")
    for seconds in (2.0, 0.3, 2.0, 11.0):
        events.observe_request(view="pool-list", method="GET", status=200, seconds=seconds)
    # when
    text = scrape()
    # then
    labels = {"view": "pool-list", "method": "GET", "status": "2xx"}
    assert value(text, "fatia_http_request_duration_seconds_count", **labels) == 4
    assert value(text, "fatia_http_request_duration_seconds_sum", **labels) == pytest.approx(15.3)
    assert value(text, "fatia_http_request_duration_seconds_bucket", le="2.5", **labels) == 3
    assert value(text, "fatia_http_request_duration_seconds_bucket", le="10.0", **labels) == 3
    assert value(text, "fatia_http_request_duration_seconds_bucket", le="+Inf", **labels) == 4
    assert value(text, "fatia_metrics_store_up") == 1


def test_the_token_can_come_from_a_file_as_kubernetes_mounts_secrets(tmp_path: Path) -> None:
    # given: the token in a file (a Secret mounted as a volume), not in the environment
    token_file = tmp_path / "token"
    token_file.write_text("from-a-file\n")
    env = {k: v for k, v in os.environ.items() if k != "FATIA_METRICS_TOKEN"}
    env.update(DEBUG="True", FATIA_METRICS_TOKEN_FILE=str(token_file), DJANGO_SETTINGS_MODULE="portal.settings")
    # when
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); from django.conf import settings; "
         "print(repr(settings.FATIA_METRICS_TOKEN))"],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    # then: read, without its newline
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "'from-a-file'"


def test_the_http_histograms_text_escapes_label_values_as_the_format_wants() -> None:
    # given: a name with a quote, a backslash and a newline (no URL pattern has one; the text must still parse)
    events.observe_request(view='odd"view\\name\nx', method="GET", status=500, seconds=0.02)
    # when
    text = scrape()
    # then
    odd = {"view": 'odd"view\\name\nx', "method": "GET", "status": "5xx"}
    assert value(text, "fatia_http_request_duration_seconds_bucket", le="0.01", **odd) == 0
    assert value(text, "fatia_http_request_duration_seconds_bucket", le="0.025", **odd) == 1
    assert value(text, "fatia_http_request_duration_seconds_count", **odd) == 1
