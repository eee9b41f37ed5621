"""What a pool's holder pods tolerate (issue 10): the usual GPU node taint by default, edited by platform admins
through the API and the pools page, checked against Kubernetes' rules for a toleration."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from allocations import services
from allocations.models import NodePool
from tenants.errors import InvalidInput
from tenants.models import AuditEvent
from tests.conftest import World

GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_new_pool_tolerates_the_usual_gpu_node_taint(world: World) -> None:
    # when
    created = world.client(world.root).post(
        "/api/v1/pools/", {"name": "H200", "slug": "h200", "gpu_model": "NVIDIA H200"}, format="json"
    )
    # then
    assert created.status_code == 201
    assert created.json()["tolerations"] == [GPU_TAINT]
    assert NodePool.objects.get(slug="h200").tolerations == [GPU_TAINT]
    assert world.pool.tolerations == [GPU_TAINT]


def test_an_admin_sets_a_pools_tolerations_and_the_change_is_audited(world: World) -> None:
    # given
    tolerations = [
        {"key": "dedicated", "operator": "Equal", "value": "ml-team", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
        {"key": "nvidia.com/gpu", "effect": "NoSchedule", "value": "present"},  # operator Equal by default
    ]
    # when
    response = world.client(world.root).patch(f"/api/v1/pools/{world.pool.pk}/", {"tolerations": tolerations}, "json")
    # then: stored normalised (operator always given, fields in Kubernetes' order)
    assert response.status_code == 200
    expected = [
        {"key": "dedicated", "operator": "Equal", "value": "ml-team", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
    ]
    assert response.json()["tolerations"] == expected
    world.pool.refresh_from_db()
    assert world.pool.tolerations == expected
    event = AuditEvent.objects.filter(verb="update", object_type="nodepool").get()
    assert (event.before["tolerations"], event.after["tolerations"]) == ([GPU_TAINT], expected)


@pytest.mark.parametrize(
    ("tolerations", "message"),
    [
        (
            [{"key": "nvidia.com/gpu", "operator": "In", "effect": "NoSchedule"}],
            "Toleration 1: the operator is Exists or Equal, not 'In'.",
        ),
        (
            [GPU_TAINT, {"key": "nvidia.com/gpu", "operator": "Exists", "value": "present"}],
            "Toleration 2: with the operator Exists the value must be empty.",
        ),
        (
            [{"operator": "Equal", "value": "x"}],
            "Toleration 1: a toleration without a key tolerates every taint and needs the operator Exists.",
        ),
        (
            [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedul"}],
            "Toleration 1: the effect is one of NoSchedule, PreferNoSchedule, NoExecute (or empty: every effect), "
            "not 'NoSchedul'.",
        ),
        (
            [{"key": "a", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 30}],
            "Toleration 1: tolerationSeconds goes only with the effect NoExecute.",
        ),
        (
            [{"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": "30"}],
            "Toleration 1: tolerationSeconds is a whole number of seconds.",
        ),
        (
            [{"key": "Nvidia.COM/gpu", "operator": "Exists"}],
            "Toleration 1: the key prefix 'Nvidia.COM' is not a DNS subdomain "
            "(lowercase letters, digits, '-' and '.').",
        ),
        (
            [{"key": "gpu taint", "operator": "Exists"}],
            "Toleration 1: the key 'gpu taint' is not a qualified name (up to 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit, after an optional DNS prefix and '/').",
        ),
        (
            [{"key": "a", "value": "x" * 64}],
            f"Toleration 1: the value '{'x' * 64}' is not a label value (up to 63 letters, digits, '-', '_' or '.').",
        ),
        (
            [{"key": "a", "operator": "Exists", "effects": "NoSchedule"}],
            "Toleration 1: unknown field effects (known: key, operator, value, effect, tolerationSeconds).",
        ),
    ],
)
def test_a_malformed_toleration_is_a_400_with_a_field_message_and_changes_nothing(
    world: World, tolerations: list[dict[str, Any]], message: str
) -> None:
    # when
    response = world.client(world.root).patch(f"/api/v1/pools/{world.pool.pk}/", {"tolerations": tolerations}, "json")
    # then
    assert response.status_code == 400
    assert response.json()["errors"] == {"tolerations": [message]}
    world.pool.refresh_from_db()
    assert world.pool.tolerations == [GPU_TAINT]
    assert not AuditEvent.objects.filter(verb="update", object_type="nodepool").exists()


def test_tolerations_that_are_not_a_list_of_objects_are_refused_by_the_api(world: World) -> None:
    # when
    not_a_list = world.client(world.root).patch(
        f"/api/v1/pools/{world.pool.pk}/", {"tolerations": "nvidia.com/gpu"}, "json"
    )
    not_objects = world.client(world.root).patch(
        f"/api/v1/pools/{world.pool.pk}/", {"tolerations": ["nvidia.com/gpu"]}, "json"
    )
    # then
    assert not_a_list.status_code == 400
    assert not_a_list.json()["errors"] == {"tolerations": ['Expected a list of items but got type "str".']}
    assert not_objects.status_code == 400
    assert not_objects.json()["errors"] == {
        "tolerations": {"0": ['Expected a dictionary of items but got type "str".']}
    }
    world.pool.refresh_from_db()
    assert world.pool.tolerations == [GPU_TAINT]


def test_the_service_refuses_what_is_not_a_list(world: World) -> None:
    with pytest.raises(InvalidInput) as raised:
        services.update_node_pool(pool_id=world.pool.pk, tolerations={"key": "a"}, actor=world.root)  # type: ignore[arg-type]
    assert raised.value.errors == {"tolerations": ["Give a list of tolerations (an empty list tolerates no taint)."]}


def test_only_platform_admins_change_tolerations(world: World) -> None:
    # when
    by_manager = world.client(world.mallory).patch(f"/api/v1/pools/{world.pool.pk}/", {"tolerations": []}, "json")
    anonymous = world.client(None).patch(f"/api/v1/pools/{world.pool.pk}/", {"tolerations": []}, "json")
    # then
    assert (by_manager.status_code, anonymous.status_code) == (403, 401)
    world.pool.refresh_from_db()
    assert world.pool.tolerations == [GPU_TAINT]


def test_a_pool_parameter_that_is_no_id_shows_the_page_without_an_edit_form(world: World) -> None:
    # "²" is a digit to str.isdigit but not to int()
    for pool in ("h100", "\u00b2"):
        page = client_for(world.root).get("/manage/pools/", {"pool": pool})
        assert (page.status_code, page.context["tolerations_form"]) == (200, None)


def test_the_pools_page_lists_tolerations_and_an_admin_edits_them(world: World) -> None:
    # given
    admin = client_for(world.root)
    # when: the edit link of the pool
    page = admin.get(f"/manage/pools/?pool={world.pool.pk}")
    # then: the table shows the toleration, the form holds it one per line
    html = page.content.decode()
    assert '<code class="chip">nvidia.com/gpu:NoSchedule</code>' in html
    assert page.context["tolerations_form"]["tolerations"].value() == "nvidia.com/gpu:NoSchedule"
    assert "nvidia.com/gpu:NoSchedule</textarea>" in html
    # when: saved with two lines
    response = admin.post(
        "/manage/pools/",
        {
            "action": "tolerations",
            "pool": str(world.pool.pk),
            "tolerations": "dedicated=ml:NoSchedule\nnode.kubernetes.io/unreachable:NoExecute for 30s",
        },
    )
    # then
    assert (response.status_code, response["Location"]) == (302, "/manage/pools/")
    world.pool.refresh_from_db()
    assert world.pool.tolerations == [
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
    ]
    html = admin.get("/manage/pools/").content.decode()
    assert '<code class="chip">dedicated=ml:NoSchedule</code>' in html
    assert '<code class="chip">node.kubernetes.io/unreachable:NoExecute for 30s</code>' in html


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "nvidia.com/gpu:NoSchedule\nnvidia.com/gpu NoSchedule",
            "Line 2: cannot read 'nvidia.com/gpu NoSchedule': write key:Effect or key=value:Effect, "
            "e.g. nvidia.com/gpu:NoSchedule.",
        ),
        ("nvidia.com/gpu:NoSchedule for 30s", "Toleration 1: tolerationSeconds goes only with the effect NoExecute."),
        (
            "=x:NoSchedule",
            "Line 1: cannot read '=x:NoSchedule': write key:Effect or key=value:Effect, "
            "e.g. nvidia.com/gpu:NoSchedule.",
        ),
    ],
)
def test_a_malformed_toleration_on_the_pools_page_is_a_field_error(world: World, text: str, message: str) -> None:
    # when
    response = client_for(world.root).post(
        "/manage/pools/", {"action": "tolerations", "pool": str(world.pool.pk), "tolerations": text}
    )
    # then
    assert response.status_code == 400
    assert response.context["tolerations_form"].errors == {"tolerations": [message]}
    world.pool.refresh_from_db()
    assert world.pool.tolerations == [GPU_TAINT]


def test_every_taint_and_no_taint_can_be_written_on_the_page(world: World) -> None:
    # when: "*" (every taint), then nothing at all
    everything = client_for(world.root).post(
        "/manage/pools/", {"action": "tolerations", "pool": str(world.pool.pk), "tolerations": "*"}
    )
    world.pool.refresh_from_db()
    every_taint = world.pool.tolerations
    client_for(world.root).post(
        "/manage/pools/", {"action": "tolerations", "pool": str(world.pool.pk), "tolerations": ""}
    )
    world.pool.refresh_from_db()
    # then
    assert everything.status_code == 302
    assert every_taint == [{"operator": "Exists"}]
    assert world.pool.tolerations == []


def test_a_pool_created_on_the_page_takes_the_tolerations_written_there(world: World) -> None:
    # when
    response = client_for(world.root).post(
        "/manage/pools/",
        {"name": "A30 pool", "slug": "a30", "gpu_model": "NVIDIA A30", "tolerations": "sku=gpu:NoSchedule"},
    )
    # then
    assert response.status_code == 302
    assert NodePool.objects.get(slug="a30").tolerations == [
        {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
    ]


def test_members_cannot_edit_tolerations_on_the_page(world: World) -> None:
    # when
    response = client_for(world.mallory).post(
        "/manage/pools/", {"action": "tolerations", "pool": str(world.pool.pk), "tolerations": ""}
    )
    # then
    assert response.status_code == 403
    world.pool.refresh_from_db()
    assert world.pool.tolerations == [GPU_TAINT]
