"""Borrowed slices are marked as such to everyone (issue 15): the dashboard's slot view (its own tenant and the
others, who see only "occupied"), the live stream that tells open pages to redraw it, and the CLI's words."""

from __future__ import annotations

from django.db import transaction
from django.test import Client
from django.urls import reverse

from allocations.cli import describe_allocation
from allocations.models import Allocation
from allocations.selectors import dashboard_versions
from allocations.services.cohort_notices import clear_notice
from allocations.services.locks import lock_allocation
from tests.cohorts.helpers import cohort_pool
from tests.conftest import World
from tests.factories import MembershipFactory, TenantFactory, UserFactory
from tests.queue.helpers import ask

Status = Allocation.Status
TOOLTIP = "Borrowed from the cohort, may be reclaimed"


def slot_view(world: World, user, pool) -> str:  # type: ignore[no-untyped-def]
    browser = Client()
    browser.force_login(user)
    response = browser.get(reverse("dashboard-pool-nodes", args=[pool.pk]))
    assert response.status_code == 200
    return response.content.decode()


def test_the_slot_view_marks_borrowed_slices_and_their_reclaim_to_every_viewer_and_the_stream_tells_them(
    world: World,
):
    # given: Team B runs a 1g.10gb on a slice Team A lends, and Team A a 3g.40gb of its own
    pool, _ = cohort_pool(world)
    borrowed = ask(world, pool, "1g.10gb", b=True)
    own = ask(world, pool, "3g.40gb")
    assert borrowed.is_borrowed and not own.is_borrowed
    # when: its own tenant and another tenant look at the pool's slots
    for user in (world.charlie, world.alice):
        html = slot_view(world, user, pool)
        # then: both see the borrowed slice marked (the other as "occupied"), explained in the legend and the
        # tooltip; A's own slice is not marked
        assert html.count('data-borrowed="yes"') == 1, user
        assert html.count("slot--borrowed") == 1
        assert f'<span class="swatch swatch--borrowed" aria-hidden="true"></span>{TOOLTIP} <span' in html
        # the tag: the word, or its short form where the slot is narrow (tests/browser/test_borrowed_tag.py)
        assert (
            'title="borrowed from the cohort, may be reclaimed"><span class="slot__borrowed-word">borrowed</span>'
            in html
        )
        assert f"{TOOLTIP}</span>" in html
    assert "Occupied by another tenant" in slot_view(world, world.alice, pool)
    # when: Team A needs all its guarantee back (a 4g.40gb more): the borrowed slice is given notice
    lender = ask(world, pool, "4g.40gb")
    borrowed.refresh_from_db()
    assert lender.status == Status.QUEUED and borrowed.reclaimed_for_id == lender.pk
    # then: the slot shows the deadline to every viewer
    for user in (world.alice, world.charlie):
        html = slot_view(world, user, pool)
        assert 'data-borrowed="reclaim"' in html
        assert f'reclaim at <time datetime="{borrowed.reclaim_at:%Y-%m-%dT%H:%M:%S}' in html
        assert f"{borrowed.reclaim_at:%Y-%m-%d %H:%M} UTC" in html


def test_the_pool_card_and_the_balance_say_how_much_of_each_tenants_use_is_borrowed(world: World):
    # given: Team B runs two 1g.10gb (one request) and a 2g.20gb borrowed from the cohort; Team A its own 3g.40gb
    pool, _ = cohort_pool(world)
    assert ask(world, pool, "1g.10gb", b=True, count=2).is_borrowed and ask(world, pool, "2g.20gb", b=True).is_borrowed
    assert not ask(world, pool, "3g.40gb").is_borrowed
    browser = Client()
    # when / then: each tenant's line counts its borrowed compute slices once per request, not once per slice
    for user, line in (
        (world.charlie, 'Team B: 3 slices (4 compute, <span data-borrowed-compute="4">4 of them borrowed'),
        (world.alice, "Team A: 1 slice (3 compute)</li>"),
        (world.root, 'Team B: 3 slices (4 compute, <span data-borrowed-compute="4">4 of them borrowed'),
    ):
        browser.force_login(user)
        html = browser.get(reverse("dashboard"), {"pool": pool.pk}).content.decode()
        assert line in html, user
    assert "Team A: 1 slice (3 compute)</li>" in html
    # and the quotas page's balance says it too, rather than a bare "4 of 0 used"
    browser.force_login(world.charlie)
    quotas = browser.get(reverse("quotas")).content.decode()
    assert quotas.count("4 of 0 used, <span data-borrowed>4 borrowed from the cohort</span>") == 2  # compute, memory
    browser.force_login(world.alice)
    assert "data-borrowed>" not in browser.get(reverse("quotas")).content.decode()


def test_an_unborrowed_pool_has_no_borrowed_legend(world: World):
    pool, _ = cohort_pool(world)
    ask(world, pool, "1g.10gb")
    html = slot_view(world, world.alice, pool)
    assert "swatch--borrowed" not in html and "slot--borrowed" not in html


def test_fatia_show_names_the_borrowed_part_and_the_reclaim_time(world: World):
    # given: the API's answer for a borrowed allocation under notice, and for one that borrows nothing
    pool, _ = cohort_pool(world)
    borrowed = ask(world, pool, "2g.20gb", b=True)
    lender = ask(world, pool, "7g.80gb")
    answer = world.client(world.charlie).get(f"/api/v1/allocations/{borrowed.pk}/").json()
    assert answer["is_borrowed"] and answer["reclaim_at"]
    # when: `fatia show` words them
    shown = describe_allocation(answer, full=True).splitlines()
    # then: the borrowed part and the deadline are there, just before the end
    at = [n for n, line in enumerate(shown) if line.startswith("  borrowed")]
    assert len(at) == 1
    assert shown[at[0]] == "  borrowed       2 compute / 2 memory slices from the cohort, may be reclaimed"
    assert shown[at[0] + 1].startswith("  reclaim at     ") and shown[at[0] + 1] != "  reclaim at     -"
    plain = world.client(world.alice).get(f"/api/v1/allocations/{lender.pk}/").json()
    assert not [line for line in describe_allocation(plain, full=True).splitlines() if line.startswith("  borrowed")]


def test_a_notice_called_off_is_an_event_for_every_viewer_of_the_pool(world: World):
    # given: a notice on Team B's borrowed slice, and a viewer of another tenant, with no request in the pool
    pool, _ = cohort_pool(world)
    borrowed = ask(world, pool, "1g.10gb", b=True)
    ask(world, pool, "3g.40gb")
    ask(world, pool, "4g.40gb")
    assert Allocation.objects.get(pk=borrowed.pk).reclaim_at is not None
    dora = UserFactory(username="dora")
    MembershipFactory(user=dora, tenant=TenantFactory(name="Team C", slug="team-c"))
    before = dashboard_versions(dora).pools[pool.pk]
    # when: the notice is called off (nothing else changes: no slot, no queue)
    with transaction.atomic():
        clear_notice(lock_allocation(allocation_id=borrowed.pk), why="the lender no longer waits")
    # then: the viewer's live stream says the pool changed (its slot view drops the deadline)
    assert dashboard_versions(dora).pools[pool.pk] != before
