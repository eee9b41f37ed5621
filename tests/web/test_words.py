"""What a first user read (issue 9, "Wording"): messages that match the badge, the claim and its namespace,
Withdrawn as its own state, timelines and the audit log in words, pool names, one-slot instances, the
quota change review, and lease extensions on the pages.

alice is a member of Team A, mallory its manager, charlie a member of Team B, root a platform admin.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
import time_machine
from django.test import Client

from allocations import services
from allocations.models import Allocation, LeaseExtension, Quota
from tenants.models import AuditEvent
from tests.conftest import World

Status = Allocation.Status
# A raw ISO 8601 timestamp, as json/isoformat write it, or a Python dict's repr.
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d")
DICT = re.compile(r"\{'\w+': ")


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def ask(world: World, actor, *, profile: str = "1g.10gb", count: int = 1, lease_hours: int = 8) -> Allocation:
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile=profile,
        count=count,
        lease_hours=lease_hours,
        purpose="fine-tune llama",
        actor=actor,
    )
    return allocation


def active(world: World, **kwargs) -> Allocation:
    return services.provision_allocation(allocation_id=ask(world, world.alice, **kwargs).pk)


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def text_of(html: str) -> str:
    """The page's visible words, tags stripped and spaces collapsed."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


# --- Messages say what the badge says -------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_with_the_embedded_worker_an_approval_says_active_next_to_the_active_badge(world: World, settings):
    """The demo runs tasks right after commit, so an approved request is already ACTIVE when the page
    reloads; the message said "the slices are being set up" next to the Active badge."""
    # given: the demo's embedded worker
    settings.CELERY_TASK_ALWAYS_EAGER = True
    pending = ask(world, world.alice, profile="3g.40gb")
    # when
    response = client_for(world.mallory).post(f"/requests/{pending.pk}/approve/", follow=True)
    # then
    pending.refresh_from_db()
    assert pending.status == Status.ACTIVE
    assert messages_of(response) == [f"Request #{pending.pk} is active: its slices are ready to use."]
    assert '<span class="badge badge--active">Active</span>' in response.content.decode()


@pytest.mark.django_db(transaction=True)
def test_with_the_embedded_worker_a_release_says_released_next_to_the_released_badge(world: World, settings):
    # given
    settings.CELERY_TASK_ALWAYS_EAGER = True
    allocation = active(world)
    # when
    response = client_for(world.alice).post(f"/requests/{allocation.pk}/release/", follow=True)
    # then
    assert messages_of(response) == [f"Request #{allocation.pk} is released: its slices are gone."]
    assert '<span class="badge badge--released">Released</span>' in response.content.decode()


def test_releasing_an_active_request_says_releasing(world: World):
    allocation = active(world)
    response = client_for(world.alice).post(f"/requests/{allocation.pk}/release/", follow=True)
    assert messages_of(response) == [f"Request #{allocation.pk} is releasing its slices."]


def test_a_request_that_waits_says_so_once(world: World):
    # when: 3g.40gb costs 3 compute slices, past Team A's auto-approve limit of 2
    response = client_for(world.alice).post(
        "/requests/new/",
        {
            "tenant": str(world.tenant_a.pk),
            "pool": str(world.pool.pk),
            "profile": "3g.40gb",
            "count": "1",
            "lease_hours": "8",
            "purpose": "eval",
            "idempotency_key": "k1",
        },
        follow=True,
    )
    # then
    allocation = Allocation.objects.get()
    assert messages_of(response) == [
        f"Request #{allocation.pk} is waiting for a manager: beyond the auto-approve policy."
    ]


# --- Withdrawn is its own state ------------------------------------------------------------------------


def test_a_withdrawn_request_is_shown_and_counted_as_withdrawn_not_released(world: World):
    # given: one withdrawn before approval, one released after it ran
    withdrawn = ask(world, world.alice, profile="3g.40gb")
    released = active(world)
    client = client_for(world.alice)
    # when
    withdrew = client.post(f"/requests/{withdrawn.pk}/release/", follow=True)
    services.release_allocation(allocation_id=released.pk, actor=world.alice)
    services.finish_release(allocation_id=released.pk)
    home = client.get("/")
    only_withdrawn = client.get("/", {"status": "withdrawn"})
    # then
    withdrawn.refresh_from_db()
    assert withdrawn.status == Status.WITHDRAWN
    assert messages_of(withdrew) == [f"Request #{withdrawn.pk} is withdrawn."]
    assert '<span class="badge badge--withdrawn">Withdrawn</span>' in withdrew.content.decode()
    counts = {f.value: f.count for f in home.context["status_filters"]}
    assert (counts["withdrawn"], counts["released"]) == (1, 1)
    assert [a.pk for a in only_withdrawn.context["allocations"]] == [withdrawn.pk]


