"""A ResourceClaim holds at most 32 requests, a request may ask for 56 slices (issue 10): a large request is
split over several claims, named from the allocation's uuid, and users see every claim name (API, page, CLI in
tests/cli). The cluster side is in tests/kube/test_holder.py."""

from __future__ import annotations

import pytest
from django.test import Client

from allocations import services
from allocations.models import MAX_REQUESTS_PER_CLAIM, Allocation, claim_names_for
from tests.conftest import World

Status = Allocation.Status


@pytest.mark.parametrize(
    ("count", "suffixes"),
    [(1, [""]), (32, [""]), (33, ["-0", "-1"]), (40, ["-0", "-1"]), (56, ["-0", "-1"]), (65, ["-0", "-1", "-2"])],
)
def test_claims_hold_at_most_32_slices_and_up_to_32_keep_the_single_claim_name(count: int, suffixes: list[str]) -> None:
    assert MAX_REQUESTS_PER_CLAIM == 32
    assert claim_names_for("mig-alloc-u", count) == [f"mig-alloc-u{s}" for s in suffixes]


def active_request(world: World, count: int) -> Allocation:
    """Team A's request of `count` 1g.10gb, approved by mallory and provisioned on the simulated fleet."""
    services.set_tenant_quota(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        compute_slices_limit=56,
        memory_slices_limit=64,
        actor=world.root,
    )
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="1g.10gb",
        count=count,
        lease_hours=8,
        purpose="many slices",
        actor=world.alice,
    )
    if allocation.status == Status.PENDING:
        services.approve_allocation(allocation_id=allocation.pk, actor=world.mallory)
    services.provision_allocation(allocation_id=allocation.pk)
    return Allocation.objects.get(pk=allocation.pk)


def test_the_api_lists_every_claim_of_a_request_of_40_slices(world: World) -> None:
    # given
    allocation = active_request(world, 40)
    assert allocation.status == Status.ACTIVE
    # when
    data = world.client(world.alice).get(f"/api/v1/allocations/{allocation.pk}/").json()
    # then: claim_name stays (the first claim), claim_names has them all
    base = f"mig-alloc-{allocation.uuid}"
    assert (data["count"], data["claim_name"], data["claim_names"]) == (40, f"{base}-0", [f"{base}-0", f"{base}-1"])


def test_the_api_lists_the_one_claim_of_a_small_request_and_none_before_provisioning(world: World) -> None:
    # given
    small = active_request(world, 2)
    waiting, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="7g.80gb",
        count=1,
        lease_hours=8,
        purpose="later",
        actor=world.alice,
    )
    # when
    shown = world.client(world.alice).get(f"/api/v1/allocations/{small.pk}/").json()
    pending = world.client(world.alice).get(f"/api/v1/allocations/{waiting.pk}/").json()
    # then
    assert (shown["claim_name"], shown["claim_names"]) == (f"mig-alloc-{small.uuid}", [f"mig-alloc-{small.uuid}"])
    assert (pending["status"], pending["claim_name"], pending["claim_names"]) == ("pending", "", [])


def test_the_schema_documents_claim_names_on_the_detail(world: World) -> None:
    # when
    schema = world.client(world.alice).get("/api/v1/schema/", {"format": "json"}).json()
    # then
    field = schema["components"]["schemas"]["AllocationDetail"]["properties"]["claim_names"]
    assert (field["type"], field["items"], field["readOnly"]) == ("array", {"type": "string"}, True)
    assert "claim_names" not in schema["components"]["schemas"]["Allocation"]["properties"]


def test_the_request_page_shows_every_claim_and_a_pod_spec_that_uses_them_all(world: World) -> None:
    # given
    allocation = active_request(world, 40)
    client = Client()
    client.force_login(world.alice)
    # when
    html = client.get(f"/requests/{allocation.pk}/").content.decode()
    # then
    base = f"mig-alloc-{allocation.uuid}"
    assert f'<code id="claim-name-0" class="code-inline">{base}-0</code>' in html
    assert f'<code id="claim-name-1" class="code-inline">{base}-1</code>' in html
    assert "these 40 slices are in 2 claims" in html
    spec = html.split('<pre id="pod-spec"><code>')[1].split("</code></pre>")[0]
    assert spec.splitlines()[6:] == [
        "  resourceClaims:",
        "  - name: mig-slices-0",
        f"    resourceClaimName: {base}-0",
        "  - name: mig-slices-1",
        f"    resourceClaimName: {base}-1",
        "  containers:",
        "  - name: main",
        "    image: your-cuda-image:tag",
        '    command: ["nvidia-smi", "-L"]',
        "    resources:",
        "      claims:",
        "      - name: mig-slices-0",
        "      - name: mig-slices-1",
    ]


def test_a_released_request_of_40_slices_says_both_claims_are_gone(world: World) -> None:
    # given
    allocation = active_request(world, 40)
    services.release_allocation(allocation_id=allocation.pk, actor=world.alice)
    services.provisioning.teardown_allocation(allocation_id=allocation.pk)
    client = Client()
    client.force_login(world.alice)
    # when
    html = client.get(f"/requests/{allocation.pk}/").content.decode()
    # then
    base = f"mig-alloc-{allocation.uuid}"
    assert (
        f"The claims are gone: <code>{base}-0</code>, <code>{base}-1</code> were deleted when the request was" in html
    )
