"""The live event stream (allocations/live.py, /dashboard/events/): what it tells each viewer, how it ends, how a
reconnecting browser catches up, and that it tells a member nothing about another tenant's activity.

alice is a member of Team A, charlie of Team B, root a platform admin; one pool of 2 nodes x 8 H100.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import pytest
from django.template import engines
from django.test import AsyncRequestFactory, Client, RequestFactory

from allocations import live, services
from allocations.dashboard import events
from allocations.models import Allocation
from allocations.selectors import dashboard_versions, viewer_scope
from tests.conftest import World

Status = Allocation.Status
HASH = re.compile(r"[0-9a-f]{16}")


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def request_slices(world: World, user, tenant, *, profile: str = "7g.80gb") -> Allocation:
    allocation, _ = services.request_allocation(
        tenant_id=tenant.pk,
        pool_id=world.pool.pk,
        profile=profile,
        count=1,
        lease_hours=8,
        purpose="secret plan",
        actor=user,
    )
    return allocation


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def fresh_versions() -> Iterator[None]:
    live.versions.clear()  # the one-second versions cache must not carry state between tests or steps
    yield
    live.versions.clear()


def test_the_stream_announces_a_pool_that_changed_and_then_ends(world: World, fresh_versions):
    # given
    clock = FakeClock()
    stream = live.event_stream(scope=viewer_scope(world.alice), duration=2, interval=1, clock=clock)
    assert next(stream) == "retry: 2000\n\n"
    first = next(stream)
    assert first.startswith("id: r:")
    assert "event: versions\n" in first
    # when: alice's tenant asks for slices in the pool
    request_slices(world, world.alice, world.tenant_a)
    live.versions.clear()
    # then
    changed = next(stream)
    assert f'event: changed\ndata: {{"pool":{world.pool.pk},"version":"' in changed
    assert "event: requests\n" in changed
    live.versions.clear()
    assert next(stream) == ": idle\n\n"
    assert next(stream) == "event: bye\ndata: {}\n\n"
    assert list(stream) == []
    assert clock.sleeps == [1, 1]


def test_a_reconnecting_client_hears_at_once_what_changed_while_it_was_away(world: World, fresh_versions):
    # given: the id the client last saw
    seen = live.decode_event_id(live.encode_event_id(dashboard_versions(world.alice)))
    request_slices(world, world.alice, world.tenant_a)
    # when
    chunks = list(live.event_stream(scope=viewer_scope(world.alice), duration=0, interval=1, seen=seen))
    # then
    assert chunks[0] == "retry: 2000\n\n"
    assert chunks[1].startswith(f'event: changed\ndata: {{"pool":{world.pool.pk},')
    assert "event: requests\ndata: {" in chunks[1]
    assert "event: versions" in chunks[2]
    assert chunks[-1] == "event: bye\ndata: {}\n\n"


def test_a_page_rendered_before_a_change_hears_of_it_when_its_stream_opens(world: World, settings, fresh_versions):
    # given: what the request list was rendered with
    settings.FATIA_DASHBOARD_STREAM_SECONDS = 0
    html = client_for(world.alice).get("/").content.decode()
    since = re.search(r'data-live-since="([^"]*)"', html)
    assert since is not None
    request_slices(world, world.alice, world.tenant_a)
    live.versions.clear()
    # when: its script opens the stream with it
    response = client_for(world.alice).get("/dashboard/events/", {"since": since.group(1)})
    body = b"".join(response.streaming_content).decode()
    # then
    assert body.startswith("retry: 2000\n\nevent: changed\n")
    assert "event: requests\n" in body.split("id: ")[0]


def test_the_events_endpoint_streams_server_sent_events(world: World, settings, fresh_versions):
    # given
    settings.FATIA_DASHBOARD_STREAM_SECONDS = 0
    # when
    response = client_for(world.charlie).get("/dashboard/events/")
    # then
    assert response["Content-Type"] == "text/event-stream"
    assert response["Cache-Control"] == "no-cache"
    body = b"".join(response.streaming_content).decode()
    assert body.startswith("retry: 2000\n\n")
    assert "event: versions\n" in body
    assert body.endswith("event: bye\ndata: {}\n\n")
    assert "Team" not in body


@pytest.mark.parametrize("value", ["1²:abc", "١٢:abc", "𝟗:abc", "1²:abc,7:fine", "99999999999999999999999:x"])
def test_a_last_event_id_with_non_ascii_digits_is_ignored_not_a_server_error(
    world: World, settings, fresh_versions, value: str
):
    # given (issue 9: str.isdigit accepts "²" and Arabic-Indic digits, int() refused them: a 500)
    settings.FATIA_DASHBOARD_STREAM_SECONDS = 0
    # when
    seen = live.decode_event_id(value)
    response = client_for(world.alice).get("/dashboard/events/", HTTP_LAST_EVENT_ID=value.encode().decode("latin-1"))
    # then
    assert seen == live.Seen({7: "fine"} if value.endswith("7:fine") else {}, None)
    assert response.status_code == 200
    assert b"".join(response.streaming_content).decode().endswith("event: bye\ndata: {}\n\n")


def test_versions_are_opaque_hashes(world: World):
    # given: requests and an active slice in the pool
    allocation = request_slices(world, world.alice, world.tenant_a, profile="1g.10gb")
    services.provision_allocation(allocation_id=allocation.pk)
    # when
    versions = {who: dashboard_versions(getattr(world, who)) for who in ("alice", "charlie", "root")}
    # then: no counts, no times, the same shape for everyone
    for v in versions.values():
        assert set(v.pools) == {world.pool.pk}
        assert HASH.fullmatch(v.pools[world.pool.pk])
        assert HASH.fullmatch(v.requests)
    # charlie's covers the layout only; alice's also Team A's requests, which is all root's covers too
    assert versions["charlie"].pools != versions["alice"].pools
    assert versions["alice"] == versions["root"]


def test_another_tenants_pending_request_and_its_rejection_change_nothing_for_a_member(world: World):
    # given
    alice_before, root_before = dashboard_versions(world.alice), dashboard_versions(world.root)
    # when: charlie's tenant asks for a whole GPU (pending: beyond auto-approval)
    pending = request_slices(world, world.charlie, world.tenant_b)
    assert pending.status == Status.PENDING
    # then: alice is told nothing; root sees the pool and the requests change
    alice_after, root_after = dashboard_versions(world.alice), dashboard_versions(world.root)
    assert alice_after == alice_before
    assert root_after.pools[world.pool.pk] != root_before.pools[world.pool.pk]
    assert root_after.requests != root_before.requests
    # when: root rejects it (a status change that places nothing)
    services.reject_allocation(allocation_id=pending.pk, actor=world.root, reason="no")
    # then
    assert dashboard_versions(world.alice) == alice_before
    assert dashboard_versions(world.root).requests != root_after.requests


def test_another_tenants_slice_changes_a_members_pool_version_but_not_her_requests(world: World):
    # given
    before = dashboard_versions(world.alice)
    # when: charlie's slice is placed (the dashboard shows alice an "occupied" slot)
    allocation = request_slices(world, world.charlie, world.tenant_b, profile="1g.10gb")
    services.provision_allocation(allocation_id=allocation.pk)
    # then
    after = dashboard_versions(world.alice)
    assert after.pools[world.pool.pk] != before.pools[world.pool.pk]
    assert after.requests == before.requests
    # when: its lease is extended (nothing alice may see changes)
    services.request_lease_extension(allocation_id=allocation.pk, hours=1, actor=world.charlie)
    # then
    assert dashboard_versions(world.alice) == after


def test_a_members_open_stream_stays_idle_while_another_tenant_works(world: World, fresh_versions):
    # given: alice's and root's streams are open
    clock = FakeClock()
    alice = live.event_stream(scope=viewer_scope(world.alice), duration=5, interval=1, clock=clock)
    root = live.event_stream(scope=viewer_scope(world.root), duration=5, interval=1, clock=FakeClock())
    assert [next(alice), next(root)] == ["retry: 2000\n\n"] * 2
    next(alice), next(root)
    # when: charlie's tenant files a pending request
    request_slices(world, world.charlie, world.tenant_b)
    live.versions.clear()
    # then
    assert next(alice) == ": idle\n\n"
    root_chunk = next(root)
    assert f'event: changed\ndata: {{"pool":{world.pool.pk},' in root_chunk
    assert "event: requests\n" in root_chunk


def test_pages_carry_the_viewers_event_id(world: World, fresh_versions):
    # given
    template = engines["django"].from_string("{% load live %}{% live_since %}")
    request = RequestFactory().get("/")
    request.user = world.alice
    # when
    rendered = template.render({}, request)
    # then
    assert rendered == live.encode_event_id(dashboard_versions(world.alice))


def test_under_asgi_the_view_streams_asynchronously(world: World, fresh_versions, monkeypatch):
    # given: versions already read and kept for the test (so the stream needs no database from another
    # thread, whose connection would not see this test's transaction)
    monkeypatch.setattr(live.versions, "max_age", 3600.0)
    live.versions.get()
    scope = viewer_scope(world.charlie)
    request = AsyncRequestFactory().get("/dashboard/events/")
    request.user = world.charlie
    # when
    response = events(request)

    async def collect() -> list[str]:
        return [chunk async for chunk in live.async_event_stream(scope=scope, duration=0, interval=0)]

    chunks = asyncio.run(collect())
    # then
    assert response.is_async is True
    assert response["Content-Type"] == "text/event-stream"
    current = dashboard_versions(world.charlie)
    assert chunks == [
        "retry: 2000\n\n",
        f"id: {live.encode_event_id(current)}\n"
        + f'event: versions\ndata: {{"pools":{{"{world.pool.pk}":"{current.pools[world.pool.pk]}"}},'
        + f'"requests":"{current.requests}"}}\n\n',
        "event: bye\ndata: {}\n\n",
    ]


def test_the_dashboard_page_carries_no_counts_or_times_in_its_pool_versions(world: World):
    # given: Team A has requests (issue 9: the card's data-version spelled out every tenant's request count and
    # the time of its last change, e.g. "a3:1764500000.123|n2:...")
    request_slices(world, world.alice, world.tenant_a)
    # when
    html = client_for(world.charlie).get("/dashboard/").content.decode()
    # then
    versions = re.findall(r'data-version="([^"]*)"', html)
    assert len(versions) == 1
    assert HASH.fullmatch(versions[0])
