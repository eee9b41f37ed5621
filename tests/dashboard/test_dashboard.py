"""The fleet dashboard through Django's test client: what each user sees, filters and query counts (the live
event stream: test_live.py).

alice is a member of Team A, mallory its manager, charlie a member of Team B, root a platform admin;
the pool has 2 nodes x 8 H100 (7 compute slices, 8 memory slots each).
"""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from allocations import live, services
from allocations.models import Allocation, Node, SlicePlacement
from allocations.selectors import DashboardFilters, dashboard_nodes, dashboard_overview
from tests.conftest import World

Status = Allocation.Status


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def active_slices(world: World, actor, tenant, *, profile: str, count: int = 1, purpose: str = "secret plan"):
    """A request that is approved (by root when the policy does not approve it) and provisioned."""
    allocation, _ = services.request_allocation(
        tenant_id=tenant.pk,
        pool_id=world.pool.pk,
        profile=profile,
        count=count,
        lease_hours=8,
        purpose=purpose,
        actor=actor,
    )
    if allocation.status == Status.PENDING:
        services.approve_allocation(allocation_id=allocation.pk, actor=world.root)
    services.provision_allocation(allocation_id=allocation.pk)
    allocation.refresh_from_db()
    assert allocation.status == Status.ACTIVE
    return allocation


def slot_buttons(html: str) -> list[dict[str, str]]:
    """The data attributes of every drawn instance, in page order."""
    return [
        dict(re.findall(r'data-([a-z-]+)="([^"]*)"', match))
        for match in re.findall(r'<button type="button" class="slot[^"]*"([^>]*)>', html)
    ]


def test_the_overview_counts_gpus_usage_capacity_fragmentation_and_pending(world: World):
    # given: Team A holds one whole GPU, Team B one 1g.10gb, and Team A waits for a 3g.40gb
    full = active_slices(world, world.alice, world.tenant_a, profile="7g.80gb")
    active_slices(world, world.charlie, world.tenant_b, profile="1g.10gb")
    services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="3g.40gb",
        count=1,
        lease_hours=8,
        purpose="later",
        actor=world.alice,
    )
    # when
    [pool] = dashboard_overview(world.root)
    # then
    assert (pool.name, pool.node_count, pool.gpu_count, pool.states) == ("H100 pool", 2, 16, {"ready": 2})
    assert [(u.label, u.slices, u.compute_slices, u.mine) for u in pool.usage] == [
        ("Team A", 1, 7, True),
        ("Team B", 1, 1, True),
    ]
    assert (pool.slices_in_use, pool.compute_used, pool.compute_total, pool.pending) == (2, 8, 112, 1)
    # 14 GPUs are empty, one is whole-used, one has a 1g.10gb: 7g fits 14 times, 1g.10gb 14 x 7 + 6.
    assert pool.fits_now["7g.80gb"] == 14
    assert pool.fits_now["1g.10gb"] == 104
    assert pool.fits_now["3g.40gb"] == 14 * 2 + 1
    # The mix (7g, 1g.10gb, 3g) can still use every free compute slice: nothing stranded.
    assert (pool.fragmentation_stranded, pool.fragmentation_free) == (0, 14 * 7 + 6)
    assert SlicePlacement.objects.get(allocation=full).size == 8


def test_a_member_sees_only_her_own_tenants_usage_and_pending_requests(world: World):
    """Issue 9: other tenants exist for a member only as occupied slots; no "Other tenants: N slices"
    line and no pending count of theirs."""
    # given: Team A holds a 2g.20gb and waits for a 3g.40gb; Team B holds a 1g.10gb
    active_slices(world, world.alice, world.tenant_a, profile="2g.20gb")
    active_slices(world, world.charlie, world.tenant_b, profile="1g.10gb")
    services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="3g.40gb",
        count=1,
        lease_hours=8,
        purpose="later",
        actor=world.alice,
    )
    # when
    [charlies] = dashboard_overview(world.charlie)
    [alices] = dashboard_overview(world.alice)
    [roots] = dashboard_overview(world.root)
    # then: the fleet's totals are the same for all; the breakdown and pending count are one's own
    assert [(u.label, u.slices, u.compute_slices, u.mine) for u in charlies.usage] == [("Team B", 1, 1, True)]
    assert [(u.label, u.slices, u.compute_slices, u.mine) for u in alices.usage] == [("Team A", 1, 2, True)]
    assert [(u.label, u.slices) for u in roots.usage] == [("Team A", 1), ("Team B", 1)]
    assert [(p.slices_in_use, p.compute_used, p.pending) for p in (charlies, alices, roots)] == [
        (2, 3, 0),
        (2, 3, 1),
        (2, 3, 1),
    ]


