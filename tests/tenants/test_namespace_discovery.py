"""Namespaces found by their `fatia.io/tenant` label (issue 17), on PostgreSQL, with the namespace listing faked at
the Kubernetes adapter (namespace_rbac.labelled_namespaces): labelled ones join, an unlabelled one leaves unless
its claims live, portal-made ones and admin-assigned ones are left alone."""

from __future__ import annotations

from typing import Any

import pytest

from allocations import services
from allocations.cluster import namespace_discovery, namespace_rbac
from allocations.models import tenant_namespace
from allocations.services.tenant_namespaces import assign_namespace
from tenants.models import AuditEvent, TenantNamespace
from tests.conftest import World


@pytest.fixture
def labelled(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    found: dict[str, str] = {}
    monkeypatch.setattr(namespace_rbac, "labelled_namespaces", lambda: dict(found))
    return found


def owned() -> list[tuple[str, str, str]]:
    return list(TenantNamespace.objects.order_by("name").values_list("name", "tenant__slug", "source"))


def test_a_labelled_namespace_joins_its_tenant_and_leaves_when_the_label_goes(
    world: World, labelled: dict[str, str]
) -> None:
    # given: an admin labelled "ml-a" for team A and "ghost" for a tenant that does not exist; and the portal-made
    # namespace carries the label too
    labelled.update({"ml-a": "team-a", "ghost": "team-z", tenant_namespace(world.tenant_a): "team-a"})
    # when
    report = namespace_discovery.discover_labelled_namespaces()
    # then: ml-a is team A's (labelled, audited as discovery), ghost is refused, the portal-made one is not a row
    assert owned() == [("ml-a", "team-a", "labelled")]
    assert report.joined == ["ml-a"]
    assert report.refused == ["ghost: no tenant 'team-z'"]
    assert AuditEvent.objects.get(verb="assign_namespace").actor_name == "discovery"
    # when: a second pass finds the same
    assert namespace_discovery.discover_labelled_namespaces().joined == []
    # when: the label is removed
    del labelled["ml-a"]
    report = namespace_discovery.discover_labelled_namespaces()
    # then: it leaves
    assert report.left == ["ml-a"]
    assert owned() == []


def test_an_unlabelled_namespace_with_live_claims_stays_and_assigned_ones_are_never_removed(
    world: World, labelled: dict[str, str]
) -> None:
    # given: "ml-a" found by its label and holding an active request; "by-hand" assigned by an admin, unlabelled
    labelled["ml-a"] = "team-a"
    namespace_discovery.discover_labelled_namespaces()
    assign_namespace(tenant_id=world.tenant_a.pk, name="by-hand", actor=world.root)
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="1g.10gb",
        count=1,
        lease_hours=8,
        purpose="p",
        actor=world.alice,
        namespace="ml-a",
    )
    services.provision_allocation(allocation_id=allocation.pk)
    # when: the label goes
    labelled.clear()
    report = namespace_discovery.discover_labelled_namespaces()
    # then: ml-a stays while its claims live (said in the report), by-hand stays as an admin's
    assert report.left == []
    assert report.refused[0].startswith("ml-a: ml-a still holds the claims of 1 request")
    assert owned() == [("by-hand", "team-a", "assigned"), ("ml-a", "team-a", "labelled")]


def test_a_labelled_namespace_of_another_tenant_is_refused(world: World, labelled: dict[str, Any]) -> None:
    assign_namespace(tenant_id=world.tenant_a.pk, name="contested", actor=world.root)
    labelled["contested"] = "team-b"
    report = namespace_discovery.discover_labelled_namespaces()
    assert report.joined == []
    assert owned() == [("contested", "team-a", "assigned")]
