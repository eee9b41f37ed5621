"""A tenant's namespaces page, /tenants/<id>/namespaces/ (issue 17): platform admins list, assign and remove (refused
with the reason while a live request's claims are there); the tenant's managers and members read it; another
tenant's members get a 404. Bad input is a field error on the page (400), never a 500."""

from __future__ import annotations

import re

from django.test import Client

from allocations import services
from allocations.models import tenant_namespace
from allocations.services.tenant_namespaces import assign_namespace
from tenants.models import AuditEvent, TenantNamespace
from tests.conftest import World


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def url(world: World) -> str:
    return f"/tenants/{world.tenant_a.pk}/namespaces/"


def namespace_cells(html: str) -> list[str]:
    return re.findall(r'<td data-label="Namespace"><code>([^<]+)</code></td>', html)


def test_an_admin_assigns_from_the_tenants_page_and_removes_once_the_claims_are_gone(world: World) -> None:
    root = client_for(world.root)
    # given: the tenant's admin page links to its namespaces
    page = root.get(f"/manage/tenants/{world.tenant_a.pk}/").content.decode()
    assert f'href="{url(world)}"' in page
    # when: the admin assigns "ml-research"
    response = root.post(url(world), {"name": "ml-research"})
    # then: back on the page, listed after the portal-made one, as assigned by an admin
    assert response.status_code == 302
    html = root.get(url(world)).content.decode()
    assert namespace_cells(html) == [tenant_namespace(world.tenant_a), "ml-research"]
    assert "assigned by an admin" in html
    ns = TenantNamespace.objects.get(name="ml-research")
    assert ns.tenant == world.tenant_a

    # given: alice's request puts its claim there
    live, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="1g.10gb",
        count=1,
        lease_hours=2,
        purpose="own namespace",
        actor=world.alice,
        namespace="ml-research",
    )
    html = root.get(url(world)).content.decode()
    assert f'href="/requests/{live.pk}/"' in html
    # when: the admin tries to remove it
    response = root.post(f"{url(world)}{ns.pk}/remove/", follow=True)
    # then: refused, with the reason on the page
    assert response.status_code == 200
    assert "still holds the claims of 1 request(s); release them before removing the namespace" in (
        response.content.decode()
    )
    assert TenantNamespace.objects.filter(pk=ns.pk).exists()

    # when: the request is over, and the admin removes it
    services.release_allocation(allocation_id=live.pk, actor=world.alice)
    response = root.post(f"{url(world)}{ns.pk}/remove/", follow=True)
    # then: gone, audited
    assert "ml-research is no longer Team A" in response.content.decode()
    assert not TenantNamespace.objects.filter(pk=ns.pk).exists()
    assert AuditEvent.objects.filter(verb="remove_namespace").count() == 1


def test_bad_and_taken_names_are_field_errors_on_the_page(world: World) -> None:
    root = client_for(world.root)
    assign_namespace(tenant_id=world.tenant_b.pk, name="b-only", actor=world.root)
    for name, message in [
        ("Not_A_Name", "name"),
        ("fatia-team-b", "are the portal&#x27;s own"),
        ("b-only", "b-only belongs to tenant team-b; remove it there first."),
        ("", "This field is required."),
    ]:
        response = root.post(url(world), {"name": name})
        assert response.status_code == 400, name
        assert list(response.context["form"].errors) == ["name"], name
        assert message in response.content.decode(), name
    assert list(TenantNamespace.objects.values_list("name", flat=True)) == ["b-only"]


def test_members_and_managers_read_it_other_tenants_and_anonymous_do_not_and_only_admins_change(
    world: World,
) -> None:
    ns = assign_namespace(tenant_id=world.tenant_a.pk, name="ml-research", actor=world.root)
    for user in (world.alice, world.mallory):
        client = client_for(user)
        # the tenant's member and manager see both namespaces, without forms
        response = client.get(url(world))
        html = response.content.decode()
        assert response.status_code == 200
        assert namespace_cells(html) == [tenant_namespace(world.tenant_a), "ml-research"]
        assert 'id="namespace-form"' not in html
        assert "/remove/" not in html
        # and may change nothing
        assert client.post(url(world), {"name": "mine"}).status_code == 403
        assert client.post(f"{url(world)}{ns.pk}/remove/").status_code == 403
    # their quotas page links to it
    assert f'href="{url(world)}"' in client_for(world.alice).get("/quotas/").content.decode()
    # another tenant's member does not see that the tenant exists
    charlie = client_for(world.charlie)
    assert charlie.get(url(world)).status_code == 404
    assert charlie.post(url(world), {"name": "mine"}).status_code == 404
    assert charlie.post(f"{url(world)}{ns.pk}/remove/").status_code == 403
    # nobody signed in is sent to sign in
    assert Client().get(url(world)).status_code == 302
    # a namespace of another tenant is not removed through this tenant's page
    other = assign_namespace(tenant_id=world.tenant_b.pk, name="b-only", actor=world.root)
    assert client_for(world.root).post(f"{url(world)}{other.pk}/remove/").status_code == 404
    assert sorted(TenantNamespace.objects.values_list("name", flat=True)) == ["b-only", "ml-research"]