def pool_card_parts(html: str) -> dict[str, object]:
    """What a pool card says: its stats (data-stat values) and its "In use by" lines."""
    usage = re.search(r'<ul class="dash-usage">(.*?)</ul>', html, re.S)
    return {
        "stats": dict(re.findall(r'<(?:dd|span) data-stat="([a-z-]+)"[^>]*>([^<]*)', html)),
        "usage": [re.sub(r"<[^>]+>", "", line).strip() for line in re.findall(r"<li>(.*?)</li>", usage.group(1), re.S)]
        if usage
        else [],
    }


def test_charlies_page_card_and_fragments_show_team_a_only_as_occupied_slots(world: World):
    """Issue 9: exactly what charlie (Team B) reads about a pool where Team A holds and waits for slices."""
    # given
    mine = active_slices(world, world.alice, world.tenant_a, profile="3g.40gb", purpose="Project Nightingale")
    active_slices(world, world.charlie, world.tenant_b, profile="1g.10gb")
    services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="7g.80gb",
        count=1,
        lease_hours=8,
        purpose="Fine-tune",
        actor=world.alice,
    )
    charlie = client_for(world.charlie)
    # when
    page = charlie.get("/dashboard/").content.decode()
    card = charlie.get(f"/dashboard/pools/{world.pool.pk}/summary/").content.decode()
    nodes = charlie.get(f"/dashboard/pools/{world.pool.pk}/nodes/").content.decode()
    # then: the card, on the page and as the live fragment, counts Team A only in the fleet's totals
    expected = {
        "stats": {"gpus": "16", "in-use": "2", "pending": "0", "fragmentation": "0 of 108 free "},
        "usage": ["Team B: 1 slice (1 compute)"],
    }
    assert pool_card_parts(card) == expected
    assert pool_card_parts(page) == expected
    assert "Pending requests (your tenants)" in card
    assert "In use by your tenants" in card
    # Team A's slice is drawn, as "occupied" and nothing more
    assert sorted(d["owner"] for d in slot_buttons(nodes)) == ["Team B", "occupied"]
    assert slot_buttons(nodes) == slot_buttons(page)
    for html in (page, card, nodes):
        for secret in ("Team A", "Other tenants", "Project Nightingale", "Fine-tune", mine.claim_name, "alice"):
            assert secret not in html


def test_root_sees_every_tenants_usage_and_pending_requests_on_the_card(world: World):
    # given
    active_slices(world, world.alice, world.tenant_a, profile="3g.40gb")
    active_slices(world, world.charlie, world.tenant_b, profile="1g.10gb")
    services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="7g.80gb",
        count=1,
        lease_hours=8,
        purpose="Fine-tune",
        actor=world.alice,
    )
    # when
    card = client_for(world.root).get(f"/dashboard/pools/{world.pool.pk}/summary/").content.decode()
    # then
    assert pool_card_parts(card) == {
        "stats": {"gpus": "16", "in-use": "2", "pending": "1", "fragmentation": "0 of 108 free "},
        "usage": ["Team A: 1 slice (3 compute)", "Team B: 1 slice (1 compute)"],
    }
    assert "Pending requests</dt>" in card