def test_a_withdrawn_approved_request_gives_its_quota_back(world: World):
    # given
    approved = ask(world, world.alice, profile="1g.10gb")
    # when
    services.release_allocation(allocation_id=approved.pk, actor=world.alice)
    # then
    approved.refresh_from_db()
    quota = Quota.objects.get(tenant=world.tenant_a, pool=world.pool)
    assert approved.status == Status.WITHDRAWN
    assert (quota.compute_slices_used, quota.memory_slices_used) == (0, 0)


# --- The claim, its namespace, and what is left of it --------------------------------------------------


def test_an_active_request_names_the_namespace_and_puts_it_in_the_pod_spec(world: World):
    # given
    allocation = active(world)
    # when
    html = client_for(world.alice).get(f"/requests/{allocation.pk}/").content.decode()
    # then
    assert "Use the slices" in html
    assert '<code id="claim-namespace" class="code-inline">fatia-team-a</code>' in html
    assert (
        "metadata:\n  name: my-workload\n  namespace: fatia-team-a\nspec:\n  resourceClaims:\n  - name: mig-slices\n"
        f"    resourceClaimName: mig-alloc-{allocation.uuid}\n"
    ) in html
    assert "same namespace" not in html


def test_the_namespace_follows_the_configured_prefix(world: World, settings):
    settings.FATIA_KUBE_NAMESPACE_PREFIX = "gpu-"
    allocation = active(world)
    html = client_for(world.alice).get(f"/requests/{allocation.pk}/").content.decode()
    assert "  namespace: gpu-team-a\n" in html


@pytest.mark.parametrize(("end", "says"), [("released", "was released"), ("expired", "expired")])
def test_an_ended_request_says_its_claim_is_gone_instead_of_how_to_use_it(world: World, end: str, says: str):
    # given
    allocation = active(world)
    if end == "released":
        services.release_allocation(allocation_id=allocation.pk, actor=world.alice)
    else:
        assert allocation.lease_expires_at is not None
        services.expire_due_leases(now=allocation.lease_expires_at)
    services.finish_release(allocation_id=allocation.pk)
    # when
    html = client_for(world.alice).get(f"/requests/{allocation.pk}/").content.decode()
    # then
    assert "Use the slices" not in html
    assert "resourceClaimName" not in html
    assert (f"The claim is gone: <code>mig-alloc-{allocation.uuid}</code> was deleted when the request {says}.") in html


def test_a_withdrawn_request_never_had_a_claim(world: World):
    allocation = ask(world, world.alice, profile="3g.40gb")
    services.release_allocation(allocation_id=allocation.pk, actor=world.alice)
    html = client_for(world.alice).get(f"/requests/{allocation.pk}/").content.decode()
    assert "Use the slices" not in html
    assert "This request never had a claim: it was withdrawn before any slice was created." in html


def test_a_one_slot_instance_reads_slot_0_not_slots_0_0(world: World):
    # given: a 1g.10gb takes one memory slot, a 3g.40gb four
    small = active(world, profile="1g.10gb")
    big = ask(world, world.alice, profile="3g.40gb")
    services.approve_allocation(allocation_id=big.pk, actor=world.mallory)
    services.provision_allocation(allocation_id=big.pk)
    # when
    small_html = client_for(world.alice).get(f"/requests/{small.pk}/").content.decode()
    big_html = client_for(world.alice).get(f"/requests/{big.pk}/").content.decode()
    # then
    start = small.placements.get().start
    big_start = big.placements.get().start
    assert f'<td data-label="Memory slots">slot {start}</td>' in small_html
    assert f"slots {start}–{start}" not in small_html
    assert f'<td data-label="Memory slots">slots {big_start}–{big_start + 3}</td>' in big_html


# --- Timeline and audit log in words -------------------------------------------------------------------


