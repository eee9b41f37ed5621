"""Namespaces tenants own (issue 17), on PostgreSQL: platform admins assign and remove them through the API, members
see only their tenants', a request names one from its tenant's list (400 with a field message otherwise), and a
namespace holding a live request's claims cannot leave."""

from __future__ import annotations

from typing import Any

import pytest

from allocations import services
from allocations.models import Allocation, OutboxMessage, tenant_namespace
from allocations.services.outbox import has_open_message
from allocations.services.tenant_namespaces import BIND_TASK, UNBIND_TASK, assign_namespace, chosen_namespace
from tenants.models import AuditEvent, TenantNamespace
from tests.conftest import World

URL = "/api/v1/namespaces/"


def assign(world: World, name: str, tenant: Any = None) -> Any:
    return world.client(world.root).post(URL, {"tenant": (tenant or world.tenant_a).pk, "name": name}, format="json")


def request_body(world: World, **extra: Any) -> dict[str, Any]:
    return {
        "tenant": world.tenant_a.pk,
        "pool": world.pool.pk,
        "profile": "1g.10gb",
        "count": 1,
        "lease_hours": 8,
        "purpose": "notebook",
        **extra,
    }


def test_an_admin_assigns_a_namespace_and_members_see_only_their_tenants(world: World) -> None:
    # when: root gives team A the namespace "ml-research"
    response = assign(world, "ml-research")
    # then: 201, recorded and audited
    assert response.status_code == 201, response.content
    assert response.json()["name"] == "ml-research"
    assert response.json()["origin"] == "assigned"
    event = AuditEvent.objects.get(verb="assign_namespace")
    assert (event.actor_name, event.tenant_id, event.after["name"]) == ("root", world.tenant_a.pk, "ml-research")
    # and: alice (team A) sees A's portal-made namespace first, then the assigned one
    listed = world.client(world.alice).get(URL).json()
    assert [(n["name"], n["origin"]) for n in listed] == [
        (tenant_namespace(world.tenant_a), "portal"),
        ("ml-research", "assigned"),
    ]
    # and: charlie (team B) sees only B's
    assert [n["name"] for n in world.client(world.charlie).get(URL).json()] == [tenant_namespace(world.tenant_b)]
    # and: root sees every tenant's, and may filter by tenant
    assert len(world.client(world.root).get(URL).json()) == 3
    only_b = world.client(world.root).get(URL, {"tenant": world.tenant_b.pk}).json()
    assert [n["name"] for n in only_b] == [tenant_namespace(world.tenant_b)]
    # and: a tenant filter that is no id is a 400 on the field, never a 500 ("²" is a digit only to str.isdigit)
    for bad in ("team-a", "\u00b2"):
        response = world.client(world.root).get(URL, {"tenant": bad})
        assert (response.status_code, list(response.json()["errors"])) == (400, ["tenant"])
    assert world.client(world.root).get(URL, {"tenant": "99999999999999999999"}).json() == []


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("ML_Research", "A namespace name"),
        ("-starts-with-dash", "A namespace name"),
        ("x" * 64, "63"),
        ("fatia-team-c", "the portal's own"),
        ("kube-system", "credentials"),
        ("kube-node-lease", "credentials"),
        ("gpu-operator", "credentials"),  # NVIDIA's MIG manager (FATIA_MIG_MANAGER_NAMESPACE)
        ("dra-driver-nvidia-gpu", "credentials"),  # NVIDIA's DRA kubelet plugin (FATIA_DRA_PLUGIN_NAMESPACE)
    ],
)
def test_a_bad_namespace_name_is_a_400_with_a_field_message(world: World, name: str, message: str) -> None:
    response = assign(world, name)
    assert response.status_code == 400
    assert message in " ".join(response.json()["errors"]["name"])
    assert not TenantNamespace.objects.exists()


def test_the_namespaces_of_the_portals_and_the_agents_service_accounts_are_never_a_tenants(
    world: World, settings: Any
) -> None:
    # given: the portal and the node agent run as service accounts of namespaces without the portal's prefix
    settings.FATIA_KUBE_PORTAL_SERVICE_ACCOUNT = "gpu-portal:fatia-portal"
    settings.FATIA_AGENT_SERVICE_ACCOUNT = "gpu-agents:fatia-agent"
    # when: root gives team A either of them
    # then: 400 with the reason on the field (a member's pod there could run as the portal or the agent)
    for name in ("gpu-portal", "gpu-agents"):
        response = assign(world, name)
        assert response.status_code == 400, response.content
        assert "credentials" in " ".join(response.json()["errors"]["name"])
    assert not TenantNamespace.objects.exists()


def test_a_namespace_of_another_tenant_is_refused_and_assigning_again_is_harmless(world: World) -> None:
    # given: "shared-ns" is team A's
    assert assign(world, "shared-ns").status_code == 201
    # when/then: giving it to B is refused with the reason in `name`
    response = assign(world, "shared-ns", world.tenant_b)
    assert response.status_code == 400
    assert "belongs to tenant team-a" in response.json()["errors"]["name"][0]
    # and: giving it to A again changes nothing
    assert assign(world, "shared-ns").status_code == 201
    assert TenantNamespace.objects.filter(name="shared-ns").count() == 1
    assert AuditEvent.objects.filter(verb="assign_namespace").count() == 1


