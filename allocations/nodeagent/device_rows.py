"""Device state rows as a telemetry batch reads them: plain slotted objects filled from tuples.

The drain reads every device row of the nodes in a batch (64 per node of 8 GPUs x 7 MIG devices) and writes them
back with one UPDATE (``bulk.update_rows``); turning each into a Django model instance (``__init__``, a foreign-key
descriptor and its cache check per row) was the largest piece of its Python time (docs/agent.md, "Telemetry
ingest"). A row here has the model's attribute names, so the apply and ``update_rows`` treat both alike; new
devices are still model instances (``bulk_create``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from allocations.nodeagent.models import DeviceState

FIELDS = (
    "id",
    "node_id",
    "gpu_id",
    "kind",
    "uuid",
    "gpu_uuid",
    "profile",
    "start",
    "memory_used_mib",
    "memory_total_mib",
    "processes",
    "utilisation",
    "utilisation_source",
    "ecc_uncorrected",
    "sampled_at",
    "minute",
    "minute_samples",
    "minute_memory_sum",
    "minute_memory_max",
    "minute_util_sum",
    "minute_util_samples",
    "minute_util_max",
    "minute_processes_max",
)


class DeviceRow:
    """One stored DeviceState row (every concrete field, by attribute name)."""

    __slots__ = FIELDS

    id: int
    node_id: int
    gpu_id: int | None
    kind: str
    uuid: str
    gpu_uuid: str
    profile: str
    start: int | None
    memory_used_mib: int | None
    memory_total_mib: int | None
    processes: int
    utilisation: float | None
    utilisation_source: str
    ecc_uncorrected: int | None
    sampled_at: datetime
    minute: datetime
    minute_samples: int
    minute_memory_sum: int
    minute_memory_max: int
    minute_util_sum: float
    minute_util_samples: int
    minute_util_max: float
    minute_processes_max: int

    def __init__(self, values: Iterable[object]) -> None:
        for name, value in zip(FIELDS, values, strict=True):
            object.__setattr__(self, name, value)

    @property
    def pk(self) -> int:
        return self.id


def read_device_rows(node_ids: list[int]) -> list[DeviceRow]:
    return [DeviceRow(values) for values in DeviceState.objects.filter(node_id__in=node_ids).values_list(*FIELDS)]
