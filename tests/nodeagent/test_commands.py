"""The portal's queue of MIG commands for node agents: the services the orchestration calls, and the two agent
endpoints (credentials, node binding, field messages, idempotent results, batch transitions, cancel)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from allocations.mig.reconfig import Operation
from allocations.models import Node
from allocations.nodeagent import services
from allocations.nodeagent.commands import (
    batch_state,
    cancel_agent_batch,
    claim_agent_commands,
    queue_agent_commands,
    record_agent_command_result,
)
from allocations.nodeagent.models import AgentCommand, AgentCredential
from tenants.errors import IdempotencyConflict, InvalidInput
from tenants.models import AuditEvent

pytestmark = pytest.mark.django_db

PLAN = [
    Operation("destroy", "1g.10gb", 0),
    Operation("destroy", "1g.10gb", 1),
    Operation("create", "2g.20gb", 0),
    Operation("create", "1g.10gb", 6),
]
AT_LEAST = "Ensure this value is greater than or equal to"
AT_MOST = "Ensure this field has no more than"
MADE = {"gi_id": 3, "ci_id": 0, "mig_uuid": "MIG-0b6c3c7e-1f0a-5d6e-9a1b-2c3d4e5f6a7b"}


@pytest.fixture
def node0(world):
    return Node.objects.get(name="h100-node-0")


@pytest.fixture
def node1(world):
    return Node.objects.get(name="h100-node-1")


@pytest.fixture
def token(world, node0):
    return services.issue_agent_credential(node_id=node0.pk, actor=world.root)[1]


@pytest.fixture
def other_token(world, node1):
    return services.issue_agent_credential(node_id=node1.pk, actor=world.root)[1]


def _client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def _ok(**result) -> dict:
    return {"node": "h100-node-0", "ok": True, **result}


def _failed(error="nvmlDeviceCreateGpuInstanceWithPlacement: Insufficient Resources") -> dict:
    return {"node": "h100-node-0", "ok": False, "error": error, "code": "NVML_ERROR_INSUFFICIENT_RESOURCES"}


def _statuses(batch_key="reconfiguration:1") -> list[str]:
    return [c.status for c in batch_state(batch_key=batch_key).commands]


def _credential(node) -> AgentCredential:
    return AgentCredential.objects.select_related("node").get(node=node)


# --- services ---------------------------------------------------------------------------------------------------


def test_queueing_a_batch_numbers_its_commands_per_node_and_is_idempotent(node0, node1):
    # given
    first = queue_agent_commands(node_id=node0.pk, gpu_index=2, operations=PLAN, batch_key="reconfiguration:1")

    # when
    again = queue_agent_commands(node_id=node0.pk, gpu_index=2, operations=PLAN, batch_key="reconfiguration:1")
    second = queue_agent_commands(
        node_id=node0.pk, gpu_index=3, operations=[Operation("create", "7g.80gb", 0)], batch_key="reconfiguration:2"
    )
    elsewhere = queue_agent_commands(
        node_id=node1.pk, gpu_index=0, operations=[Operation("create", "7g.80gb", 0)], batch_key="reconfiguration:3"
    )

    # then
    assert [c.pk for c in again] == [c.pk for c in first]
    assert [(c.sequence, c.action, c.profile, c.start, c.gpu_index, c.status) for c in first] == [
        (1, "destroy", "1g.10gb", 0, 2, "pending"),
        (2, "destroy", "1g.10gb", 1, 2, "pending"),
        (3, "create", "2g.20gb", 0, 2, "pending"),
        (4, "create", "1g.10gb", 6, 2, "pending"),
    ]
    assert [c.sequence for c in second] == [5]
    assert [c.sequence for c in elsewhere] == [1]
    assert AgentCommand.objects.count() == 6
    events = AuditEvent.objects.filter(verb="queue_agent_commands").order_by("pk")
    assert [(e.object_id, e.after["batch_key"]) for e in events] == [
        (str(node0.pk), "reconfiguration:1"),
        (str(node0.pk), "reconfiguration:2"),
        (str(node1.pk), "reconfiguration:3"),
    ]
    assert events[0].after["operations"] == [["destroy", "1g.10gb", 0], ["destroy", "1g.10gb", 1]] + [
        ["create", "2g.20gb", 0],
        ["create", "1g.10gb", 6],
    ]


def test_a_batch_key_reused_for_other_operations_is_refused(node0):
    queue_agent_commands(node_id=node0.pk, gpu_index=0, operations=PLAN, batch_key="reconfiguration:1")
    with pytest.raises(IdempotencyConflict):
        queue_agent_commands(node_id=node0.pk, gpu_index=0, operations=PLAN[:2], batch_key="reconfiguration:1")
    with pytest.raises(IdempotencyConflict):
        queue_agent_commands(node_id=node0.pk, gpu_index=1, operations=PLAN, batch_key="reconfiguration:1")
    assert AgentCommand.objects.count() == 4


def test_bad_operations_are_refused_with_field_messages(node0):
    with pytest.raises(InvalidInput) as refused:
        queue_agent_commands(
            node_id=node0.pk,
            gpu_index=300,
            operations=[Operation("reset", "1g.10gb", 0)],
            batch_key="",  # type: ignore[arg-type]
        )
    assert refused.value.errors == {
        "batch_key": ["Give a reference of 1 to 64 characters."],
        "gpu_index": ["Must be between 0 and 255."],
        "operations": ["Unknown action 'reset': create or destroy."],
    }
    assert not AgentCommand.objects.exists()


def test_an_empty_batch_queues_nothing_and_is_done(node0):
    assert queue_agent_commands(node_id=node0.pk, gpu_index=0, operations=[], batch_key="reconfiguration:9") == []
    assert (batch_state(batch_key="reconfiguration:9").status, AgentCommand.objects.count()) == ("done", 0)


def test_a_batch_goes_pending_running_done(node0, token):
    # given
    queue_agent_commands(node_id=node0.pk, gpu_index=0, operations=PLAN[:3], batch_key="reconfiguration:1")
    credential = _credential(node0)
    states = [batch_state(batch_key="reconfiguration:1").status]

    # when: the agent lists the commands, then reports them one by one
    listed = claim_agent_commands(credential=credential, node_name="h100-node-0")
    states.append(batch_state(batch_key="reconfiguration:1").status)
    for command, payload in zip(listed, [_ok(gi_id=1), _ok(gi_id=2), _ok(**MADE)], strict=True):
        record_agent_command_result(credential=credential, command_id=command.pk, payload=payload)
        states.append(batch_state(batch_key="reconfiguration:1").status)

    # then
    assert states == ["pending", "running", "running", "running", "done"]
    done = batch_state(batch_key="reconfiguration:1")
    assert (done.error, [c.result for c in done.commands][-1]) == ("", MADE)
    assert all(c.started_at is not None and c.finished_at is not None for c in done.commands)
    assert (
        list(AuditEvent.objects.filter(verb="agent_command_done").values_list("actor_name", flat=True))
        == ["agent:h100-node-0"] * 3
    )


def test_a_failure_stops_the_batch_and_cancels_its_later_commands(node0, token):
    # given: four commands handed out; another batch follows
    queue_agent_commands(node_id=node0.pk, gpu_index=0, operations=PLAN, batch_key="reconfiguration:1")
    queue_agent_commands(
        node_id=node0.pk, gpu_index=1, operations=[Operation("create", "1g.10gb", 0)], batch_key="reconfiguration:2"
    )
    credential = _credential(node0)
    listed = claim_agent_commands(credential=credential, node_name="h100-node-0")

    # when: the first two are done, the third fails
    record_agent_command_result(credential=credential, command_id=listed[0].pk, payload=_ok(gi_id=1))
    record_agent_command_result(credential=credential, command_id=listed[1].pk, payload=_ok(gi_id=2))
    record_agent_command_result(credential=credential, command_id=listed[2].pk, payload=_failed())

    # then
    state = batch_state(batch_key="reconfiguration:1")
    assert (state.status, state.error) == ("failed", "nvmlDeviceCreateGpuInstanceWithPlacement: Insufficient Resources")
    assert _statuses() == ["done", "done", "failed", "cancelled"]
    assert state.commands[2].code == "NVML_ERROR_INSUFFICIENT_RESOURCES"
    assert _statuses("reconfiguration:2") == ["running"]
    event = AuditEvent.objects.get(verb="agent_command_failed")
    assert event.after["cancelled"] == [listed[3].pk]
    # and the agent no longer sees the cancelled one
    assert [c.pk for c in claim_agent_commands(credential=credential, node_name="h100-node-0")] == [listed[4].pk]


def test_cancel_takes_back_only_what_was_not_handed_out(node0, token):
    # given: a batch of four, listed by the agent; then a second batch it has not listed
    queue_agent_commands(node_id=node0.pk, gpu_index=0, operations=PLAN[:2], batch_key="reconfiguration:1")
    claim_agent_commands(credential=_credential(node0), node_name="h100-node-0")
    queue_agent_commands(node_id=node0.pk, gpu_index=0, operations=PLAN[2:], batch_key="reconfiguration:2")

    # when
    first = cancel_agent_batch(batch_key="reconfiguration:1")
    second = cancel_agent_batch(batch_key="reconfiguration:2")
    again = cancel_agent_batch(batch_key="reconfiguration:2")

    # then
    assert (first, second, again) == (0, 2, 0)
    assert _statuses("reconfiguration:1") == ["running", "running"]
    assert _statuses("reconfiguration:2") == ["cancelled", "cancelled"]
    assert (batch_state(batch_key="reconfiguration:2").status, batch_state(batch_key="reconfiguration:2").error) == (
        "failed",
        "cancelled",
    )
    assert AuditEvent.objects.filter(verb="cancel_agent_batch").count() == 1


# --- API --------------------------------------------------------------------------------------------------------


def test_the_agent_lists_its_own_open_commands_in_order_and_they_become_running(node0, node1, token):
    # given: two batches for node 0 (one already finished), one for node 1
    queue_agent_commands(node_id=node0.pk, gpu_index=0, operations=PLAN[:2], batch_key="reconfiguration:1")
    queue_agent_commands(node_id=node0.pk, gpu_index=1, operations=PLAN[2:3], batch_key="reconfiguration:2")
    queue_agent_commands(node_id=node1.pk, gpu_index=0, operations=PLAN[:1], batch_key="reconfiguration:3")
    done = AgentCommand.objects.get(batch_key="reconfiguration:2")
    claim_agent_commands(credential=_credential(node0), node_name="h100-node-0")
    record_agent_command_result(credential=_credential(node0), command_id=done.pk, payload=_ok(**MADE))

    # when
    response = _client(token).get("/api/v1/agent/commands/", {"node": "h100-node-0"})

    # then
    assert response.status_code == 200
    first, second = AgentCommand.objects.filter(batch_key="reconfiguration:1").order_by("sequence")
    batch = {"gpu_index": 0, "action": "destroy", "profile": "1g.10gb", "batch_key": "reconfiguration:1"}
    assert response.json() == {
        "commands": [{"id": first.pk, "start": 0} | batch, {"id": second.pk, "start": 1} | batch]
    }
    assert _statuses("reconfiguration:1") == ["running", "running"]
    assert _statuses("reconfiguration:3") == ["pending"]


def test_the_agent_reports_a_result_and_the_same_result_again_is_harmless(node0, token):
    # given
    (command,) = queue_agent_commands(
        node_id=node0.pk, gpu_index=0, operations=[Operation("create", "2g.20gb", 2)], batch_key="reconfiguration:1"
    )
    client = _client(token)
    client.get("/api/v1/agent/commands/", {"node": "h100-node-0"})

    # when
    first = client.post(f"/api/v1/agent/commands/{command.pk}/result/", _ok(**MADE), format="json")
    again = client.post(f"/api/v1/agent/commands/{command.pk}/result/", _ok(**MADE), format="json")
    other = client.post(f"/api/v1/agent/commands/{command.pk}/result/", _failed(), format="json")

    # then
    expected = {"id": command.pk, "status": "done", "batch_key": "reconfiguration:1"}
    assert (first.status_code, first.json()) == (200, expected)
    assert (again.status_code, again.json()) == (200, expected)
    assert other.status_code == 409
    command.refresh_from_db()
    assert (command.status, command.result, command.error) == ("done", MADE, "")
    assert AuditEvent.objects.filter(verb="agent_command_done").count() == 1


def test_a_result_for_a_cancelled_command_is_a_conflict_and_changes_nothing(node0, token):
    (command,) = queue_agent_commands(
        node_id=node0.pk, gpu_index=0, operations=[Operation("create", "2g.20gb", 2)], batch_key="reconfiguration:1"
    )
    cancel_agent_batch(batch_key="reconfiguration:1")
    response = _client(token).post(f"/api/v1/agent/commands/{command.pk}/result/", _ok(**MADE), format="json")
    assert response.status_code == 409
    assert response.json()["detail"] == f"Command {command.pk} was cancelled; it should not have run."
    assert _statuses() == ["cancelled"]


@pytest.mark.parametrize(
    "header",
    [None, "Bearer fagent_nope_nope", "Bearer fatia_abc_def", "Token x"],
    ids=["none", "unknown", "user-token", "other-scheme"],
)
def test_without_a_valid_credential_both_endpoints_are_401_and_nothing_changes(node0, token, header):
    (command,) = queue_agent_commands(node_id=node0.pk, gpu_index=0, operations=PLAN[:1], batch_key="b")
    client = APIClient()
    if header:
        client.credentials(HTTP_AUTHORIZATION=header)
    listed = client.get("/api/v1/agent/commands/", {"node": "h100-node-0"})
    result = client.post(f"/api/v1/agent/commands/{command.pk}/result/", _ok(gi_id=1), format="json")
    assert (listed.status_code, result.status_code) == (401, 401)
    assert _statuses("b") == ["pending"]


def test_a_node_sees_and_reports_only_its_own_commands(node0, node1, token, other_token):
    # given: a command for node 0, handed out
    (command,) = queue_agent_commands(node_id=node0.pk, gpu_index=0, operations=PLAN[:1], batch_key="b")
    _client(token).get("/api/v1/agent/commands/", {"node": "h100-node-0"})
    intruder = _client(other_token)

    # when: node 1's credential asks for node 0's list, reports as node 0, and reports as itself on node 0's command
    listed = intruder.get("/api/v1/agent/commands/", {"node": "h100-node-0"})
    as_other = intruder.post(f"/api/v1/agent/commands/{command.pk}/result/", _ok(gi_id=1), format="json")
    as_itself = intruder.post(
        f"/api/v1/agent/commands/{command.pk}/result/", _ok(gi_id=1) | {"node": "h100-node-1"}, format="json"
    )
    own = intruder.get("/api/v1/agent/commands/", {"node": "h100-node-1"})

    # then
    assert listed.status_code == as_other.status_code == 403
    assert listed.json()["errors"] == {"node": ["This credential reports for node h100-node-1, not h100-node-0."]}
    assert as_itself.status_code == 404
    assert (own.status_code, own.json()) == (200, {"commands": []})
    assert _statuses("b") == ["running"]
    assert not AuditEvent.objects.filter(verb__startswith="agent_command").exists()


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ({"ok": True}, {"node": ["This field is required."]}),
        ({"node": "h100-node-0"}, {"ok": ["This field is required."]}),
        ({"node": "h100-node-0", "ok": "maybe"}, {"ok": ["Must be a valid boolean."]}),
        ({"node": "h100-node-0", "ok": False}, {"error": ["Say what failed when ok is false."]}),
        ({"node": "h100-node-0", "ok": True, "ci_id": 0}, {"gi_id": ["Required with ci_id."]}),
        (
            {"node": "h100-node-0", "ok": True, "gi_id": -1},
            {"gi_id": ["Ensure this value is greater than or equal to 0."]},
        ),
        (
            {"node": "h100-node-0", "ok": True, "mig_uuid": "M" * 65},
            {"mig_uuid": ["Ensure this field has no more than 64 characters."]},
        ),
        ({"node": "h100-node-0", "ok": True, "extra": 1}, {"extra": ["Unknown field."]}),
    ],
    ids=["no-node", "no-ok", "bad-ok", "failure-without-error", "ci-without-gi", "negative-gi", "long-uuid", "unknown"],
)
def test_a_malformed_result_is_400_with_field_messages_and_changes_nothing(node0, token, body, errors):
    (command,) = queue_agent_commands(node_id=node0.pk, gpu_index=0, operations=PLAN[:1], batch_key="b")
    response = _client(token).post(f"/api/v1/agent/commands/{command.pk}/result/", body, format="json")
    assert (response.status_code, response.json()["errors"]) == (400, errors)
    assert _statuses("b") == ["pending"]


def test_listing_without_a_node_is_400_and_a_missing_command_is_404(node0, token):
    client = _client(token)
    listed = client.get("/api/v1/agent/commands/")
    missing = client.post("/api/v1/agent/commands/999999/result/", _ok(gi_id=1), format="json")
    assert (listed.status_code, listed.json()["errors"]) == (400, {"node": ["This field is required."]})
    assert missing.status_code == 404
