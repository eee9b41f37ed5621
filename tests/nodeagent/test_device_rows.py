"""Device rows as the drain reads them (allocations/nodeagent/device_rows.py): the plain query in binary gives the
same values as the ORM, field for field, timestamps included."""

from __future__ import annotations

from typing import Any

import pytest

from allocations.models import Node
from allocations.nodeagent.device_rows import FIELDS, DeviceRow, read_device_rows
from allocations.nodeagent.models import DeviceState
from allocations.nodeagent.telemetry import Report, apply_reports
from tests.nodeagent.payloads import T0, FakeNode


def test_a_row_takes_its_values_in_the_fields_order():
    row = DeviceRow(range(len(FIELDS)))
    assert [getattr(row, name) for name in FIELDS] == list(range(len(FIELDS)))
    assert row.pk == 0


@pytest.mark.django_db
def test_rows_read_in_binary_are_the_orms(world: Any) -> None:
    from datetime import UTC, datetime

    nodes = list(Node.objects.filter(name__in=("h100-node-0", "h100-node-1")).order_by("name"))
    for node in nodes:
        agent = FakeNode(node.name)
        payload = agent.telemetry(T0, T0 + 5, T0 + 65)  # a minute flushed, another begun: every column filled
        apply_reports([Report(node.pk, payload, datetime.fromtimestamp(T0 + 70, UTC))])
    ids = [n.pk for n in nodes]

    read = sorted(tuple(getattr(r, name) for name in FIELDS) for r in read_device_rows(ids))
    orm = sorted(DeviceState.objects.filter(node_id__in=ids).values_list(*FIELDS))

    assert len(read) > 2
    assert read == orm
    assert all(r[FIELDS.index("sampled_at")].utcoffset().total_seconds() == 0 for r in read)