def test_the_timeline_tells_each_step_in_words_with_human_dates(world: World):
    # given: alice asks, mallory approves, the slices come, alice extends twice (once past the policy)
    with time_machine.travel(datetime(2026, 11, 30, 6, 0, tzinfo=UTC), tick=False):
        pending = ask(world, world.alice, profile="3g.40gb")
        services.approve_allocation(allocation_id=pending.pk, actor=world.mallory, reason="go")
        services.provision_allocation(allocation_id=pending.pk)
        services.request_lease_extension(allocation_id=pending.pk, hours=8, actor=world.alice)
        waiting = services.request_lease_extension(allocation_id=pending.pk, hours=40, actor=world.alice)
        services.approve_lease_extension(extension_id=waiting.pk, actor=world.mallory)
    placement = pending.placements.select_related("gpu__node").get()
    # when
    html = client_for(world.alice).get(f"/requests/{pending.pk}/").content.decode()
    # then
    sentences = re.findall(r'<p class="timeline__text">(.*?)</p>', html)
    assert sentences == [
        "alice asked for 1 × 3g.40gb for 8 h",
        "mallory approved the request: “go”",
        f"The slices are ready: claim mig-alloc-{pending.uuid} on {placement.gpu.node.name} GPU "
        f"{placement.gpu.index}, slots {placement.start}–{placement.start + 3}",
        "alice extended the lease by 8 h to 16 h, until 2026-11-30 22:00 UTC",
        "alice asked to extend the lease by 40 h, to 56 h in all; a manager decides",
        "mallory approved extending the lease by 40 h: lease extended to 56 h, until 2026-12-02 14:00 UTC",
    ]
    timeline = html[html.index('id="timeline-title"') :]
    assert ISO.search(re.sub(r'datetime="[^"]*"', "", timeline)) is None  # machine-readable attributes aside
    assert DICT.search(html) is None
    assert "request now approved" not in html


def test_the_audit_log_shows_sentences_and_changes_never_dicts_or_iso_timestamps(world: World):
    # given: events of every kind of object, with dates, lists and mappings in them
    allocation = active(world)
    services.request_lease_extension(allocation_id=allocation.pk, hours=4, actor=world.alice)
    services.set_tenant_quota(
        tenant_id=world.tenant_b.pk,
        pool_id=world.pool.pk,
        compute_slices_limit=7,
        memory_slices_limit=8,
        profile_caps={"1g.10gb": 2},
        actor=world.root,
    )
    services.reject_allocation(
        allocation_id=ask(world, world.alice, profile="3g.40gb").pk, actor=world.mallory, reason="no"
    )
    # when
    response = client_for(world.root).get("/manage/audit/")
    # then
    html = response.content.decode()
    text = text_of(html)
    assert AuditEvent.objects.count() == response.context["page"].paginator.count
    assert DICT.search(html) is None
    body = html[html.index("<tbody>") :]
    assert ISO.search(re.sub(r'datetime="[^"]*"', "", body)) is None
    assert "root set the quota to 7 compute slices and 8 memory slots (caps: 1g.10gb ≤ 2)" in text
    assert "mallory rejected the request: “no”" in text
    assert "alice extended the lease by 4 h to 12 h, until" in text
    assert "lease (hours) 8 → 12" in text


# --- Pool names, not slugs -----------------------------------------------------------------------------


def test_a_tenant_without_quota_in_a_pool_is_told_the_pools_name(world: World):
    # given
    pool = services.create_node_pool(name="A100 lab", slug="a100", gpu_model="NVIDIA A100-SXM4-80GB", actor=world.root)
    # when
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=pool.pk,
        profile="1g.10gb",
        count=1,
        lease_hours=8,
        purpose="p",
        actor=world.alice,
    )
    # then
    assert allocation.status_message == "Waiting for a manager: The tenant has no quota in A100 lab."


# --- Quota change review -------------------------------------------------------------------------------


def test_the_quota_change_review_shows_current_limits_usage_and_warns_about_a_cut_below_usage(world: World):
    # given: Team A uses 6 compute slices and 8 memory slots (2 x 3g.40gb); a cut to 4 / 16 is asked
    for _ in range(2):
        services.approve_allocation(allocation_id=ask(world, world.alice, profile="3g.40gb").pk, actor=world.mallory)
    cut, _ = services.request_quota_change(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        compute_slices_limit=4,
        memory_slices_limit=16,
        profile_caps={"3g.40gb": 1},
        justification="fewer GPUs next month",
        actor=world.mallory,
    )
    grow, _ = services.request_quota_change(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        compute_slices_limit=28,
        memory_slices_limit=32,
        justification="growth",
        actor=world.mallory,
    )
    # when
    response = client_for(world.root).get("/manage/quota-changes/")
    # then
    reviews = {r.change.pk: r for r in response.context["reviews"]}
    assert reviews[cut.pk].below_usage == [
        "6 compute slices are in use; the new limit is 4.",
        "2 × 3g.40gb are held; the new cap is 1.",
    ]
    assert reviews[grow.pk].below_usage == []
    current = reviews[cut.pk].current
    assert current is not None
    assert (current.compute_limit, current.memory_limit, current.compute_used, current.memory_used) == (14, 16, 6, 8)
    html = response.content.decode()
    row = html[html.index(f'id="quota-change-{cut.pk}"') : html.index(f'id="quota-change-{grow.pk}"')]
    assert '<td data-label="Now: limits (compute / memory)" class="num">14 / 16</td>' in row
    assert '<td data-label="Now: in use" class="num">6 / 8</td>' in row
    assert '<td data-label="Requested limits" class="num"><strong>4 / 16</strong></td>' in row
    assert "Below current usage." in row
    assert "Below current usage." not in html[html.index(f'id="quota-change-{grow.pk}"') :]


