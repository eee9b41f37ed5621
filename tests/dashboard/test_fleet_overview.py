"""The dense fleet overview (one cell per GPU) and the per-node slot view it opens, through the
selectors and Django's test client: fill per GPU, sort orders, tenancy, query counts (issue 9)."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from allocations import services
from allocations.dashboard import fleet_density
from allocations.models import Gpu, Node, SlicePlacement
from allocations.selectors import SliceView, dashboard_fleet
from tests.conftest import World
from tests.dashboard.test_dashboard import active_slices, client_for, slot_buttons

CELL = re.compile(r'<a class="fc l(\d)" href="([^"]+)" aria-label="([^"]+)"></a>')


def cells(html: str) -> list[tuple[str, str, str]]:
    """(fill level in eighths, link, accessible name) of every GPU cell, in page order."""
    return CELL.findall(html)


def test_each_gpu_is_one_cell_named_by_its_node_index_and_slots_in_use(world: World):
    # given: a 3g.40gb (4 memory slots) and a 1g.10gb (1), wherever the placement engine puts them
    big = active_slices(world, world.alice, world.tenant_a, profile="3g.40gb")
    small = active_slices(world, world.charlie, world.tenant_b, profile="1g.10gb")
    placed = list(SlicePlacement.objects.filter(allocation__in=[big, small]))
    # when
    html = client_for(world.alice).get("/dashboard/fleet/").content.decode()
    # then: 16 cells in node and index order, each linking to its node's slot view at that GPU
    gpus = list(Gpu.objects.select_related("node").order_by("node__name", "index"))
    used: dict[int, int] = {}
    for p in placed:
        used[p.gpu_id] = used.get(p.gpu_id, 0) + p.size
    assert cells(html) == [
        (
            str(used.get(g.pk, 0)),
            f"/dashboard/nodes/{g.node_id}/#gpu-{g.pk}",
            f"{g.node.name} gpu-{g.index}: {used.get(g.pk, 0)} of 8 slots used",
        )
        for g in gpus
    ]
    assert sum(used.values()) == 5
    assert html.count("<summary") == 2
    assert '<ol class="fleet-nodes fleet--large" data-fleet-grid>' in html


def test_a_member_and_an_admin_see_the_same_overview_with_no_tenant_in_it(world: World):
    # given
    mine = active_slices(world, world.alice, world.tenant_a, profile="2g.20gb", purpose="Project Nightingale")
    active_slices(world, world.charlie, world.tenant_b, profile="1g.10gb")
    # when
    pages = {u.username: client_for(u).get("/dashboard/fleet/").content.decode() for u in (world.charlie, world.root)}
    # then: occupancy only, never whose
    assert cells(pages["charlie"]) == cells(pages["root"])
    for html in pages.values():
        for secret in ("Team A", "Team B", "Project Nightingale", mine.claim_name):
            assert secret not in html


def test_nodes_sort_by_name_by_most_free_and_by_fullest(world: World):
    # given: node-0 holds a 7g.80gb (8 slots) and a 3g.40gb; node-2 (new) is cordoned and empty
    active_slices(world, world.alice, world.tenant_a, profile="7g.80gb")
    services.register_node(pool_id=world.pool.pk, name="h100-node-2", gpu_count=8, actor=world.root)
    Node.objects.filter(name="h100-node-2").update(state=Node.State.CORDONED)
    [by_name] = dashboard_fleet(world.alice, sort="name")
    [by_free] = dashboard_fleet(world.alice, sort="free")
    [by_fill] = dashboard_fleet(world.alice, sort="full")
    [unknown] = dashboard_fleet(world.alice, sort="bogus")
    # then
    assert [(n.name, n.used, n.free, n.ready) for n in by_name.nodes] == [
        ("h100-node-0", 8, 56, True),
        ("h100-node-1", 0, 64, True),
        ("h100-node-2", 0, 64, False),
    ]
    # the cordoned node takes no new slices: after every ready node, whatever its free slots
    assert [n.name for n in by_free.nodes] == ["h100-node-1", "h100-node-0", "h100-node-2"]
    assert [n.name for n in by_fill.nodes] == ["h100-node-0", "h100-node-1", "h100-node-2"]
    assert [n.name for n in unknown.nodes] == [n.name for n in by_name.nodes]
    assert (by_name.used, by_name.slots, by_name.free_ready, by_name.gpu_count) == (8, 192, 120, 24)
    assert [g.level for g in by_name.nodes[0].gpus] == [8, 0, 0, 0, 0, 0, 0, 0]


def test_the_sort_links_keep_the_chosen_one_current(world: World):
    # when
    html = client_for(world.alice).get("/dashboard/fleet/", {"sort": "free"}).content.decode()
    # then
    assert re.findall(r'<a href="\?sort=(\w+)"( aria-current="page")?>([^<]+)</a>', html) == [
        ("name", "", "Node name"),
        ("free", ' aria-current="page"', "Most free first"),
        ("full", "", "Fullest first"),
    ]
    assert [n for _, _, n in cells(html)][:2] == [
        "h100-node-0 gpu-0: 0 of 8 slots used",
        "h100-node-0 gpu-1: 0 of 8 slots used",
    ]


def test_a_node_that_is_not_ready_says_so_in_its_cells_names(world: World):
    # given
    Node.objects.filter(name="h100-node-1").update(state=Node.State.AGENT_SILENT)
    # when
    html = client_for(world.alice).get("/dashboard/fleet/").content.decode()
    # then
    names = [name for _, _, name in cells(html)]
    assert names[8] == "h100-node-1 gpu-0: 0 of 8 slots used (agent silent node)"
    assert names[0] == "h100-node-0 gpu-0: 0 of 8 slots used"
    assert html.count('class="fleet-node fleet-node--down"') == 1


@pytest.mark.parametrize(
    ("gpus", "density"), [(16, "large"), (512, "large"), (513, "medium"), (2048, "medium"), (8000, "small")]
)
def test_the_cell_size_shrinks_with_the_fleet(gpus: int, density: str):
    assert fleet_density(gpus) == density


def _queries(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


@pytest.mark.parametrize("who", ["charlie", "root"])
def test_the_overview_and_slot_view_run_the_same_number_of_queries_for_2_and_20_nodes(world: World, who: str):
    # given
    client = client_for(getattr(world, who))
    active_slices(world, world.alice, world.tenant_a, profile="1g.10gb", count=2)
    node = Node.objects.get(name="h100-node-0")
    small = (_queries(client, "/dashboard/fleet/"), _queries(client, f"/dashboard/nodes/{node.pk}/"))
    # when
    for n in range(2, 20):
        services.register_node(pool_id=world.pool.pk, name=f"h100-node-{n}", gpu_count=8, actor=world.root)
    for _ in range(3):
        active_slices(world, world.charlie, world.tenant_b, profile="3g.40gb")
    large = (_queries(client, "/dashboard/fleet/"), _queries(client, f"/dashboard/nodes/{node.pk}/"))
    # then: session, user, the navigation's managed tenants; overview: pools, placements, devices held outside
    # Fatia (issue 10), GPUs, nodes; slot view: node's pool, pool, memberships (members), count, nodes, GPUs,
    # colours, placements, devices held outside Fatia, the node agents' figures per MIG device (issue 12), and the
    # history chart's GPUs, devices (whole GPUs for root, the viewer's slices for others) and rollups (issue 12)
    expected = {"charlie": (8, 16), "root": (8, 15)}[who]
    assert (small, large) == (expected, expected)


def test_the_slot_view_of_a_node_draws_its_gpus_and_hides_other_tenants(world: World):
    # given
    theirs = active_slices(world, world.alice, world.tenant_a, profile="3g.40gb", purpose="Project Nightingale")
    placement = SlicePlacement.objects.select_related("gpu__node").get(allocation=theirs)
    node = placement.gpu.node
    # when
    page = client_for(world.charlie).get(f"/dashboard/nodes/{node.pk}/")
    fragment = client_for(world.charlie).get(f"/dashboard/nodes/{node.pk}/", {"fragment": "1"})
    # then: a page with the node's eight GPUs, or only the drawing for the overview's dialog
    html = page.content.decode()
    assert page.status_code == 200
    assert "<h1>h100-node-0</h1>" in html
    assert html.count('class="dash-gpu" id="gpu-') == 8
    assert f'id="gpu-{placement.gpu_id}"' in html
    assert [(d["placement-id"], d["owner"]) for d in slot_buttons(html)] == [(str(placement.pk), "occupied")]
    body = fragment.content.decode()
    assert fragment.status_code == 200
    assert "<html" not in body
    assert slot_buttons(body) == slot_buttons(html)
    for secret in ("Team A", "Project Nightingale", theirs.claim_name):
        assert secret not in html
        assert secret not in body


def test_the_slot_view_answers_404_for_a_missing_node_and_sends_anonymous_users_to_log_in(world: World):
    # when / then
    assert client_for(world.alice).get("/dashboard/nodes/999999/").status_code == 404
    for url in ("/dashboard/fleet/", f"/dashboard/nodes/{Node.objects.first().pk}/"):
        response = Client().get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/login/")


def test_the_overview_is_sent_compressed_to_browsers_that_accept_it(world: World):
    # when
    response = client_for(world.alice).get("/dashboard/fleet/", headers={"accept-encoding": "gzip"})
    # then
    assert response["Content-Encoding"] == "gzip"


@pytest.mark.parametrize(
    ("profile", "parts"),
    [
        ("1g.10gb", ["1g.", "10gb"]),
        ("7g.80gb", ["7g.", "80gb"]),
        ("1g.24gb+me.all", ["1g.", "24gb", "+me.", "all"]),
        ("2g.48gb-me", ["2g.", "48gb", "-me"]),
    ],
)
def test_a_profile_name_may_wrap_only_at_its_dots_and_signs(profile: str, parts: list[str]):
    view = SliceView(placement_id=1, profile=profile, start=0, size=1, visible=False, colour="")
    assert view.profile_parts == parts
    assert "".join(view.profile_parts) == profile


def test_a_one_slot_instance_keeps_its_whole_profile_in_the_drawing(world: World):
    # given
    active_slices(world, world.alice, world.tenant_a, profile="1g.10gb")
    # when
    html = client_for(world.alice).get("/dashboard/").content.decode()
    # then: the name with a line-break opportunity after the dot, never an ellipsis of it
    assert '<span class="slot__profile">1g.<wbr>10gb</span>' in html


def test_the_overview_can_show_one_pool_and_keeps_it_when_sorting(world: World):
    # given: a second pool, of A30s (4 memory slots each), with one node
    other = services.create_node_pool(name="A30 pool", slug="a30", gpu_model="NVIDIA A30", actor=world.root)
    services.register_node(pool_id=other.pk, name="a30-node-0", gpu_count=2, actor=world.root)
    client = client_for(world.alice)
    # when
    everything = client.get("/dashboard/fleet/").content.decode()
    one = client.get("/dashboard/fleet/", {"pool": world.pool.pk, "sort": "free"}).content.decode()
    # then: pools by name, each GPU counted in its own model's slots
    names = [name for _, _, name in cells(everything)]
    assert names[:3] == [
        "a30-node-0 gpu-0: 0 of 4 slots used",
        "a30-node-0 gpu-1: 0 of 4 slots used",
        "h100-node-0 gpu-0: 0 of 8 slots used",
    ]
    assert len(names) == 2 + 16
    assert [name.split(" ")[0] for _, _, name in cells(one)] == ["h100-node-0"] * 8 + ["h100-node-1"] * 8
    assert f'<a href="?pool={world.pool.pk}&amp;sort=name">Node name</a>' in one
