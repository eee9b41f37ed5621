"""Agent telemetry written straight into the tables ingest fills (DeviceState, minute and hour DeviceRollup), for
tests that need hours of history at exact figures. Ingest itself is tested with the agent's real payloads in
test_services.py; these tests are about what is read back."""

from __future__ import annotations

from datetime import datetime, timedelta

import time_machine

from allocations import services
from allocations.models import Allocation, SlicePlacement
from allocations.nodeagent.models import DeviceRollup, DeviceState
from tests.conftest import World

MINUTE = timedelta(minutes=1)


def active_at(world: World, when: datetime, *, count: int = 1, profile: str = "1g.10gb") -> Allocation:
    """Alice's request in tenant A, active since `when`."""
    with time_machine.travel(when, tick=False):
        allocation, _ = services.request_allocation(
            tenant_id=world.tenant_a.pk,
            pool_id=world.pool.pk,
            profile=profile,
            count=count,
            lease_hours=168,
            purpose="idle test",
            actor=world.alice,
        )
        if allocation.status == Allocation.Status.PENDING:
            services.approve_allocation(allocation_id=allocation.pk, actor=world.root)
        return services.provision_allocation(allocation_id=allocation.pk)


def device_of(placement: SlicePlacement) -> str:
    return f"MIG-test-{placement.gpu_id}-{placement.start}"


def report(
    placement: SlicePlacement,
    *,
    at: datetime,
    processes: int = 0,
    memory_mib: int = 0,
    minute_processes: int | None = None,
    minute_memory_mib: int | None = None,
) -> DeviceState:
    """The device's latest sample at `at`, one sample into the minute of `at` (with that minute's peaks)."""
    minute = at.replace(second=0, microsecond=0)
    state, _ = DeviceState.objects.update_or_create(
        node_id=placement.gpu.node_id,
        uuid=device_of(placement),
        defaults={
            "gpu_id": placement.gpu_id,
            "kind": DeviceState.Kind.MIG,
            "gpu_uuid": f"GPU-test-{placement.gpu_id}",
            "profile": placement.profile,
            "start": placement.start,
            "memory_used_mib": memory_mib,
            "memory_total_mib": 9856,
            "processes": processes,
            "utilisation": None,
            "utilisation_source": "none",
            "sampled_at": at,
            "minute": minute,
            "minute_samples": 1,
            "minute_memory_sum": memory_mib,
            "minute_memory_max": memory_mib if minute_memory_mib is None else minute_memory_mib,
            "minute_processes_max": processes if minute_processes is None else minute_processes,
        },
    )
    return state


def minutes(
    placement: SlicePlacement,
    start: datetime,
    end: datetime,
    *,
    processes: int = 0,
    memory_mib: int = 0,
    utilisation: float | None = None,
    kind: str = DeviceState.Kind.MIG,
    uuid: str | None = None,
) -> int:
    """One minute rollup per minute in [start, end) with these figures. Returns how many."""
    rows = []
    bucket = start.replace(second=0, microsecond=0)
    while bucket < end:
        rows.append(
            DeviceRollup(
                node_id=placement.gpu.node_id,
                uuid=uuid or device_of(placement),
                kind=kind,
                resolution=DeviceRollup.Resolution.MINUTE,
                bucket=bucket,
                samples=12,
                memory_mean_mib=float(memory_mib),
                memory_max_mib=memory_mib,
                utilisation_mean=utilisation,
                utilisation_max=utilisation,
                processes_max=processes,
            )
        )
        bucket += MINUTE
    DeviceRollup.objects.bulk_create(rows)
    return len(rows)


def hour(placement: SlicePlacement, bucket: datetime, *, processes: int = 0, memory_mib: int = 0) -> None:
    """One hourly rollup (as roll_up_hours writes it once the minutes are gone)."""
    DeviceRollup.objects.create(
        node_id=placement.gpu.node_id,
        uuid=device_of(placement),
        kind=DeviceState.Kind.MIG,
        resolution=DeviceRollup.Resolution.HOUR,
        bucket=bucket,
        samples=720,
        memory_mean_mib=float(memory_mib),
        memory_max_mib=memory_mib,
        utilisation_mean=None,
        utilisation_max=None,
        processes_max=processes,
    )
