"""The ingest hot path's set-based write (one UPDATE ... FROM unnest per batch) stores exactly what the model
holds, every column, and the tables it rewrites leave room for HOT updates (package `ingest`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from allocations.models import Node
from allocations.nodeagent import services
from allocations.nodeagent.bulk import update_rows
from allocations.nodeagent.models import DeviceState
from allocations.nodeagent.telemetry import STATE_FIELDS
from tests.nodeagent.payloads import T0, FakeNode

pytestmark = pytest.mark.django_db

AT = datetime.fromtimestamp(T0, UTC)


def _row(state: DeviceState) -> dict[str, object]:
    return {name: getattr(state, name) for name in ["id", *[f"{n}_id" if n == "gpu" else n for n in STATE_FIELDS]]}


def test_the_set_based_update_writes_every_column_as_the_model_holds_it(world):
    # given: a node's device rows from a real report
    node = Node.objects.get(name="h100-node-0")
    credential = services.issue_agent_credential(node_id=node.pk, actor=world.root)[0]
    services.record_telemetry(credential=credential, payload=FakeNode(node.name).telemetry(T0), now=AT)
    states = list(DeviceState.objects.filter(node=node).order_by("id"))
    # when: every written column changes, with None, whole-number floats and new times among the values
    for i, state in enumerate(states):
        state.gpu_id = None
        state.profile = f"p{i}"
        state.start = None if i % 2 else i
        state.memory_used_mib = None if i == 0 else 1000 + i
        state.memory_total_mib = 2000 + i
        state.processes = i
        state.utilisation = None if i == 1 else 7
        state.utilisation_source = "gpm"
        state.ecc_uncorrected = 2**40 + i
        state.sampled_at = state.minute = AT + timedelta(minutes=i)
        state.minute_samples = i + 1
        state.minute_memory_sum = 2**33 + i
        state.minute_memory_max = 3000 + i
        state.minute_util_sum = 12.5 + i
        state.minute_util_samples = i
        state.minute_util_max = 99
        state.minute_processes_max = 4 + i
    update_rows(DeviceState, STATE_FIELDS, states[1:])

    # then: the rows given are stored as held; the one left out is untouched
    stored = {s.id: _row(s) for s in DeviceState.objects.filter(node=node)}
    assert [stored[s.id] for s in states[1:]] == [_row(s) for s in states[1:]]
    assert stored[states[0].id]["profile"] != "p0"


def test_the_rows_ingest_rewrites_live_in_tables_with_room_for_hot_updates():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, reloptions FROM pg_class WHERE relname = ANY(%s) ORDER BY relname",
            [["nodeagent_agentstatus", "nodeagent_devicestate"]],
        )
        assert cursor.fetchall() == [
            ("nodeagent_agentstatus", ["fillfactor=50"]),
            ("nodeagent_devicestate", ["fillfactor=50"]),
        ]


def test_a_device_reported_before_its_gpu_is_known_gets_its_gpu_once_the_inventory_says_which(world):
    # given: telemetry before any inventory (the portal's GPUs have no UUIDs, so no GPU matches yet)
    node = Node.objects.get(name="h100-node-0")
    credential = services.issue_agent_credential(node_id=node.pk, actor=world.root)[0]
    agent = FakeNode(node.name)
    services.record_telemetry(credential=credential, payload=agent.telemetry(T0), now=AT)
    assert set(DeviceState.objects.filter(node=node).values_list("gpu", flat=True)) == {None}

    # when: the inventory names each GPU's minor number, then the next sample comes
    services.record_inventory(credential=credential, payload=agent.inventory(), now=AT)
    services.record_telemetry(credential=credential, payload=agent.telemetry(T0 + 5), now=AT)

    # then
    indexes = DeviceState.objects.filter(node=node).values_list("gpu_uuid", "gpu__index").distinct()
    assert sorted(index for _, index in indexes) == [0, 1]


def test_a_report_costs_a_fixed_number_of_queries(world, django_assert_num_queries):
    # given: a node that has reported before (its device rows and GPU matches exist)
    node = Node.objects.get(name="h100-node-0")
    credential = services.issue_agent_credential(node_id=node.pk, actor=world.root)[0]
    agent = FakeNode(node.name)
    services.record_inventory(credential=credential, payload=agent.inventory(), now=AT)
    services.record_telemetry(credential=credential, payload=agent.telemetry(T0), now=AT)
    credential = services.AgentCredential.objects.select_related("node").get(pk=credential.pk)

    # then: lock the status (with the node), and the SAVEPOINT and its release (the test's transaction around the
    # service's); the GPU rows are not read again. The one read of the devices (binary results), the one UPDATE of
    # the devices and the one of the status rows go on psycopg's own cursor, which Django does not count.
    with django_assert_num_queries(3) as queries:
        services.record_telemetry(credential=credential, payload=agent.telemetry(T0 + 5), now=AT)
    # and the stored inventory (tens of KB of JSON) is not read
    assert not [q["sql"] for q in queries.captured_queries if '"inventory"' in q["sql"]]
