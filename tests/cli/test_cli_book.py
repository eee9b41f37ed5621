"""`fatia book create|list|cancel|asks|agree|refuse` (issue 15) against a live server: output, and exit codes 0,
1 (the portal refused: over quota, no room) and 2 (bad arguments)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.signals import request_started

from allocations.cli import main
from allocations.models import Booking
from tests.cli.test_cli import Outcome, Tokens, private_config, server, tokens  # noqa: F401  # fixtures
from tests.conftest import World


@pytest.fixture
def fatia(capsys: pytest.CaptureFixture[str], server: str) -> Callable[..., Outcome]:  # noqa: F811
    def run(token: str, *argv: str) -> Outcome:
        capsys.readouterr()
        code = main(["--token", token, *argv])
        out, err = capsys.readouterr()
        # Only the CLI's own line: the live server's thread may log a refused request to stderr meanwhile.
        return Outcome(code, out, "".join(line for line in err.splitlines(True) if line.startswith("fatia")))

    return run


def at(hours: float) -> str:
    moment = (datetime.now(UTC) + timedelta(hours=hours)).replace(second=0, microsecond=0)
    return moment.strftime("%Y-%m-%dT%H:%M")


def create(profile: str = "1g.10gb", start: float = 24, end: float = 28, count: str = "1") -> list[str]:
    return [
        "book", "create", "--pool", "h100", "--profile", profile, "--count", count,
        "--start", at(start), "--end", at(end), "--purpose", "workshop",
    ]  # fmt: skip


def test_book_create_list_and_cancel(world: World, tokens: Tokens, fatia):  # noqa: F811
    created = fatia(tokens.alice, *create())
    booking = Booking.objects.get()
    assert created.code == 0, created.err
    assert created.out.startswith(f"Booking #{booking.pk}: approved - 1x 1g.10gb in h100 for Team A, ")
    listed = fatia(tokens.alice, "book", "list")
    assert listed.code == 0
    assert listed.out.splitlines()[0].split() == [
        "ID",
        "STATUS",
        "TENANT",
        "POOL",
        "PROFILE",
        "COUNT",
        "STARTS",
        "ENDS",
        "BY",
    ]
    assert listed.out.splitlines()[1].split()[:2] == [str(booking.pk), "approved"]
    cancelled = fatia(tokens.alice, "book", "cancel", str(booking.pk), "--reason", "moved")
    assert (cancelled.code, Booking.objects.get().status) == (0, "cancelled")
    assert fatia(tokens.alice, "--json", "book", "list").json()[0]["status"] == "cancelled"


def test_a_booking_over_quota_exits_1_with_the_message(world: World, tokens: Tokens, fatia):  # noqa: F811
    assert fatia(tokens.alice, *create(profile="7g.80gb", count="2")).code == 0
    refused = fatia(tokens.alice, *create(start=25, end=26))
    assert refused.code == 1
    assert refused.err.startswith("fatia: error: count: Over the tenant's quota in H100 pool at ")
    assert refused.err.rstrip().endswith("(HTTP 400)")
    assert Booking.objects.count() == 1


def test_bad_times_exit_2_and_another_tenants_booking_is_not_found(world: World, tokens: Tokens, fatia):  # noqa: F811
    bad = fatia(tokens.alice, "book", "create", "--pool", "h100", "--profile", "1g.10gb", "--count", "1",
                "--start", "tomorrow", "--end", at(3), "--purpose", "x")  # fmt: skip
    assert bad.code == 2
    assert "is not a date and time like 2026-12-03T09:00" in bad.err
    assert fatia(tokens.alice, *create()).code == 0
    booking = Booking.objects.get()
    missing = fatia(tokens.charlie, "book", "cancel", str(booking.pk))
    assert missing == Outcome(1, "", f"fatia: error: Booking {booking.pk} not found. (HTTP 404)\n")


def test_a_lease_asks_the_bookings_owner_who_answers_from_the_cli(world: World, tokens: Tokens, fatia):  # noqa: F811
    from tests.bookings.helpers import active_lease, book, small_pool  # noqa: PLC0415 (the booking tests' set-up)

    small = small_pool(world, gpus=1)
    lease = active_lease(world, small.pool, profile="4g.40gb", hours=2)
    booking = book(world, small.pool, profile="4g.40gb", start=3.1, end=5, actor=world.charlie)
    refused = fatia(tokens.alice, "extend", str(lease.pk), "--hours", "2")
    assert refused.code == 1 and "ask the booking's owner to agree (--ask-booking-owner)" in refused.err
    asked = fatia(tokens.alice, "extend", str(lease.pk), "--hours", "2", "--ask-booking-owner")
    assert asked.code == 0, asked.err
    assert f"would use room booking #{booking.pk} holds: its owner is asked to agree" in asked.out
    queries: list[str] = []

    def heard(sender: Any, environ: dict[str, str], **kwargs: Any) -> None:
        if environ["PATH_INFO"] == "/api/v1/extension-consents/":
            queries.append(environ.get("QUERY_STRING", ""))

    request_started.connect(heard)
    try:
        listed = fatia(tokens.charlie, "book", "asks", "--status", "pending")
    finally:
        request_started.disconnect(heard)
    assert listed.code == 0
    assert queries == ["status=pending"]  # the portal filters: the CLI does not fetch every page to drop rows
    question = listed.out.splitlines()[1].split()
    assert question[1:4] == ["pending", f"#{booking.pk}", f"#{lease.pk}"]
    no_reason = fatia(tokens.charlie, "book", "refuse", question[0])
    assert no_reason.code == 2
    agreed = fatia(tokens.charlie, "book", "agree", question[0])
    assert agreed.code == 0, agreed.err
    assert agreed.out.startswith(f"You agreed to request #{lease.pk} running 2 h longer into booking #{booking.pk}")
    lease.refresh_from_db()
    assert lease.lease_hours == 4
