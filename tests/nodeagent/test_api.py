"""/api/v1/agent/: credentials, node binding, validation with field messages, size bounds; nothing written on a
refused report."""

from __future__ import annotations

import copy
import json

import pytest
from rest_framework.test import APIClient

from allocations.models import Node
from allocations.nodeagent import services
from allocations.nodeagent.models import AgentStatus, DeviceState, HealthEvent
from tests.agent.scenarios import A100
from tests.nodeagent.payloads import T0, FakeNode

pytestmark = pytest.mark.django_db


def _agent_client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.fixture
def node0(world):
    return Node.objects.get(name="h100-node-0")


@pytest.fixture
def token(world, node0):
    return services.issue_agent_credential(node_id=node0.pk, actor=world.root)[1]


def _nothing_stored() -> bool:
    return not DeviceState.objects.exists() and not HealthEvent.objects.exists() and not AgentStatus.objects.exists()


def test_an_agent_reports_its_inventory_and_telemetry(token, node0):
    # given
    agent = FakeNode("h100-node-0")
    client = _agent_client(token)

    # when
    inventory = client.post("/api/v1/agent/inventory/", agent.inventory(), format="json")
    telemetry = client.post("/api/v1/agent/telemetry/", agent.telemetry(T0, T0 + 5), format="json")

    # then
    assert (inventory.status_code, inventory.json()) == (200, {"accepted": 1, "duplicates": 0})
    assert (telemetry.status_code, telemetry.json()) == (200, {"accepted": 2, "duplicates": 0, "commands": 0})
    status = AgentStatus.objects.get(node=node0)
    assert (status.agent_version, status.driver_version, status.last_seq) == ("0.1.0", "580.95.05", 2)
    assert [g["product"] for g in status.inventory["gpus"]] == ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"]
    mig = DeviceState.objects.filter(kind="mig").order_by("gpu__index", "start")
    assert [(d.gpu.index, d.profile, d.start, d.memory_used_mib, d.processes, d.utilisation) for d in mig] == [
        (0, "1g.10gb", 0, 0, 0, 0.0),
        (0, "3g.40gb", 4, 8192, 1, 40.0),
        (1, "2g.10gb", 2, 0, 0, None),
    ]


@pytest.mark.parametrize(
    "header",
    [None, "Bearer fagent_nope_nope", "Bearer fatia_abc_def", "Token x", "Bearer"],
    ids=["none", "unknown", "user-token", "other-scheme", "empty"],
)
def test_without_a_valid_credential_it_is_401_and_nothing_is_stored(token, header):
    client = APIClient()
    if header:
        client.credentials(HTTP_AUTHORIZATION=header)
    response = client.post("/api/v1/agent/telemetry/", FakeNode("h100-node-0").telemetry(T0), format="json")
    assert response.status_code == 401
    assert _nothing_stored()


def test_a_revoked_credential_is_refused(world, token):
    # given
    credential = services.revoke_agent_credential(
        credential_id=services.AgentCredential.objects.get().pk, actor=world.root
    )

    # when
    response = _agent_client(token).post("/api/v1/agent/inventory/", FakeNode("h100-node-0").inventory(), format="json")

    # then
    assert credential.revoked_at is not None
    assert (response.status_code, response.json()["detail"]) == (
        401,
        "This node agent credential has been revoked.",
    )
    assert _nothing_stored()


def test_a_credential_cannot_report_for_another_node(token):
    # when: node 0's credential reports for node 1
    agent = FakeNode("h100-node-1")
    inventory = _agent_client(token).post("/api/v1/agent/inventory/", agent.inventory(), format="json")
    telemetry = _agent_client(token).post("/api/v1/agent/telemetry/", agent.telemetry(T0), format="json")

    # then
    assert inventory.status_code == telemetry.status_code == 403
    assert telemetry.json()["errors"] == {"node": ["This credential reports for node h100-node-0, not h100-node-1."]}
    assert _nothing_stored()


def _break(payload, path, value):
    payload = copy.deepcopy(payload)
    target = payload
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return payload


