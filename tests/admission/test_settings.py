"""A pool's admission setting (issue 14): platform admins change it through the API and the admission page, with
field errors as 400s; static and shared pools refuse it with why; the pools page shows it."""

from __future__ import annotations

import pytest
from django.test import Client

from allocations import services
from allocations.models import NodePool
from tenants.models import AuditEvent
from tests.conftest import World
from tests.queue.helpers import H100

pytestmark = pytest.mark.django_db


def patch(world: World, pool: NodePool, body: dict, user=None):
    return world.client(user or world.root).patch(f"/api/v1/pools/{pool.pk}/", body, format="json")


def setting(pool: NodePool) -> tuple[str, int]:
    pool.refresh_from_db()
    return pool.admission, pool.max_hold_minutes


def test_a_platform_admin_turns_holding_on_with_a_bound_and_the_api_shows_it(world: World):
    response = patch(world, world.pool, {"admission": "hold", "max_hold_minutes": 30})
    assert response.status_code == 200, response.json()
    assert (response.json()["admission"], response.json()["max_hold_minutes"]) == ("hold", 30)
    assert setting(world.pool) == ("hold", 30)
    event = AuditEvent.objects.filter(verb="update", object_type="nodepool").latest("id")
    assert (event.before["admission"], event.after["admission"], event.after["max_hold_minutes"]) == ("off", "hold", 30)
    assert world.client(world.alice).get(f"/api/v1/pools/{world.pool.pk}/").json()["admission"] == "hold"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"admission": "sometimes"}, "admission"),
        ({"max_hold_minutes": 0}, "max_hold_minutes"),
        ({"max_hold_minutes": 1441}, "max_hold_minutes"),
        ({"max_hold_minutes": "soon"}, "max_hold_minutes"),
    ],
)
def test_bad_values_are_400s_on_the_field_and_change_nothing(world: World, body: dict, field: str):
    response = patch(world, world.pool, body)
    assert response.status_code == 400
    assert list(response.json()["errors"]) == [field]
    assert setting(world.pool) == ("off", 15)


def test_a_manager_may_not_change_it(world: World):
    assert patch(world, world.pool, {"admission": "hold"}, user=world.mallory).status_code == 403
    assert setting(world.pool) == ("off", 15)


def test_static_and_shared_pools_refuse_holding_saying_why(world: World):
    static = services.create_node_pool(
        name="Static", slug="static", gpu_model=H100, actor=world.root, mig_mode=NodePool.MigMode.STATIC_AGENT
    )
    shared = services.create_node_pool(name="L4", slug="l4", gpu_model="NVIDIA L4", kind="shared", actor=world.root)
    on_static = patch(world, static, {"admission": "hold"})
    on_shared = patch(world, shared, {"admission": "hold"})
    assert on_static.status_code == on_shared.status_code == 400
    assert on_static.json()["errors"]["admission"] == [
        "Holding requests does not apply to Static. Static MIG pools place requests on pre-created instances (or "
        "reshape a GPU for them): the layout is the admin's, not chosen per request, so holding a request keeps no "
        "room. Use a dynamic MIG pool."
    ]
    assert on_shared.json()["errors"]["admission"][0].startswith(
        "Holding requests does not apply to L4. Time-sliced pools share whole GPUs by memory size: there are no MIG "
        "slots"
    )
    assert setting(static) == setting(shared) == ("off", 15)
    # and: a pool that holds cannot become static under it (turn admission off in the same change)
    patch(world, world.pool, {"admission": "hold"})
    moved = patch(world, world.pool, {"mig_mode": "static-agent"})
    assert moved.status_code == 400 and list(moved.json()["errors"]) == ["admission"]
    both = patch(world, world.pool, {"mig_mode": "static-agent", "admission": "off"})
    assert both.status_code == 200, both.json()


def test_the_admission_page_shows_and_changes_the_setting(world: World):
    client = Client()
    client.force_login(world.root)
    url = f"/manage/pools/{world.pool.pk}/admission/"
    page = client.get(url)
    assert page.status_code == 200
    assert 'Now: <span class="chip">off</span> places whatever fits.' in page.content.decode()
    saved = client.post(url, {"admission": "hold", "max_hold_minutes": "20"})
    assert saved.status_code == 302 and saved["Location"] == url
    assert setting(world.pool) == ("hold", 20)
    assert "holds requests</span> at most 20 min" in client.get(url).content.decode()
    # and: the pools page says it, with the link
    pools = client.get("/manage/pools/").content.decode()
    assert f'<a href="{url}">Admission</a>: holds requests, at most 20 min' in pools


def test_the_admission_page_answers_bad_input_with_400_and_the_error_by_the_field(world: World):
    client = Client()
    client.force_login(world.root)
    static = services.create_node_pool(
        name="Static", slug="static", gpu_model=H100, actor=world.root, mig_mode=NodePool.MigMode.STATIC_AGENT
    )
    bad = client.post(f"/manage/pools/{world.pool.pk}/admission/", {"admission": "hold", "max_hold_minutes": "0"})
    assert bad.status_code == 400
    assert "Ensure this value is greater than or equal to 1." in bad.content.decode()
    refused = client.post(f"/manage/pools/{static.pk}/admission/", {"admission": "hold", "max_hold_minutes": "15"})
    assert refused.status_code == 400
    assert "Holding requests does not apply to Static." in refused.content.decode()
    assert setting(world.pool) == setting(static) == ("off", 15)


def test_the_admission_page_is_for_platform_admins(world: World):
    client = Client()
    client.force_login(world.mallory)
    url = f"/manage/pools/{world.pool.pk}/admission/"
    assert client.get(url).status_code == 403
    assert client.post(url, {"admission": "hold", "max_hold_minutes": "20"}).status_code == 403
    assert setting(world.pool) == ("off", 15)
    client.force_login(world.root)
    assert client.get("/manage/pools/999999/admission/").status_code == 404