def test_the_pool_card_explains_fragmentation_in_visible_text(world: World):
    """Issue 9: the explanation was only a tooltip (a title attribute)."""
    # when
    card = client_for(world.alice).get(f"/dashboard/pools/{world.pool.pk}/summary/").content.decode()
    # then
    explanation = (
        f'<p class="dash-explain" id="pool-{world.pool.pk}-fragmentation">Fragmentation: free compute slices on '
        "ready GPUs that no mix of the profiles requested in this pool can use; 0% means every free slice can "
        "still be handed out.</p>"
    )
    assert explanation in card
    assert f'<dd data-stat="fragmentation" aria-describedby="pool-{world.pool.pk}-fragmentation">' in card
    assert "title=" not in card


def test_alice_sees_her_slices_drawn_at_their_recorded_slots(world: World):
    # given
    allocation = active_slices(world, world.alice, world.tenant_a, profile="1g.20gb", count=2)
    placements = list(
        SlicePlacement.objects.filter(allocation=allocation).order_by("gpu__node__name", "gpu__index", "start")
    )
    # when
    response = client_for(world.alice).get("/dashboard/")
    # then
    assert response.status_code == 200
    html = response.content.decode()
    drawn = slot_buttons(html)
    assert [(d["placement-id"], d["start"], d["size"], d["profile"], d["owner"]) for d in drawn] == [
        (str(p.pk), str(p.start), str(p.size), "1g.20gb", "Team A") for p in placements
    ]
    for p in placements:
        assert f"grid-column: {p.start + 1} / span {p.size};" in html
    assert allocation.claim_name in html
    assert html.count('class="dash-gpu"') == 16
    assert html.count("data-free-slot=") == 16 * 8 - 2 * 2


def test_charlie_sees_alices_slices_as_occupied_and_nothing_about_them(world: World):
    # given
    allocation = active_slices(world, world.alice, world.tenant_a, profile="3g.40gb", purpose="Project Nightingale")
    placement = SlicePlacement.objects.get(allocation=allocation)
    # when
    html = client_for(world.charlie).get("/dashboard/").content.decode()
    # then
    assert [(d["placement-id"], d["start"], d["size"], d["owner"]) for d in slot_buttons(html)] == [
        (str(placement.pk), str(placement.start), str(placement.size), "occupied")
    ]
    assert "Occupied by another tenant" in html
    for secret in (allocation.claim_name, "Team A", "Project Nightingale", "alice", f"/requests/{allocation.pk}/"):
        assert secret not in html


def test_root_sees_every_tenants_slices_in_full(world: World):
    # given
    a = active_slices(world, world.alice, world.tenant_a, profile="1g.10gb")
    b = active_slices(world, world.charlie, world.tenant_b, profile="1g.10gb")
    # when
    html = client_for(world.root).get("/dashboard/").content.decode()
    # then
    assert sorted(d["owner"] for d in slot_buttons(html)) == ["Team A", "Team B"]
    assert a.claim_name in html
    assert b.claim_name in html


def test_the_node_list_filters_by_state_tenant_and_search(world: World):
    # given
    allocation = active_slices(world, world.alice, world.tenant_a, profile="1g.10gb")
    node = SlicePlacement.objects.get(allocation=allocation).gpu.node
    other = Node.objects.exclude(pk=node.pk).get()
    Node.objects.filter(pk=other.pk).update(state=Node.State.CORDONED)

    def names(user, **filters) -> list[str]:
        page = dashboard_nodes(user, world.pool.pk, DashboardFilters(**filters))
        return [n.name for n in page.nodes]

    # then
    assert names(world.root) == ["h100-node-0", "h100-node-1"]
    assert names(world.root, state="cordoned") == [other.name]
    assert names(world.root, tenant_id=world.tenant_a.pk) == [node.name]
    assert names(world.root, tenant_id=world.tenant_b.pk) == []
    assert names(world.root, search=allocation.claim_name[-12:]) == [node.name]
    assert names(world.root, search="node-1") == ["h100-node-1"]
    # charlie can neither filter by Team A nor find its claim
    assert names(world.charlie, tenant_id=world.tenant_a.pk) == []
    assert names(world.charlie, search=allocation.claim_name) == []


