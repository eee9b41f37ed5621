"""Idle reclaim (allocations/services/reclaim.py): flag, warn once, keep, use clears, release after the grace
period; telemetry that is missing or broken never counts as idle; a tenant with reclaim off is left alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core import mail

from allocations.models import Allocation, Notification, SlicePlacement
from allocations.nodeagent.models import DeviceRollup
from allocations.services import reclaim
from tenants import services as tenant_services
from tenants.errors import NotAllowed
from tenants.models import AuditEvent
from tests.conftest import World
from tests.nodeagent.seed import active_at, minutes, report

pytestmark = pytest.mark.django_db
Status = Allocation.Status

ACTIVATED = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
NOW = ACTIVATED + timedelta(hours=3)  # 180 min in; the default idle time is 120 min, the grace 60 min


def reclaim_on(world: World, *, idle: int = 120, grace: int = 60) -> None:
    tenant_services.set_idle_reclaim(
        tenant_id=world.tenant_a.pk,
        actor=world.mallory,
        enabled=True,
        idle_after_minutes=idle,
        idle_grace_minutes=grace,
    )


def idle_slices(world: World, *, count: int = 1) -> tuple[Allocation, list[SlicePlacement]]:
    """An allocation active since ACTIVATED whose every slice reported no use from then until NOW."""
    allocation = active_at(world, ACTIVATED, count=count)
    placements = list(SlicePlacement.objects.filter(allocation=allocation).select_related("gpu"))
    for p in placements:
        minutes(p, ACTIVATED, NOW - timedelta(minutes=1))
        report(p, at=NOW - timedelta(seconds=10))
    return allocation, placements


IDLE_VERBS = ["flag_idle", "warn_idle", "clear_idle", "keep_idle", "reclaim_idle", "release"]


def verbs(allocation: Allocation) -> list[str]:
    return list(
        AuditEvent.objects.filter(object_type="allocation", object_id=str(allocation.pk), verb__in=IDLE_VERBS)
        .order_by("pk")
        .values_list("verb", flat=True)
    )


def test_a_request_idle_for_the_tenants_idle_time_is_flagged_and_its_owner_warned_once(world: World):
    # given
    reclaim_on(world)
    allocation, _ = idle_slices(world)

    # when: two sweeps
    first = reclaim.reclaim_idle_allocations(now=NOW)
    second = reclaim.reclaim_idle_allocations(now=NOW + timedelta(minutes=1))

    # then
    allocation.refresh_from_db()
    assert (first.flagged, second.flagged, second.reclaimed) == ([allocation.pk], [], [])
    assert allocation.idle_since == ACTIVATED
    assert allocation.idle_warned_at == NOW
    assert allocation.idle_release_at == NOW + timedelta(minutes=60)
    assert allocation.status == Status.ACTIVE
    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert message.to == ["alice@example.test"]
    assert message.subject == f"[Fatia] Request #{allocation.pk} is idle: its slices will be released at 12:00 UTC"
    assert (
        f"Every slice of request #{allocation.pk} (1 × 1g.10gb in H100 pool, claim {allocation.claim_name}) has had "
        "no process and no memory in use since 2026-11-30 08:00 UTC.\n"
        "Your tenant Team A gives idle slices back: they will be released at 2026-11-30 12:00 UTC unless they are "
        "used again or you keep them.\n"
    ) in message.body
    assert f"/requests/{allocation.pk}/" in message.body
    inbox = list(Notification.objects.filter(recipient=world.alice, kind="idle_reclaim").values_list("kind", "text"))
    assert inbox == [
        (
            "idle_reclaim",
            f"Request #{allocation.pk} (1 × 1g.10gb in H100 pool) has been idle since 2026-11-30 08:00 UTC and will "
            "be released at 2026-11-30 12:00 UTC unless used or kept.",
        )
    ]
    assert verbs(allocation) == ["flag_idle", "warn_idle"]


def test_a_request_without_telemetry_is_never_idle(world: World):
    # given: active for three hours, but no agent ever reported its slice
    reclaim_on(world)
    allocation = active_at(world, ACTIVATED)

    # when
    result = reclaim.reclaim_idle_allocations(now=NOW)

    # then
    allocation.refresh_from_db()
    assert (result.flagged, allocation.idle_since, len(mail.outbox)) == ([], None, 0)


def test_a_gap_in_the_reports_restarts_the_idle_time(world: World):
    # given: idle minutes, but nothing reported between 09:30 and 09:40
    reclaim_on(world)
    allocation = active_at(world, ACTIVATED)
    placement = SlicePlacement.objects.select_related("gpu").get(allocation=allocation)
    minutes(placement, ACTIVATED, ACTIVATED + timedelta(minutes=90))
    minutes(placement, ACTIVATED + timedelta(minutes=100), NOW - timedelta(minutes=1))
    report(placement, at=NOW - timedelta(seconds=10))

    # when
    result = reclaim.reclaim_idle_allocations(now=NOW)

    # then: idle for 80 minutes only
    assert result.flagged == []


def test_a_silent_agent_is_unknown_not_idle(world: World):
    # given: idle all along, but the latest sample is ten minutes old
    reclaim_on(world)
    allocation = active_at(world, ACTIVATED)
    placement = SlicePlacement.objects.select_related("gpu").get(allocation=allocation)
    minutes(placement, ACTIVATED, NOW - timedelta(minutes=11))
    report(placement, at=NOW - timedelta(minutes=10))

    # then
    assert reclaim.reclaim_idle_allocations(now=NOW).flagged == []


def test_one_busy_slice_keeps_the_whole_request(world: World):
    # given: two slices, the second ran a process at 10:30
    reclaim_on(world)
    allocation, placements = idle_slices(world, count=2)
    DeviceRollup.objects.filter(
        uuid=f"MIG-test-{placements[1].gpu_id}-{placements[1].start}", bucket=NOW - timedelta(minutes=30)
    ).update(processes_max=1)

    # when
    result = reclaim.reclaim_idle_allocations(now=NOW)

    # then: idle only for 29 minutes
    assert result.flagged == []


def test_memory_under_the_threshold_is_idle_and_over_it_is_use(world: World, settings):
    # given: the driver's 12 MiB on an idle instance
    settings.FATIA_IDLE_MEMORY_MIB = 64
    reclaim_on(world)
    allocation = active_at(world, ACTIVATED)
    placement = SlicePlacement.objects.select_related("gpu").get(allocation=allocation)
    minutes(placement, ACTIVATED, NOW - timedelta(minutes=1), memory_mib=12)
    report(placement, at=NOW - timedelta(seconds=10), memory_mib=12)
    assert reclaim.reclaim_idle_allocations(now=NOW).flagged == [allocation.pk]

    # when: 2 GiB in use in the current minute (no process: e.g. a CUDA context being set up)
    report(placement, at=NOW + timedelta(minutes=1, seconds=5), memory_mib=2048)
    result = reclaim.reclaim_idle_allocations(now=NOW + timedelta(minutes=1, seconds=10))

    # then
    allocation.refresh_from_db()
    assert (result.cleared, allocation.idle_since, allocation.idle_release_at) == ([allocation.pk], None, None)


def test_use_clears_the_flag(world: World):
    # given: flagged
    reclaim_on(world)
    allocation, placements = idle_slices(world)
    reclaim.reclaim_idle_allocations(now=NOW)

    # when: a process starts
    report(placements[0], at=NOW + timedelta(minutes=2), processes=1, memory_mib=4096)
    result = reclaim.reclaim_idle_allocations(now=NOW + timedelta(minutes=2, seconds=5))

    # then
    allocation.refresh_from_db()
    assert result.cleared == [allocation.pk]
    assert (allocation.idle_since, allocation.idle_warned_at, allocation.idle_release_at) == (None, None, None)
    assert verbs(allocation) == ["flag_idle", "warn_idle", "clear_idle"]
    assert AuditEvent.objects.filter(verb="clear_idle").get().after == {"reason": "in use again"}


def test_still_idle_at_the_end_of_the_grace_period_it_is_released(world: World, django_capture_on_commit_callbacks):
    # given: flagged at NOW, idle until the release time
    reclaim_on(world)
    allocation, placements = idle_slices(world)
    reclaim.reclaim_idle_allocations(now=NOW)
    later = NOW + timedelta(minutes=60)
    minutes(placements[0], NOW - timedelta(minutes=1), later - timedelta(minutes=1))
    report(placements[0], at=later - timedelta(seconds=5))

    # when: a minute before the release time, then at it
    early = reclaim.reclaim_idle_allocations(now=later - timedelta(minutes=1))
    with django_capture_on_commit_callbacks() as callbacks:
        due = reclaim.reclaim_idle_allocations(now=later)
    again = reclaim.reclaim_idle_allocations(now=later + timedelta(minutes=1))

    # then: released once, through the release service (teardown queued once)
    allocation.refresh_from_db()
    assert (early.reclaimed, due.reclaimed, again.reclaimed) == ([], [allocation.pk], [])
    assert allocation.status == Status.RELEASING
    assert allocation.status_message == (
        "Idle since 2026-11-30 08:00 UTC: released by the tenant's idle reclaim. "
        "Releasing: deleting the claim and its holder pod."
    )
    assert len(callbacks) == 1
    assert verbs(allocation) == ["flag_idle", "warn_idle", "reclaim_idle", "release"]
    release = AuditEvent.objects.get(verb="release", object_id=str(allocation.pk))
    assert (release.actor_name, release.after["reason"]) == (
        "system",
        "Idle since 2026-11-30 08:00 UTC: released by the tenant's idle reclaim.",
    )
    assert len(mail.outbox) == 1


def test_keep_it_clears_the_flag_and_snoozes_for_one_idle_time(world: World, time_machine):
    # given: flagged
    reclaim_on(world)
    allocation, placements = idle_slices(world)
    reclaim.reclaim_idle_allocations(now=NOW)

    # when: alice keeps it at NOW + 5 min
    time_machine.move_to(NOW + timedelta(minutes=5), tick=False)
    reclaim.keep_idle_allocation(allocation_id=allocation.pk, actor=world.alice)

    # then: not flagged again during the next 120 minutes although still idle, flagged after
    allocation.refresh_from_db()
    assert (allocation.idle_since, allocation.idle_snoozed_until) == (None, NOW + timedelta(minutes=125))
    end = NOW + timedelta(minutes=126)
    minutes(placements[0], NOW - timedelta(minutes=1), end - timedelta(minutes=1))
    report(placements[0], at=NOW + timedelta(minutes=124, seconds=50))
    assert reclaim.reclaim_idle_allocations(now=NOW + timedelta(minutes=124, seconds=55)).flagged == []
    report(placements[0], at=end - timedelta(seconds=5))
    assert reclaim.reclaim_idle_allocations(now=end).flagged == [allocation.pk]
    assert verbs(allocation) == ["flag_idle", "warn_idle", "keep_idle", "flag_idle", "warn_idle"]
    assert AuditEvent.objects.get(verb="keep_idle").actor_name == "alice"
    assert len(mail.outbox) == 2


def test_only_the_owner_or_a_manager_may_keep_it(world: World):
    # given
    reclaim_on(world)
    allocation, _ = idle_slices(world)
    reclaim.reclaim_idle_allocations(now=NOW)

    # when / then: charlie (another tenant) may not; mallory (manager) may
    with pytest.raises(NotAllowed):
        reclaim.keep_idle_allocation(allocation_id=allocation.pk, actor=world.charlie)
    allocation.refresh_from_db()
    assert allocation.idle_since == ACTIVATED
    reclaim.keep_idle_allocation(allocation_id=allocation.pk, actor=world.mallory)
    allocation.refresh_from_db()
    assert allocation.idle_since is None


def test_keeping_a_request_that_is_not_idle_is_refused(world: World):
    allocation, _ = idle_slices(world)
    with pytest.raises(reclaim.NotIdle, match="is not flagged idle; there is nothing to keep"):
        reclaim.keep_idle_allocation(allocation_id=allocation.pk, actor=world.alice)


def test_a_tenant_with_reclaim_off_is_left_alone(world: World):
    # given: reclaim is off by default
    allocation, _ = idle_slices(world)

    # when
    result = reclaim.reclaim_idle_allocations(now=NOW + timedelta(hours=5))

    # then
    allocation.refresh_from_db()
    assert (result.flagged, allocation.idle_since, len(mail.outbox)) == ([], None, 0)
    assert verbs(allocation) == []


def test_turning_reclaim_off_clears_the_flags(world: World):
    # given: flagged
    reclaim_on(world)
    allocation, _ = idle_slices(world)
    reclaim.reclaim_idle_allocations(now=NOW)

    # when
    tenant_services.set_idle_reclaim(
        tenant_id=world.tenant_a.pk, actor=world.mallory, enabled=False, idle_after_minutes=120, idle_grace_minutes=60
    )
    result = reclaim.reclaim_idle_allocations(now=NOW + timedelta(hours=2))

    # then: cleared, never released
    allocation.refresh_from_db()
    assert (result.cleared, result.reclaimed, allocation.status, allocation.idle_since) == (
        [allocation.pk],
        [],
        Status.ACTIVE,
        None,
    )


def test_the_slice_devices_are_recorded_once(world: World):
    # given
    allocation, placements = idle_slices(world, count=2)

    # when
    first = reclaim.record_slice_devices(now=NOW)
    second = reclaim.record_slice_devices(now=NOW + timedelta(minutes=1))

    # then
    rows = list(allocation.slice_devices.order_by("start").values_list("uuid", "start", "first_seen_at"))
    assert (first, second) == (2, 2)
    assert rows == [(f"MIG-test-{p.gpu_id}-{p.start}", p.start, NOW) for p in placements]
