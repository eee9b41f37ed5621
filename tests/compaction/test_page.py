"""The admin's compaction page (issue 14): the preview names which request moves from which slot to which and
what it frees; the button starts the plan; people who are not platform admins never see it."""

from __future__ import annotations

from django.test import Client

from allocations.models import MovePlan
from tests.compaction.world import small_pool
from tests.conftest import World


def page(world: World, user_name: str) -> Client:
    client = Client()
    client.force_login(getattr(world, user_name))
    return client


def test_the_page_previews_then_applies(world: World) -> None:
    small = small_pool(world)
    lone = small.active("1g.10gb", gpu=0, start=0, movable=True)
    small.active("1g.10gb", gpu=1, start=0)
    root = page(world, "root")
    url = f"/manage/pools/{small.pool.pk}/compaction/"
    html = root.get(url).content.decode()
    assert "1 move; whole GPUs free: 1 &rarr; 2" in html
    assert f"#{lone.pk}" in html and "small-node-0/gpu-0:0" in html
    assert "Apply this compaction" in html
    assert not MovePlan.objects.exists()
    response = root.post(url, follow=True)
    assert response.status_code == 200
    plan = MovePlan.objects.get()
    assert plan.trigger == MovePlan.Trigger.ADMIN and plan.created_by == world.root
    html = response.content.decode()
    assert f"Compaction #{plan.pk} started: 1 move(s)" in html
    assert "Applying" in html
    # a second press while it applies: a friendly message, not an error page
    response = root.post(url, follow=True)
    assert response.status_code == 200
    assert "being applied" in response.content.decode()
    assert MovePlan.objects.count() == 1


def test_nothing_to_gain_says_so(world: World) -> None:
    html = page(world, "root").get(f"/manage/pools/{world.pool.pk}/compaction/").content.decode()
    assert "Nothing to gain" in html
    assert "Apply this compaction" not in html


def test_only_platform_admins_see_it(world: World) -> None:
    url = f"/manage/pools/{world.pool.pk}/compaction/"
    for name in ("alice", "mallory", "charlie"):
        assert page(world, name).get(url).status_code == 403
        assert page(world, name).post(url).status_code == 403
    assert not MovePlan.objects.exists()
    assert page(world, "root").get("/manage/pools/99999/compaction/").status_code == 404
