"""Showback's "used": slice-hours in which a slice had a process or memory in use, from the agents' history.

A request's slices are found through SliceDevice (which MIG device served which allocation, recorded while it
was active), and only history inside the request's window counts (with static MIG a device serves many
requests). Minute rollups count to the minute (a slice in use during a minute is a used slice-minute); where the
minutes are gone (kept a week) the hourly rollup counts the part of the hour inside the window, used when any
sample of that hour was. "Observed" is the same count over minutes with any report: with no report at all a
request has no figure ("no data"), never 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Case, Count, IntegerField, Q, Value, When
from django.db.models.functions import TruncHour

from allocations.models import SliceDevice
from allocations.nodeagent.models import DeviceRollup

HOUR = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class UsedHours:
    """Slice-hours with a report (`observed`) and with use (`used`), of one request in one clock hour."""

    observed: float
    used: float


def in_use() -> Q:
    """A rollup in which the device ran a process or had memory in use (the idle test's threshold)."""
    return Q(processes_max__gt=0) | Q(memory_max_mib__gt=settings.FATIA_IDLE_MEMORY_MIB)


def used_slice_hours(windows: Mapping[int, tuple[datetime, datetime]]) -> dict[int, dict[datetime, UsedHours]]:
    """Per allocation id (with its [start, end) window), per clock hour: observed and used slice-hours.
    Allocations without any report are absent. Three queries whatever the number of allocations."""
    devices = list(
        SliceDevice.objects.filter(allocation_id__in=list(windows)).values_list("allocation_id", "node_id", "uuid")
    )
    if not devices:
        return {}
    minute_cases, hour_cases = [], []
    for allocation_id, node_id, uuid in devices:
        start, end = windows[allocation_id]
        device = Q(node_id=node_id, uuid=uuid, bucket__lt=end)
        minute_cases.append(When(device & Q(bucket__gte=start), then=Value(allocation_id)))
        hour_cases.append(When(device & Q(bucket__gt=start - HOUR), then=Value(allocation_id)))
    first = min(start for start, _ in windows.values()) - HOUR
    last = max(end for _, end in windows.values())
    base = DeviceRollup.objects.filter(uuid__in={uuid for _, _, uuid in devices}, bucket__gte=first, bucket__lt=last)
    minutes = (
        base.filter(resolution=DeviceRollup.Resolution.MINUTE)
        .annotate(allocation=Case(*minute_cases, default=None, output_field=IntegerField()))
        .filter(allocation__isnull=False)
        .annotate(hour=TruncHour("bucket"))
        .values("allocation", "hour")
        .annotate(n=Count("id"), used=Count("id", filter=in_use()))
        .order_by()
    )
    hours = (
        base.filter(resolution=DeviceRollup.Resolution.HOUR)
        .annotate(allocation=Case(*hour_cases, default=None, output_field=IntegerField()))
        .filter(allocation__isnull=False)
        .values("allocation", "bucket")
        .annotate(n=Count("id"), used=Count("id", filter=in_use()))
        .order_by()
    )
    out: dict[int, dict[datetime, UsedHours]] = {}
    for row in minutes:
        out.setdefault(row["allocation"], {})[row["hour"]] = UsedHours(row["n"] / 60, row["used"] / 60)
    for row in hours:
        by_hour = out.setdefault(row["allocation"], {})
        bucket = row["bucket"]
        if bucket in by_hour:
            continue  # the minutes of this hour are still there and more exact
        start, end = windows[row["allocation"]]
        part = max((min(end, bucket + HOUR) - max(start, bucket)) / HOUR, 0.0)
        by_hour[bucket] = UsedHours(row["n"] * part, row["used"] * part)
    return out