def test_filters_come_from_the_query_string_and_bad_values_are_ignored(world: World):
    # when
    query = {"state": "bogus", "tenant": "x", "page": "-3", "q": "node-1"}
    response = client_for(world.alice).get("/dashboard/", query)
    # then
    assert response.status_code == 200
    assert response.context["filters"] == DashboardFilters(state="", search="node-1", page=1)
    assert [n.name for n in response.context["node_page"].nodes] == ["h100-node-1"]


def test_node_states_show_as_labelled_badges(world: World):
    # given
    Node.objects.filter(name="h100-node-0").update(state=Node.State.AGENT_SILENT)
    Node.objects.filter(name="h100-node-1").update(state=Node.State.RECONFIGURING)
    # when
    html = client_for(world.alice).get("/dashboard/").content.decode()
    # then
    assert '<span class="state state--agent-silent">Agent silent</span>' in html
    assert '<span class="state state--reconfiguring">Reconfiguring</span>' in html


def _dashboard_queries(user) -> int:
    client = client_for(user)
    live.versions.clear()  # the page's live-stream event id reads the fleet's versions afresh, every time
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/dashboard/").status_code == 200
    return len(queries)


@pytest.mark.parametrize("who", ["alice", "root"])
def test_the_page_runs_the_same_number_of_queries_for_2_and_20_nodes(world: World, who: str):
    # given: slices of both tenants on the small fleet
    user = getattr(world, who)
    active_slices(world, world.alice, world.tenant_a, profile="1g.10gb", count=2)
    active_slices(world, world.charlie, world.tenant_b, profile="2g.20gb")
    small = _dashboard_queries(user)
    # when: ten times the nodes, with more slices on them
    for n in range(2, 20):
        services.register_node(pool_id=world.pool.pk, name=f"h100-node-{n}", gpu_count=8, actor=world.root)
    for _ in range(3):
        active_slices(world, world.charlie, world.tenant_b, profile="3g.40gb")
    large = _dashboard_queries(user)
    # then: session, user; overview 15 (pools, tenants x2, GPUs, placements, devices held outside Fatia, pending,
    # mix, 5 versions, queued demand, + memberships for a member); node page 7 (pool, count, nodes, GPUs, colours,
    # placements, outside devices, + memberships); tenant choices; the navigation's managed tenants (+ nothing for
    # staff, who skip memberships); the live stream's event id: the fleet's versions (6, once a second per process) +
    # memberships for a member. Issue 10 added the three reads of devices held outside Fatia; issue 12 the node
    # agents' latest figures per MIG device (one read on the node page); issue 15 the queue's version (in both
    # version reads), the pool card's queued demand per profile (one read per pool) and the bookings in the live
    # stream's versions (one read), then the borrowed slices and their reclaim deadlines (in both version reads).
    expected = {"alice": 38, "root": 35}[who]
    assert (small, large) == (expected, expected)


def test_the_fragments_answer_404_for_a_missing_pool_and_redirect_anonymous_users(world: World):
    # when / then
    assert client_for(world.alice).get("/dashboard/pools/999999/nodes/").status_code == 404
    assert client_for(world.alice).get("/dashboard/pools/999999/summary/").status_code == 404
    for url in ("/dashboard/", "/dashboard/events/", f"/dashboard/pools/{world.pool.pk}/nodes/"):
        response = Client().get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/login/")


def test_the_pool_card_fragment_shows_pending_requests_of_the_viewers_tenants(world: World):
    # given: a Team A request waits
    services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="7g.80gb",
        count=1,
        lease_hours=8,
        purpose="big",
        actor=world.alice,
    )

    def pending(user) -> str:
        html = client_for(user).get(f"/dashboard/pools/{world.pool.pk}/summary/").content.decode()
        assert f'id="pool-{world.pool.pk}"' in html
        return re.findall(r'<dd data-stat="pending">([^<]*)</dd>', html)[0]

    # then: Team A's member and manager, and staff, see it; Team B's charlie does not (issue 9)
    assert [pending(u) for u in (world.alice, world.mallory, world.root, world.charlie)] == ["1", "1", "1", "0"]