# --- Lease extensions on the pages ---------------------------------------------------------------------


def test_an_extension_within_the_policy_is_applied_and_says_so(world: World):
    # given
    allocation = active(world)
    # when
    response = client_for(world.alice).post(f"/requests/{allocation.pk}/extend/", {"hours": "4"}, follow=True)
    # then
    allocation.refresh_from_db()
    assert allocation.lease_hours == 12
    assert allocation.lease_expires_at is not None
    assert messages_of(response) == [
        f"The lease of request #{allocation.pk} is extended by 4 h to 12 h, until "
        f"{allocation.lease_expires_at:%Y-%m-%d %H:%M} UTC."
    ]


def test_an_extension_past_the_policy_goes_to_a_manager_who_approves_it_on_the_approvals_page(world: World):
    # given
    allocation = active(world)
    alice, mallory = client_for(world.alice), client_for(world.mallory)
    # when
    asked = alice.post(f"/requests/{allocation.pk}/extend/", {"hours": "24"}, follow=True)
    extension = LeaseExtension.objects.get()
    approvals = mallory.get("/approvals/")
    detail = alice.get(f"/requests/{allocation.pk}/")
    approved = mallory.post(f"/extensions/{extension.pk}/approve/", {"next": "/approvals/"}, follow=True)
    # then
    assert messages_of(asked) == [
        f"Extending the lease of request #{allocation.pk} by 24 h to 32 h needs a manager: past the 24 h that "
        "apply at once. The tenant's managers are notified."
    ]
    assert [e.pk for e in approvals.context["extensions"]] == [extension.pk]
    assert f'action="/extensions/{extension.pk}/approve/"' in approvals.content.decode()
    assert "Extending the lease by 24 h (to 32 h) waits for a manager" in text_of(detail.content.decode())
    assert approved.redirect_chain == [("/approvals/", 302)]
    allocation.refresh_from_db()
    assert allocation.lease_hours == 32
    assert approved.context["extensions"] == []


def test_a_manager_sees_the_extension_decision_on_the_request_page_and_rejects_it(world: World):
    # given
    allocation = active(world)
    extension = services.request_lease_extension(allocation_id=allocation.pk, hours=24, actor=world.alice)
    mallory = client_for(world.mallory)
    # when
    page = mallory.get(f"/requests/{allocation.pk}/").content.decode()
    rejected = mallory.post(f"/extensions/{extension.pk}/reject/", {"reason": "end of quarter"}, follow=True)
    # then
    assert f'action="/extensions/{extension.pk}/reject/"' in page
    assert messages_of(rejected) == [f"Extending the lease of request #{allocation.pk} by 24 h is rejected."]
    extension.refresh_from_db()
    assert (extension.status, extension.decision_reason) == ("rejected", "end of quarter")


@pytest.mark.parametrize("action", ["approve", "reject"])
def test_a_member_gets_403_deciding_an_extension_and_charlie_404_and_nothing_changes(world: World, action: str):
    # given
    allocation = active(world)
    extension = services.request_lease_extension(allocation_id=allocation.pk, hours=24, actor=world.alice)
    events = AuditEvent.objects.count()
    # when
    member = client_for(world.alice).post(f"/extensions/{extension.pk}/{action}/", {"reason": "x"})
    other = client_for(world.charlie).post(f"/extensions/{extension.pk}/{action}/", {"reason": "x"})
    # then
    assert (member.status_code, other.status_code) == (403, 404)
    extension.refresh_from_db()
    allocation.refresh_from_db()
    assert (extension.status, allocation.lease_hours) == ("pending", 8)
    assert AuditEvent.objects.count() == events
