"""Device state rows as a telemetry batch reads them: plain slotted objects filled from tuples.

The drain reads every device row of the nodes in a batch (64 per node of 8 GPUs x 7 MIG devices) and writes them
back with one UPDATE (``bulk.update_rows``); turning each into a Django model instance (``__init__``, a foreign-key
descriptor and its cache check per row) was the largest piece of its Python time (docs/agent.md, "Telemetry
ingest"). A row here has the model's attribute names, so the apply and ``update_rows`` treat both alike; new
devices are still model instances (``bulk_create``).

On PostgreSQL the rows are read with one plain query whose results come in binary: through Django's cursor (text
results) the timestamps alone cost two Python-level parses per row (Django's time-zone loader is a Python subclass
of psycopg's), and the read was over half of the drain's CPU per report (1.5 of 2.8 ms at 200 nodes a batch).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import psycopg
from django.db import connection

from allocations.nodeagent.models import DeviceState

# What a report changes on a device row (telemetry.py writes these back, and the row's GPU).
SAMPLED_FIELDS = (
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
FIELDS = ("id", "node_id", "gpu_id", "kind", "uuid", "gpu_uuid", *SAMPLED_FIELDS)


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

    def __init__(self, values: Iterable[Any]) -> None:
        # One unpacking (in FIELDS' order), not a setattr per field: this runs for every device row of a batch.
        (
            self.id,
            self.node_id,
            self.gpu_id,
            self.kind,
            self.uuid,
            self.gpu_uuid,
            self.profile,
            self.start,
            self.memory_used_mib,
            self.memory_total_mib,
            self.processes,
            self.utilisation,
            self.utilisation_source,
            self.ecc_uncorrected,
            self.sampled_at,
            self.minute,
            self.minute_samples,
            self.minute_memory_sum,
            self.minute_memory_max,
            self.minute_util_sum,
            self.minute_util_samples,
            self.minute_util_max,
            self.minute_processes_max,
        ) = values

    @property
    def pk(self) -> int:
        return self.id


def _select() -> str:
    quote = connection.ops.quote_name
    meta = DeviceState._meta
    column = {f.attname: f.column for f in meta.concrete_fields}  # FIELDS are attribute names (node_id, gpu_id)
    return (
        f"SELECT {', '.join(quote(column[name]) for name in FIELDS)} "  # noqa: S608
        f"FROM {quote(meta.db_table)} WHERE {quote(column['node_id'])} = ANY(%s)"
    )


def read_device_rows(node_ids: list[int]) -> list[DeviceRow]:
    if connection.vendor != "postgresql":
        return [DeviceRow(values) for values in DeviceState.objects.filter(node_id__in=node_ids).values_list(*FIELDS)]
    connection.ensure_connection()
    # Same connection and transaction as the ORM (as bulk.update_rows); binary results, loaded by psycopg's C code.
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(_select(), [node_ids], prepare=True, binary=True)
        return [DeviceRow(values) for values in cursor.fetchall()]
