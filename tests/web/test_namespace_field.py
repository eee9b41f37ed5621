"""The request form's namespace choice (issue 17): hidden while the tenant has only its portal-made namespace, a
select of the tenant's namespaces once it owns more; a value outside the list is a field error on the page."""

from __future__ import annotations

from django.test import Client

from allocations.models import Allocation, tenant_namespace
from allocations.services.tenant_namespaces import assign_namespace
from tests.conftest import World
from tests.web.test_pages import new_request_data


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_namespace_is_hidden_until_the_tenant_owns_one_then_chosen_from_its_list(world: World) -> None:
    alice = client_for(world.alice)
    # given: team A has only its portal-made namespace
    html = alice.get("/requests/new/").content.decode()
    # then: nothing to choose
    assert 'type="hidden" name="namespace"' in html
    assert "Namespace for the claims" not in html
    # when: an admin gives team A "ml-research"
    assign_namespace(tenant_id=world.tenant_a.pk, name="ml-research", actor=world.root)
    html = alice.get("/requests/new/").content.decode()
    # then: a select with A's namespaces, the portal-made one first
    assert "Namespace for the claims" in html
    assert html.index(f'value="{tenant_namespace(world.tenant_a)}"') < html.index('value="ml-research"')
    # when: she chooses it
    response = alice.post("/requests/new/", new_request_data(world, namespace="ml-research"))
    # then: the request's claims go there
    assert response.status_code == 302
    assert Allocation.objects.get().namespace == "ml-research"


def test_a_namespace_outside_the_list_is_a_field_error_on_the_page(world: World) -> None:
    assign_namespace(tenant_id=world.tenant_b.pk, name="b-only", actor=world.root)
    response = client_for(world.alice).post("/requests/new/", new_request_data(world, namespace="b-only"))
    assert response.status_code == 400
    assert list(response.context["form"].errors) == ["namespace"]
    assert Allocation.objects.count() == 0
