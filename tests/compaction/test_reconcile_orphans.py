"""The reconcile pass deletes a finished allocation's claim and holder pod once, and records that once (issue 16's
API outage test, tests/kube/test_api_outage_resend.py, found the same deletion audited twice): a claim it deleted
stays listed, deleting, until the DRA controller removes its finalizer, and a later pass leaves it to finish. The
adapter is faked at its boundary (fake_kube.py), its claims kept by a finalizer until the test lets them go."""

from __future__ import annotations

from typing import Any

import pytest

from allocations.cluster.reconcile import reconcile_cluster
from allocations.models import Allocation, Node
from tenants.models import AuditEvent
from tests.compaction.fake_kube import FakeKube, install
from tests.compaction.kube_world import on_cluster
from tests.compaction.world import Small, small_pool
from tests.conftest import World


@pytest.fixture
def cluster(world: World, monkeypatch: pytest.MonkeyPatch) -> tuple[Small, FakeKube]:
    small = small_pool(world)
    fake = install(monkeypatch)
    fake.nodes = tuple(Node.objects.values_list("name", flat=True))
    fake.finalizers = True
    return small, fake


def reconcile_records(allocation: Allocation) -> list[dict[str, object]]:
    rows = AuditEvent.objects.filter(object_type="allocation", object_id=str(allocation.pk), verb="reconcile")
    return list(rows.order_by("pk").values_list("after", flat=True))


def test_an_orphan_claim_still_being_deleted_is_neither_deleted_nor_recorded_again(
    cluster: tuple[Small, FakeKube], settings: Any
) -> None:
    small, fake = cluster
    # given: a released request whose claim and holder pod are still in the cluster (a late, stray apply)
    done = small.active("1g.10gb", gpu=0, start=0)
    on_cluster(fake, settings, done)
    Allocation.objects.filter(pk=done.pk).update(status=Allocation.Status.RELEASED)
    ns, name = done.namespace, done.kube_name
    # when: a reconcile pass runs
    assert reconcile_cluster().orphans == [f"{ns}/{name}"]
    # then: the pod is gone, the claim is deleting (its finalizer not removed yet), and the deletion recorded once
    assert fake.names(name) == ([name], [])
    assert (ns, name) in fake.deleting
    deleted = {"deleted": f"claim and holder pod {ns}/{name}: the allocation is released"}
    assert reconcile_records(done) == [deleted]
    # when: the next pass comes while the claim is still being deleted
    fake.calls.clear()
    report = reconcile_cluster()
    # then: it is left to finish: not deleted again, not recorded again
    assert report.orphans == []
    assert fake.calls["delete_resource_claim"] == fake.calls["delete_holder_pod"] == 0
    assert reconcile_records(done) == [deleted]
    # and: once it is gone, a pass has nothing to do
    fake.finalize()
    assert fake.names(name) == ([], [])
    assert reconcile_cluster().orphans == []
    assert reconcile_records(done) == [deleted]
