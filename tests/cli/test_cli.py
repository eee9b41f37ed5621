"""The `fatia` CLI against a real server (pytest-django's live_server) with real API tokens.

Most tests call `main([...])` in-process and read stdout/stderr; a few run `python -m allocations.cli`
as a subprocess to prove the entry point and that the CLI needs nothing but the standard library.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import stat
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from allocations import cli, services
from allocations.cli import main
from allocations.models import Allocation, LeaseExtension
from allocations.services.tenant_namespaces import assign_namespace
from tenants.models import ApiToken, AuditEvent, Tenant
from tenants.services import create_api_token
from tests.cohorts.helpers import cohort_pool
from tests.conftest import World
from tests.queue.helpers import ask

Status = Allocation.Status
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@dataclass(frozen=True)
class Tokens:
    alice: str
    alice_read: str
    mallory: str
    charlie: str


@pytest.fixture(autouse=True)
def private_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own config file and none of the caller's FATIA_* or proxy settings."""
    path = tmp_path / "fatia" / "config.json"
    monkeypatch.setenv("FATIA_CONFIG", str(path))
    for name in ("FATIA_URL", "FATIA_TOKEN", "FATIA_TIMEOUT", "http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    return path


@pytest.fixture
def server(transactional_db: None, live_server: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """A real HTTP server in a thread; the CLI finds it through FATIA_URL."""
    Path(settings.STATIC_ROOT).mkdir(parents=True, exist_ok=True)  # whitenoise warns when it is missing
    monkeypatch.setenv("FATIA_URL", live_server.url)
    return str(live_server.url)


@pytest.fixture
def tokens(world: World) -> Tokens:
    def token(user: Any, scope: str) -> str:
        _, raw = create_api_token(user=user, name=f"{user.username}-{scope}", scope=scope, expires_at=None, actor=user)
        return raw

    return Tokens(
        alice=token(world.alice, "write"),
        alice_read=token(world.alice, "read"),
        mallory=token(world.mallory, "write"),
        charlie=token(world.charlie, "write"),
    )


@pytest.fixture
def fatia(capsys: pytest.CaptureFixture[str], server: str):
    """Run the CLI in-process: fatia(token, "list", "--json") -> Outcome."""

    def run(token: str | None, *argv: str) -> Outcome:
        capsys.readouterr()
        code = main([*(["--token", token] if token else []), *argv])
        out, err = capsys.readouterr()
        return Outcome(code, out, err)

    return run


def request_args(
    *, pool: str = "h100", profile: str = "1g.10gb", count: str = "1", lease_hours: str = "8"
) -> list[str]:
    return [
        "request",
        "--pool",
        pool,
        "--profile",
        profile,
        "--count",
        count,
        "--lease-hours",
        lease_hours,
        "--purpose",
        "fine-tune llama",
    ]


def table(*rows: list[object]) -> list[str]:
    """The lines of an aligned table as the CLI prints it (ids grow across tests, so widths vary)."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def minute(moment: datetime | None) -> str:
    """How the CLI prints a timestamp."""
    assert moment is not None
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%MZ")


@pytest.fixture
def silent_port():
    """A port that accepts connections and never answers (the kernel completes the handshake)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield int(listener.getsockname()[1])


# --- login, logout, whoami ----------------------------------------------------------------------------


def test_login_checks_the_token_and_stores_url_and_token_in_a_file_only_the_user_can_read(
    world: World, tokens: Tokens, fatia, server: str, private_config: Path
):
    # when
    login = fatia(None, "login", "--url", server + "/", "--token", tokens.alice)
    whoami = fatia(None, "whoami")
    # then
    assert login == Outcome(0, f"Logged in to {server} as alice. Saved to {private_config}.\n", "")
    assert json.loads(private_config.read_text()) == {"url": server, "token": tokens.alice}
    assert stat.S_IMODE(private_config.stat().st_mode) == 0o600
    assert whoami.code == 0
    assert whoami.out.splitlines() == [
        f"alice at {server}",
        *table(["TENANT", "SLUG", "ID", "ROLE"], ["Team A", "team-a", world.tenant_a.pk, "member"]),
    ]


def test_whoami_shows_a_platform_admin_every_tenants_slug_and_id(world: World, fatia):
    # given: what `--tenant` takes is shown somewhere for an admin, who is a member of no tenant
    _, root = create_api_token(user=world.root, name="root", scope="read", expires_at=None, actor=world.root)
    # when
    whoami = fatia(root, "whoami")
    # then
    assert whoami.out.splitlines()[1:] == [
        "No tenant memberships.",
        "Every tenant (you manage them all as a platform admin):",
        *table(
            ["TENANT", "SLUG", "ID"], ["Team A", "team-a", world.tenant_a.pk], ["Team B", "team-b", world.tenant_b.pk]
        ),
    ]


def test_login_with_a_wrong_token_fails_and_stores_nothing(world: World, fatia, server: str, private_config: Path):
    # when
    login = fatia(None, "login", "--url", server, "--token", "fatia_000000000000_wrong")
    # then
    assert login == Outcome(
        1, "", "fatia: error: Invalid API token; run `fatia login` with a valid token. (HTTP 401)\n"
    )
    assert not private_config.exists()


def test_logout_forgets_the_token_and_later_commands_say_how_to_log_in(
    world: World, tokens: Tokens, fatia, server: str, private_config: Path, monkeypatch: pytest.MonkeyPatch
):
    # given
    assert fatia(None, "login", "--url", server, "--token", tokens.alice).code == 0
    monkeypatch.delenv("FATIA_URL")
    # when
    logout = fatia(None, "logout")
    whoami = fatia(None, "whoami")
    # then
    assert logout.code == 0
    assert logout.out == (
        f"Logged out: removed {private_config}. "
        "The token itself still works until you revoke it (fatia token revoke).\n"
    )
    assert not private_config.exists()
    assert whoami == Outcome(
        2,
        "",
        "fatia: error: Not logged in: run `fatia login --url URL --token TOKEN` or set FATIA_URL and FATIA_TOKEN.\n",
    )


# --- requesting and deciding --------------------------------------------------------------------------


def test_a_small_request_is_approved_at_once_and_the_cli_shows_its_status(world: World, tokens: Tokens, fatia):
    # when
    outcome = fatia(tokens.alice, *request_args(count="2"))
    # then
    allocation = Allocation.objects.get()
    assert outcome == Outcome(
        0,
        f"Allocation #{allocation.pk}: approved - 2x 1g.10gb in H100 pool for Team A, 8 h lease\n"
        "  Approved automatically: inside quota and the tenant's auto-approve policy.\n"
        f"  Once it is active, `fatia show {allocation.pk}` prints the claim name and namespace for your pod spec.\n",
        "",
    )
    assert (allocation.status, allocation.requested_by, allocation.count) == (Status.APPROVED, world.alice, 2)
    assert allocation.idempotency_key is not None  # the CLI always sends one


def test_a_request_beyond_the_policy_waits_and_the_manager_approves_it(world: World, tokens: Tokens, fatia):
    # given
    requested = fatia(tokens.alice, *request_args(profile="3g.40gb"))
    allocation = Allocation.objects.get()
    # when
    approved = fatia(tokens.mallory, "approve", str(allocation.pk), "--reason", "go ahead")
    # then
    assert requested.out == (
        f"Allocation #{allocation.pk}: pending - 1x 3g.40gb in H100 pool for Team A, 8 h lease\n"
        "  Waiting for a manager: beyond the auto-approve policy.\n"
        f"  Once it is active, `fatia show {allocation.pk}` prints the claim name and namespace for your pod spec.\n"
    )
    assert approved == Outcome(
        0,
        f"Allocation #{allocation.pk}: approved - 1x 3g.40gb in H100 pool for Team A, 8 h lease\n"
        "  Approved; waiting for the cluster.\n",
        "",
    )
    allocation.refresh_from_db()
    assert (allocation.status, allocation.decided_by, allocation.decision_reason) == (
        Status.APPROVED,
        world.mallory,
        "go ahead",
    )


def test_a_member_cannot_approve_and_the_request_stays_pending(world: World, tokens: Tokens, fatia):
    # given
    assert fatia(tokens.alice, *request_args(profile="3g.40gb")).code == 0
    allocation = Allocation.objects.get()
    events_before = AuditEvent.objects.count()
    # when
    outcome = fatia(tokens.alice, "approve", str(allocation.pk))
    # then
    assert outcome == Outcome(1, "", "fatia: error: Only the tenant's managers can approve requests. (HTTP 403)\n")
    allocation.refresh_from_db()
    assert (allocation.status, allocation.decided_by) == (Status.PENDING, None)
    assert AuditEvent.objects.count() == events_before


def test_a_manager_rejects_with_a_reason(world: World, tokens: Tokens, fatia):
    # given
    assert fatia(tokens.alice, *request_args(profile="3g.40gb")).code == 0
    allocation = Allocation.objects.get()
    # when
    outcome = fatia(tokens.mallory, "reject", str(allocation.pk), "--reason", "use a 1g")
    # then
    assert outcome.code == 0
    assert outcome.out.splitlines() == [
        f"Allocation #{allocation.pk}: rejected - 1x 3g.40gb in H100 pool for Team A, 8 h lease",
        "  Rejected: use a 1g",
    ]
    allocation.refresh_from_db()
    assert allocation.status == Status.REJECTED


def test_a_count_out_of_range_is_refused_with_the_field_message_and_nothing_is_created(
    world: World, tokens: Tokens, fatia
):
    # when
    outcome = fatia(tokens.alice, *request_args(count="57"))
    # then
    assert outcome == Outcome(1, "", "fatia: error: count: Ask for between 1 and 56 slices. (HTTP 400)\n")
    assert not Allocation.objects.exists()


def test_several_field_errors_are_listed_on_one_line(world: World, tokens: Tokens, fatia):
    # when: a profile the pool does not offer and a lease past the tenant's maximum of 168 hours
    outcome = fatia(tokens.alice, *request_args(profile="9g.99gb", lease_hours="500"))
    # then
    assert outcome.code == 1
    assert outcome.err == (
        "fatia: error: profile: '9g.99gb' is not offered in H100 pool (NVIDIA H100 80GB HBM3). "
        "Choose one of: 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb.; "
        "lease_hours: The lease must be between 1 and 168 hours for Team A. (HTTP 400)\n"
    )
    assert not Allocation.objects.exists()


def test_an_unknown_pool_slug_is_an_error_before_anything_is_posted(world: World, tokens: Tokens, fatia):
    # when
    outcome = fatia(tokens.alice, *request_args(pool="a100"))
    # then
    assert outcome == Outcome(1, "", "fatia: error: No pool with slug 'a100'; `fatia pools` lists them.\n")
    assert not Allocation.objects.exists()


def test_a_read_only_token_cannot_request_slices(world: World, tokens: Tokens, fatia):
    # when
    outcome = fatia(tokens.alice_read, *request_args())
    # then
    assert outcome == Outcome(
        1, "", "fatia: error: This API token is read-only; create a token with the write scope. (HTTP 403)\n"
    )
    assert not Allocation.objects.exists()


def test_repeating_a_request_with_the_same_idempotency_key_returns_the_first_one(world: World, tokens: Tokens, fatia):
    # given
    args = [*request_args(), "--idempotency-key", "job-42"]
    first = fatia(tokens.alice, *args)
    # when
    again = fatia(tokens.alice, *args)
    # then
    allocation = Allocation.objects.get()
    assert first.code == again.code == 0
    assert again.out == first.out + "  (Idempotency-Key job-42 was used before: this is that earlier request.)\n"
    assert allocation.idempotency_key == "job-42"


# --- reading ------------------------------------------------------------------------------------------


def test_list_shows_the_tenants_requests_newest_first_and_filters_by_status(world: World, tokens: Tokens, fatia):
    # given
    fatia(tokens.alice, *request_args(count="2"))
    fatia(tokens.mallory, *request_args(profile="3g.40gb"))
    small, big = Allocation.objects.order_by("id")
    # when
    everything = fatia(tokens.alice, "list")
    pending = fatia(tokens.alice, "list", "--status", "pending", "--tenant", str(world.tenant_a.pk))
    theirs = fatia(tokens.charlie, "list")
    # then
    header = ["ID", "STATUS", "TENANT", "POOL", "PROFILE", "COUNT", "HOURS", "BY", "CREATED", "EXPIRES"]
    big_row = [big.pk, "pending", "Team A", "H100 pool", "3g.40gb", 1, 8, "mallory", minute(big.created_at), "-"]
    small_row = [small.pk, "approved", "Team A", "H100 pool", "1g.10gb", 2, 8, "alice", minute(small.created_at), "-"]
    assert (everything.code, everything.err) == (0, "")
    assert everything.out.splitlines() == table(header, big_row, small_row)
    assert pending.out.splitlines() == table(header, big_row)
    assert theirs == Outcome(0, "No allocations.\n", "")


def test_list_and_show_mark_borrowed_slices_and_their_reclaim_time(world: World, tokens: Tokens, fatia):
    # given (issue 15): Team B runs a 1g.10gb on a slice Team A lends, given notice: A needs its guarantee back
    pool, _ = cohort_pool(world)
    borrowed = ask(world, pool, "1g.10gb", b=True)
    ask(world, pool, "7g.80gb")
    borrowed.refresh_from_db()
    assert borrowed.reclaim_at is not None
    # when
    listed = fatia(tokens.charlie, "list")
    shown = fatia(tokens.charlie, "show", str(borrowed.pk))
    # then: the list marks its status and explains the mark; `show` names the borrowed part and the deadline
    [row] = [line for line in listed.out.splitlines() if line.startswith(str(borrowed.pk))]
    assert f"active (borrowed, reclaim at {minute(borrowed.reclaim_at)})" in row
    assert listed.out.splitlines()[-1] == cli.BORROWED_NOTE
    assert "  borrowed       1 compute / 1 memory slices from the cohort, may be reclaimed" in shown.out.splitlines()
    assert f"  reclaim at     {minute(borrowed.reclaim_at)}" in shown.out.splitlines()


def test_list_all_pages_follows_the_pagination(world: World, tokens: Tokens, fatia):
    # given: 52 requests, more than one page of 50
    for n in range(52):
        Allocation.objects.create(
            tenant=world.tenant_a, pool=world.pool, requested_by=world.alice, profile="1g.10gb", count=1,
            lease_hours=1, purpose=f"batch {n}", compute_slices=1, memory_slices=1, status=Status.RELEASED,
        )  # fmt: skip
    # when
    first_page = fatia(tokens.alice, "list")
    every_page = fatia(tokens.alice, "--json", "list", "--all-pages")
    # then
    assert first_page.out.splitlines()[-1] == "50 of 52; --all-pages shows the rest."
    assert len(first_page.out.splitlines()) == 1 + 50 + 1
    assert every_page.json()["count"] == 52
    assert sorted(a["purpose"] for a in every_page.json()["results"]) == sorted(f"batch {n}" for n in range(52))


def test_show_prints_the_request_with_its_placements_and_timeline_once_active(world: World, tokens: Tokens, fatia):
    # given: the worker has provisioned it (the simulated cluster makes it ACTIVE at once)
    fatia(tokens.alice, *request_args())
    allocation = Allocation.objects.get()
    services.provision_allocation(allocation_id=allocation.pk)
    allocation.refresh_from_db()
    placement = allocation.placements.select_related("gpu__node").get()
    # when
    outcome = fatia(tokens.alice, "show", str(allocation.pk))
    # then
    created = minute(allocation.created_at)
    requested_at, auto_approved_at, activated_at = (
        AuditEvent.objects.filter(object_type="allocation", object_id=str(allocation.pk))
        .order_by("id")
        .values_list("created_at", flat=True)
    )
    assert outcome.code == 0
    assert outcome.out.splitlines() == [
        f"Allocation #{allocation.pk}: active - 1x 1g.10gb in H100 pool for Team A, 8 h lease",
        f"  {allocation.status_message}",
        f"  tenant         Team A ({world.tenant_a.pk})",
        f"  pool           H100 pool ({world.pool.pk})",
        f"  requested by   alice, {created}",
        "  purpose        fine-tune llama",
        "  cost           1 compute / 1 memory slices = 0.143 GPU-eq",
        "  auto-approved  yes",
        f"  decided        {minute(allocation.decided_at)}",
        "  reason         -",
        f"  claim          mig-alloc-{allocation.uuid}",
        "  namespace      fatia-team-a",
        f"  active since   {minute(allocation.activated_at)}",
        f"  lease expires  {minute(allocation.lease_expires_at)}",
        "  ended          -",
        "",
        "Placements:",
        *table(
            ["NODE", "GPU", "PROFILE", "START", "SIZE", "DEVICE"],
            [
                placement.gpu.node.name,
                placement.gpu.index,
                "1g.10gb",
                placement.start,
                placement.size,
                placement.device_name or "-",
            ],
        ),
        "",
        "Timeline:",
        *table(
            ["WHEN", "ACTOR", "VERB", "CHANGE"],
            [minute(requested_at), "alice", "request", "approved"],
            [minute(auto_approved_at), "system", "auto_approve", "pending -> approved"],
            [minute(activated_at), "system", "activate", "approved -> active"],
        ),
    ]
    assert outcome.err == ""


def test_another_tenants_request_is_not_found(world: World, tokens: Tokens, fatia):
    # given
    fatia(tokens.alice, *request_args())
    allocation = Allocation.objects.get()
    # when
    shown = fatia(tokens.charlie, "show", str(allocation.pk))
    released = fatia(tokens.charlie, "release", str(allocation.pk))
    # then
    assert shown == Outcome(1, "", f"fatia: error: Allocation {allocation.pk} not found. (HTTP 404)\n")
    assert released == shown
    allocation.refresh_from_db()
    assert allocation.status == Status.APPROVED


def test_json_output_is_the_api_document_for_scripts(world: World, tokens: Tokens, fatia):
    # given
    created = fatia(tokens.alice, "--json", *request_args())
    allocation = Allocation.objects.get()
    # when
    listed = fatia(tokens.alice, "list", "--json")
    shown = fatia(tokens.alice, "show", str(allocation.pk), "--json")
    # then
    assert created.json()["id"] == allocation.pk
    assert created.json()["status"] == "approved"
    assert listed.json()["count"] == 1
    assert [a["id"] for a in listed.json()["results"]] == [allocation.pk]
    assert shown.json()["uuid"] == str(allocation.uuid)
    assert [e["verb"] for e in shown.json()["timeline"]] == ["request", "auto_approve"]


def test_pools_lists_each_pool_with_its_profiles(world: World, tokens: Tokens, fatia):
    # when
    outcome = fatia(tokens.charlie, "pools")
    # then
    lines = outcome.out.splitlines()
    assert outcome.code == 0
    assert lines[:3] == [
        f"h100 (id {world.pool.pk}): H100 pool, NVIDIA H100 80GB HBM3",
        "PROFILE     COMPUTE  MEMORY  MIB    PER GPU",
        "1g.10gb     1        1       9984   7",
    ]
    assert [line.split()[0] for line in lines[2:]] == world.pool.profiles


def test_quota_shows_slices_and_gpu_equivalents(world: World, tokens: Tokens, fatia):
    # given: 2x 1g.20gb cost 2 compute and 4 memory slices, so max(2/7, 4/8) = 0.5 GPU-equivalents used;
    # free is priced from the free slices, max(12/7, 12/8) = 1.714 (not limit minus used)
    fatia(tokens.alice, *request_args(profile="1g.20gb", count="2"))
    # when
    outcome = fatia(tokens.alice, "quota", "--tenant", str(world.tenant_a.pk))
    # then
    assert outcome == Outcome(
        0,
        "TENANT  POOL       COMPUTE  MEMORY  GPU-EQ  GPU-EQ FREE  CAPS\n"
        "Team A  H100 pool  2/14     4/16    0.5/2   1.714        -\n",
        "",
    )
    # and the tenant by its slug, as `--pool` takes a pool's
    assert fatia(tokens.alice, "quota", "--tenant", "team-a") == outcome


# --- releasing and extending --------------------------------------------------------------------------


def test_releasing_an_approved_request_withdraws_it(world: World, tokens: Tokens, fatia):
    # given
    fatia(tokens.alice, *request_args())
    allocation = Allocation.objects.get()
    # when
    outcome = fatia(tokens.alice, "release", str(allocation.pk))
    # then
    assert outcome.out == (
        f"Allocation #{allocation.pk}: withdrawn - 1x 1g.10gb in H100 pool for Team A, 8 h lease\n"
        "  Withdrawn before any slice was created.\n"
    )
    allocation.refresh_from_db()
    assert allocation.status == Status.WITHDRAWN


def test_extending_an_active_lease_adds_hours_and_a_pending_one_is_a_conflict(world: World, tokens: Tokens, fatia):
    # given
    fatia(tokens.alice, *request_args())
    fatia(tokens.alice, *request_args(profile="3g.40gb"))
    active, pending = Allocation.objects.order_by("id")
    services.provision_allocation(allocation_id=active.pk)
    # when
    extended = fatia(tokens.alice, "extend", str(active.pk), "--hours", "4")
    refused = fatia(tokens.alice, "extend", str(pending.pk), "--hours", "4")
    # then
    active.refresh_from_db()
    assert extended == Outcome(
        0,
        f"Extended at once by 4 h: allocation #{active.pk} now has a 12 h lease, "
        f"ending {minute(active.lease_expires_at)}.\n",
        "",
    )
    assert refused == Outcome(1, "", "fatia: error: Cannot move from pending to extended. (HTTP 409)\n")
    assert active.lease_hours == 12


def test_extending_past_the_auto_approve_lease_says_it_waits_for_a_manager(world: World, tokens: Tokens, fatia):
    """Issue 9: past the tenant's auto-approve lease (24 h for Team A) an extension is a request to the
    managers; the CLI says which of the two happened."""
    # given
    fatia(tokens.alice, *request_args())
    allocation = Allocation.objects.get()
    services.provision_allocation(allocation_id=allocation.pk)
    # when
    waiting = fatia(tokens.alice, "extend", str(allocation.pk), "--hours", "24")
    as_json = fatia(tokens.mallory, "--json", "extend", str(allocation.pk), "--hours", "24")
    # then
    extension = LeaseExtension.objects.get(status="pending")
    assert waiting == Outcome(
        0,
        f"Extension #{extension.pk} of allocation #{allocation.pk} by 24 h waits for a manager: the whole lease "
        f"would be 32 h, past what applies at once. `fatia show {allocation.pk}` shows the lease once it is "
        "decided.\n",
        "",
    )
    assert (as_json.code, as_json.json()["lease_hours"]) == (0, 32)  # a manager's extension applies at once


@pytest.mark.django_db(transaction=True)
def test_a_request_active_at_once_prints_its_claim_and_namespace(world: World, tokens: Tokens, fatia, settings):
    """Issue 9: `fatia request` said to put the claim name in the pod spec without printing it. With the
    demo's embedded worker the slices are active when the answer comes back."""
    # given
    settings.CELERY_TASK_ALWAYS_EAGER = True
    # when
    outcome = fatia(tokens.alice, *request_args())
    # then
    allocation = Allocation.objects.get()
    assert allocation.status == Status.ACTIVE
    assert outcome.out.splitlines()[-1] == (
        f"  Claim mig-alloc-{allocation.uuid} in namespace fatia-team-a: run your pod in that namespace with "
        f"spec.resourceClaims[].resourceClaimName: mig-alloc-{allocation.uuid}"
    )


def test_a_request_of_40_slices_prints_both_its_claims(world: World, tokens: Tokens, fatia):
    """Issue 10: a claim holds at most 32 slices, so 40 are in two claims; the CLI names both."""
    # given: an approved request of 40 1g.10gb, provisioned on the simulated fleet
    services.set_tenant_quota(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        compute_slices_limit=56,
        memory_slices_limit=64,
        actor=world.root,
    )
    fatia(tokens.alice, *request_args(count="40"))
    allocation = Allocation.objects.get()
    services.approve_allocation(allocation_id=allocation.pk, actor=world.mallory)
    services.provision_allocation(allocation_id=allocation.pk)
    base = f"mig-alloc-{allocation.uuid}"
    # when
    shown = fatia(tokens.alice, "show", str(allocation.pk))
    # then
    assert f"  claims         {base}-0, {base}-1" in shown.out.splitlines()
    assert cli.claim_hint(fatia(tokens.alice, "--json", "show", str(allocation.pk)).json()) == (
        f"  Claims {base}-0, {base}-1 in namespace fatia-team-a: run your pod in that namespace with one "
        f"spec.resourceClaims[] entry per claim, resourceClaimName: {base}-0, {base}-1"
    )


# --- tokens -------------------------------------------------------------------------------------------


def test_a_token_created_with_the_cli_works_until_it_is_revoked(world: World, tokens: Tokens, fatia):
    # given
    created = fatia(tokens.alice, "--json", "token", "create", "--name", "ci", "--scope", "read")
    new_token = created.json()["token"]
    token_id = created.json()["id"]
    # when
    before = fatia(new_token, "whoami")
    revoked = fatia(tokens.alice, "token", "revoke", str(token_id))
    after = fatia(new_token, "whoami")
    listed = fatia(tokens.alice, "--json", "token", "list")
    # then
    assert created.json()["scope"] == "read"
    assert before.out.splitlines()[0].startswith("alice at ")
    assert revoked == Outcome(0, f"Token {token_id} revoked.\n", "")
    assert after == Outcome(
        1, "", "fatia: error: This API token has been revoked; run `fatia login` with a valid token. (HTTP 401)\n"
    )
    assert {t["name"]: t["revoked_at"] is not None for t in listed.json()} == {
        "ci": True,
        "alice-read": False,
        "alice-write": False,
    }
    assert ApiToken.objects.get(pk=token_id).revoked_at is not None


# --- failures of the transport --------------------------------------------------------------------------


def test_an_unreachable_server_exits_3_with_one_line_and_no_traceback(capsys: pytest.CaptureFixture[str]):
    # given
    port = free_port()
    # when
    code = main(["--url", f"http://127.0.0.1:{port}", "--token", "fatia_x_y", "list"])
    # then
    out, err = capsys.readouterr()
    assert (code, out, err) == (3, "", f"fatia: error: Cannot reach http://127.0.0.1:{port}: Connection refused.\n")


def test_a_server_that_never_answers_times_out_and_tells_how_to_retry_the_request_safely(
    capsys: pytest.CaptureFixture[str], silent_port: int
):
    # given
    url = f"http://127.0.0.1:{silent_port}"
    # when: a pool id, so the first call is the POST itself
    code = main(["--url", url, "--token", "fatia_x_y", "--timeout", "0.3", *request_args(pool="7"),
                 "--idempotency-key", "k-1"])  # fmt: skip
    # then
    out, err = capsys.readouterr()
    assert (code, out) == (3, "")
    assert err == (
        f"fatia: error: {url} did not answer within 0.3 s. The request may or may not have been created: "
        "repeat it with --idempotency-key k-1 to be safe.\n"
    )


def test_a_usage_error_exits_2(capsys: pytest.CaptureFixture[str]):
    # when
    code = main(["show", "twelve"])
    # then
    _, err = capsys.readouterr()
    assert code == 2
    assert err.splitlines()[-1] == "fatia show: error: argument id: 'twelve' is not a whole number"


@dataclass
class Canned:
    """A stand-in portal that answers GETs from a list of (status, headers, body), one per request."""

    answers: list[tuple[int, dict[str, str], bytes]] = field(default_factory=list)
    seen: list[dict[str, str]] = field(default_factory=list)
    url: str = ""


@pytest.fixture
def canned():
    state = Canned()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.seen.append(dict(self.headers))
            status, headers, body = state.answers.pop(0)
            self.send_response(status)
            for name, value in {"Content-Length": str(len(body)), **headers}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield state
    httpd.shutdown()
    httpd.server_close()


def test_a_read_answered_503_while_the_portal_restarts_is_retried(
    canned: Canned, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    # given
    monkeypatch.setattr(cli, "RETRY_BACKOFF_S", 0.01)
    me = {"username": "alice", "is_platform_admin": False, "memberships": []}
    canned.answers = [(503, {}, b""), (200, {"Content-Type": "application/json"}, json.dumps(me).encode())]
    # when
    code = main(["--url", canned.url, "--token", "fatia_a_b", "--json", "whoami"])
    # then
    out, err = capsys.readouterr()
    assert (code, json.loads(out), err) == (0, me, "")
    assert len(canned.seen) == 2


def test_a_redirect_is_not_followed_so_the_token_goes_nowhere_else(canned: Canned, capsys: pytest.CaptureFixture[str]):
    # given
    canned.answers = [(302, {"Location": "https://elsewhere.example/api/v1/me/"}, b"")]
    # when
    code = main(["--url", canned.url, "--token", "fatia_a_b", "whoami"])
    # then
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert err == (
        "fatia: error: The server redirects to https://elsewhere.example/api/v1/me/; log in with that URL. (HTTP 302)\n"
    )
    assert [h["Authorization"] for h in canned.seen] == ["Bearer fatia_a_b"]


def test_an_answer_of_an_unexpected_shape_is_a_one_line_error_not_a_traceback(
    canned: Canned, capsys: pytest.CaptureFixture[str]
):
    # given: something answers JSON, but not an allocation
    canned.answers = [(200, {"Content-Type": "application/json"}, b'{"id": 1}')]
    # when
    code = main(["--url", canned.url, "--token", "fatia_a_b", "show", "1"])
    # then
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert err == (
        "fatia: error: The server's answer has an unexpected shape (KeyError: 'status'); "
        "is the URL the portal's, and is this CLI up to date?\n"
    )


# --- the entry point ----------------------------------------------------------------------------------


def run_module(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 (our own interpreter and module, fixed arguments)
        [sys.executable, "-m", "allocations.cli", *argv],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_python_m_allocations_cli_works_with_url_and_token_from_the_environment(
    world: World, tokens: Tokens, server: str, tmp_path: Path
):
    # given
    env = {"FATIA_URL": server, "FATIA_TOKEN": tokens.alice, "FATIA_CONFIG": str(tmp_path / "none.json")}
    # when
    created = run_module("--json", *request_args(), env=env)
    listed = run_module("list", "--json", env=env)
    # then
    allocation = Allocation.objects.get()
    assert (created.returncode, created.stderr) == (0, "")
    assert json.loads(created.stdout)["id"] == allocation.pk
    assert (listed.returncode, listed.stderr) == (0, "")
    assert [a["id"] for a in json.loads(listed.stdout)["results"]] == [allocation.pk]


def test_the_cli_needs_nothing_but_the_standard_library(tmp_path: Path):
    # when: importing the module and running --help must not pull in Django
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, allocations.cli as c; c.main(['--help']); "
         "print(sorted({m.split('.')[0] for m in sys.modules} & {'django', 'rest_framework', 'portal'}))"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    # then
    assert probe.returncode == 0
    assert probe.stdout.splitlines()[-1] == "[]"


def test_movable_follows_the_tenants_policy_unless_the_cli_says(world: World, tokens: Tokens, fatia):
    # Compaction (issue 14): --movable / --no-movable, else the tenant's movable_by_default.
    Tenant.objects.filter(pk=world.tenant_a.pk).update(movable_by_default=True)
    assert fatia(tokens.alice, *request_args()).code == 0
    assert fatia(tokens.alice, *request_args(), "--no-movable").code == 0
    assert fatia(tokens.alice, *request_args(), "--movable").code == 0
    assert list(Allocation.objects.order_by("pk").values_list("movable", flat=True)) == [True, False, True]


def test_request_namespace_from_the_cli(world: World, tokens: Tokens, fatia):
    # Tenant namespaces (issue 17): --namespace names one of the tenant's; another is the portal's message, exit 1.
    assign_namespace(tenant_id=world.tenant_a.pk, name="ml-research", actor=world.root)
    assert fatia(tokens.alice, *request_args(), "--namespace", "ml-research").code == 0
    assert Allocation.objects.get().namespace == "ml-research"
    result = fatia(tokens.alice, *request_args(), "--namespace", "elsewhere")
    assert result.code != 0
    assert "elsewhere is not one of team-a's namespaces" in result.err
    assert Allocation.objects.count() == 1