@pytest.mark.parametrize(
    ("path", "value", "errors"),
    [
        (["boot"], KeyError, {"boot": ["This field is required."]}),
        (["dropped"], -1, {"dropped": ["Ensure this value is greater than or equal to 0."]}),
        (["samples"], [], {"samples": ["Ensure this field has at least 1 elements."]}),
        (["samples", 0, "seq"], "one", {"samples": {"0": {"seq": ["A valid integer is required."]}}}),
        (
            ["samples", 0, "gpus", 0, "mig", 0, "util"],
            150.0,
            {
                "samples": {
                    "0": {"gpus": {"0": {"mig": {"0": {"util": ["Ensure this value is less than or equal to 100."]}}}}}
                }
            },
        ),
        (
            ["samples", 0, "gpus", 0, "src"],
            "guess",
            {"samples": {"0": {"gpus": {"0": {"src": ['"guess" is not a valid choice.']}}}}},
        ),
        (["surprise"], 1, {"surprise": ["Unknown field."]}),
        (
            ["samples", 0, "ts"],
            1e300,
            {"samples": {"0": {"ts": ["Ensure this value is less than or equal to 4102444800."]}}},
        ),
        (
            ["samples", 0, "seq"],
            2**70,
            {"samples": {"0": {"seq": [f"Ensure this value is less than or equal to {2**62}."]}}},
        ),
    ],
    ids=["missing", "negative", "empty", "type", "range", "choice", "unknown", "far-future", "huge-seq"],
)
def test_a_malformed_report_is_400_with_field_messages_and_nothing_stored(token, path, value, errors):
    payload = _break(FakeNode("h100-node-0").telemetry(T0), path, value)
    response = _agent_client(token).post("/api/v1/agent/telemetry/", payload, format="json")
    assert (response.status_code, response.json()["errors"]) == (400, errors)
    assert _nothing_stored()


def test_too_many_samples_or_too_many_bytes_are_refused(token):
    # given: small samples (one GPU, MIG off), 121 of them; and 121 large ones (over 64 KiB in all)
    many = FakeNode("h100-node-0", {"gpus": [{"product": A100, "mig": False}]}).telemetry(
        *[T0 + 5 * i for i in range(121)]
    )
    big = FakeNode("h100-node-0").telemetry(*[T0 + 5 * i for i in range(100)])

    # when
    too_many = _agent_client(token).post("/api/v1/agent/telemetry/", many, format="json")
    too_big = _agent_client(token).post("/api/v1/agent/telemetry/", big, format="json")

    # then
    assert (too_many.status_code, too_many.json()["errors"]) == (
        400,
        {"samples": ["Ensure this field has no more than 120 elements."]},
    )
    assert (too_big.status_code, too_big.json()) == (
        400,
        {"code": "too_large", "detail": "The request body is too large."},
    )
    assert _nothing_stored()


def test_invalid_json_is_400(token):
    response = _agent_client(token).post("/api/v1/agent/telemetry/", "{not json", content_type="application/json")
    assert (response.status_code, response.json()["code"]) == (400, "parse_error")
    assert _nothing_stored()


@pytest.mark.parametrize(
    "broken",
    [
        {},
        {"node": 5, "boot": "", "dropped": True, "samples": "x"},
        {"node": "n", "boot": "b", "dropped": 0, "samples": [{"seq": 0, "ts": "x", "gpus": [{}], "events": None}]},
        {"node": None, "boot": "b" * 40, "dropped": 1.5, "samples": [1, {"seq": 1}], "extra": 1},
    ],
)
def test_the_fast_validator_answers_like_the_serializers(broken):
    from rest_framework.exceptions import ValidationError

    from allocations.nodeagent.api.fastcheck import compile_serializer
    from allocations.nodeagent.api.serializers import TelemetryIn

    # given: the agent's real payload passes both
    good = FakeNode("h100-node-0").telemetry(T0)
    assert compile_serializer(TelemetryIn)(good) == dict(TelemetryIn(data=good).is_valid() and good)

    # when
    drf = TelemetryIn(data=broken)
    drf.is_valid()
    with pytest.raises(ValidationError) as fast:
        compile_serializer(TelemetryIn)(broken)

    # then: the same messages in the same places (DRF's error codes are not part of the API's answer)
    assert json.loads(json.dumps(fast.value.detail)) == json.loads(json.dumps(drf.errors))


def test_a_node_reporting_another_nodes_device_uuid_gets_its_own_row(world, token, node0):
    # given: node 0 reports; node 1's agent (its own credential) reports the very same device UUIDs
    node1 = Node.objects.get(name="h100-node-1")
    other = services.issue_agent_credential(node_id=node1.pk, actor=world.root)[1]
    first = _agent_client(token).post("/api/v1/agent/telemetry/", FakeNode("h100-node-0").telemetry(T0), format="json")

    # when
    second = _agent_client(other).post("/api/v1/agent/telemetry/", FakeNode("h100-node-1").telemetry(T0), format="json")

    # then: no clash; each node has its own rows
    assert (first.status_code, second.status_code) == (200, 200)
    assert DeviceState.objects.filter(node=node0).count() == DeviceState.objects.filter(node=node1).count() == 5