def test_a_request_names_one_of_its_tenants_namespaces_or_gets_a_400(world: World) -> None:
    # given: team A owns "ml-research", team B owns "b-only"
    assign(world, "ml-research")
    assign(world, "b-only", world.tenant_b)
    alice = world.client(world.alice)
    # when: alice names B's namespace, or one nobody owns
    for wrong in ("b-only", "nowhere"):
        response = alice.post("/api/v1/allocations/", request_body(world, namespace=wrong), format="json")
        # then: 400 with the namespace field saying what she may choose, nothing created
        assert response.status_code == 400, response.content
        assert f"{wrong} is not one of team-a's namespaces" in response.json()["errors"]["namespace"][0]
        assert "ml-research" in response.json()["errors"]["namespace"][0]
    assert not Allocation.objects.exists()
    # when: she names A's own
    made = alice.post("/api/v1/allocations/", request_body(world, namespace="ml-research"), format="json")
    # then: the claims go there
    assert made.status_code == 201, made.content
    assert made.json()["namespace"] == "ml-research"
    # and: naming nothing, or the portal-made one, means the portal-made one
    for default in ("", tenant_namespace(world.tenant_a)):
        plain = alice.post("/api/v1/allocations/", request_body(world, namespace=default), format="json")
        assert plain.json()["namespace"] == tenant_namespace(world.tenant_a)
        assert Allocation.objects.get(pk=plain.json()["id"]).namespace_name == ""


def test_the_schema_documents_the_409_of_a_namespace_that_cannot_leave(world: World) -> None:
    schema = world.client(world.alice).get("/api/v1/schema/", {"format": "json"}).json()
    assert "409" in schema["paths"]["/api/v1/namespaces/{id}/"]["delete"]["responses"]


def test_a_namespace_with_a_live_request_cannot_leave_until_it_is_released(world: World) -> None:
    # given: an active request in team A's "ml-research"
    ns_id = assign(world, "ml-research").json()["id"]
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="1g.10gb",
        count=1,
        lease_hours=8,
        purpose="p",
        actor=world.alice,
        namespace="ml-research",
    )
    services.provision_allocation(allocation_id=allocation.pk)
    root = world.client(world.root)
    # when: root removes the namespace
    response = root.delete(f"{URL}{ns_id}/")
    # then: 409, it stays
    assert response.status_code == 409
    assert "still holds the claims of 1 request" in response.json()["errors"]["namespace"][0]
    assert TenantNamespace.objects.filter(pk=ns_id).exists()
    # when: released, then removed
    services.release_allocation(allocation_id=allocation.pk, actor=world.alice)
    services.provisioning.teardown_allocation(allocation_id=allocation.pk)
    assert root.delete(f"{URL}{ns_id}/").status_code == 204
    # then: gone, audited, and the request still says where its claims were
    assert not TenantNamespace.objects.filter(pk=ns_id).exists()
    assert AuditEvent.objects.get(verb="remove_namespace").before["name"] == "ml-research"
    assert Allocation.objects.get(pk=allocation.pk).namespace == "ml-research"


def test_with_the_kubernetes_backend_joining_and_leaving_are_sent_through_the_outbox(
    world: World, settings: Any
) -> None:
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    ns_id = assign(world, "ml-research").json()["id"]
    assert has_open_message(BIND_TASK, ns_id)
    assert world.client(world.root).delete(f"{URL}{ns_id}/").status_code == 204
    assert has_open_message(UNBIND_TASK, "ml-research")


def test_the_chosen_namespace_is_stored_only_when_it_is_not_the_default(world: World) -> None:
    TenantNamespace.objects.create(tenant=world.tenant_a, name="ml-research")
    assert chosen_namespace(world.tenant_a, None) == ""
    assert chosen_namespace(world.tenant_a, tenant_namespace(world.tenant_a)) == ""
    assert chosen_namespace(world.tenant_a, "ml-research") == "ml-research"


def test_an_admin_assigning_an_owned_namespace_again_applies_its_bindings_again_discovery_does_not(
    world: World, settings: Any
) -> None:
    # given: the kubernetes backend, and a namespace team A owns
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    ns_id = assign(world, "ml-research").json()["id"]
    # when: an admin assigns it to team A again (the cluster check's remedy for a deleted binding)
    assert assign(world, "ml-research").status_code == 201
    # and discovery finds its label again
    assign_namespace(
        tenant_id=world.tenant_a.pk, name="ml-research", actor=None, source=TenantNamespace.Source.LABELLED
    )
    # then: one more bind queued, by the admin only; still one row
    assert OutboxMessage.objects.filter(task_name=BIND_TASK, args=[ns_id]).count() == 2
    assert TenantNamespace.objects.filter(name="ml-research").count() == 1
