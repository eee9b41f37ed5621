"""Ingest into latest state and history, resends, rollups, retention and agent freshness (services called
directly, with the agent's real payloads and a chosen clock)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from allocations.models import Node
from allocations.nodeagent import services
from allocations.nodeagent.models import AgentCredential, AgentStatus, DeviceRollup, DeviceState, HealthEvent
from tenants.models import AuditEvent
from tests.nodeagent.payloads import T0, FakeNode

pytestmark = pytest.mark.django_db

NOW = datetime.fromtimestamp(T0, UTC) + timedelta(hours=1)


@pytest.fixture
def credential(world):
    node = Node.objects.get(name="h100-node-0")
    return services.issue_agent_credential(node_id=node.pk, actor=world.root)[0]


def _minutes(uuid):
    return [
        (
            r.bucket.strftime("%H:%M"),
            r.samples,
            r.memory_mean_mib,
            r.memory_max_mib,
            r.utilisation_mean,
            r.processes_max,
        )
        for r in DeviceRollup.objects.filter(uuid=uuid, resolution="minute").order_by("bucket")
    ]


def test_samples_become_latest_state_and_one_rollup_per_device_per_finished_minute(credential):
    # given: the 3g.40gb runs 8 GiB at 40 % for a minute, then 12 GiB at 60 % into the next minute
    agent = FakeNode("h100-node-0")
    services.record_inventory(credential=credential, payload=agent.inventory(), now=NOW)
    first = agent.telemetry(T0, T0 + 20, T0 + 40)
    agent.lib.run_process(gpu_index=0, gi_id=1, pid=5000, used_mib=4096)
    agent.lib.set_sm_util(gpu_index=0, gi_id=1, value=60.0)
    second = agent.telemetry(T0 + 60, T0 + 80)

    # when
    services.record_telemetry(credential=credential, payload=first, now=NOW)
    result = services.record_telemetry(credential=credential, payload=second, now=NOW)

    # then
    uuid = DeviceState.objects.get(kind="mig", profile="3g.40gb").uuid
    state = DeviceState.objects.get(uuid=uuid)
    assert (state.memory_used_mib, state.processes, state.utilisation, state.utilisation_source) == (
        12288,
        2,
        60.0,
        "gpm",
    )
    assert (state.gpu.node.name, state.gpu.index, state.start) == ("h100-node-0", 0, 4)
    # GPM has no utilisation on the very first sample, so the first minute's mean is over two samples
    assert _minutes(uuid) == [("12:00", 3, 8192.0, 8192, 40.0, 1)]
    assert (state.minute_samples, state.minute_memory_sum) == (2, 2 * 12288)
    assert (result.accepted, result.duplicates, result.rollups, result.devices) == (2, 0, 5, 5)


def test_a_resent_batch_changes_nothing(credential):
    # given
    agent = FakeNode("h100-node-0")
    batch = agent.telemetry(T0, T0 + 5)
    services.record_telemetry(credential=credential, payload=batch, now=NOW)
    before = list(DeviceState.objects.order_by("uuid").values())

    # when: the agent never got the answer and sends the same batch again
    result = services.record_telemetry(credential=credential, payload=batch, now=NOW)

    # then
    assert (result.accepted, result.duplicates) == (0, 2)
    assert list(DeviceState.objects.order_by("uuid").values()) == before


def test_a_restarted_agent_starts_its_sequence_again(credential):
    agent = FakeNode("h100-node-0")
    services.record_telemetry(credential=credential, payload=agent.telemetry(T0, T0 + 5), now=NOW)
    restarted = FakeNode("h100-node-0")
    result = services.record_telemetry(
        credential=credential, payload=restarted.telemetry(T0 + 10, boot="boot-2", dropped=3), now=NOW
    )
    status = AgentStatus.objects.get()
    assert (result.accepted, status.boot, status.last_seq, status.dropped) == (1, "boot-2", 1, 3)


def test_a_destroyed_instance_leaves_the_latest_state_and_keeps_its_history(credential):
    # given
    agent = FakeNode("h100-node-0")
    services.record_telemetry(credential=credential, payload=agent.telemetry(T0, T0 + 5), now=NOW)
    idle = DeviceState.objects.get(kind="mig", profile="1g.10gb").uuid

    # when: the idle 1g.10gb (gi 2) is destroyed
    agent.nvml.destroy_instance(gpu_index=0, gi_id=2)
    result = services.record_telemetry(credential=credential, payload=agent.telemetry(T0 + 10), now=NOW)

    # then
    assert result.removed == [idle]
    assert not DeviceState.objects.filter(uuid=idle).exists()
    assert _minutes(idle) == [("12:00", 2, 0.0, 0, 0.0, 0)]


def test_health_events_are_stored(credential):
    agent = FakeNode("h100-node-0")
    services.record_telemetry(credential=credential, payload=agent.telemetry(T0), now=NOW)
    agent.lib.inject_xid(gpu_index=0, code=79)
    services.record_telemetry(credential=credential, payload=agent.telemetry(T0 + 5), now=NOW)
    event = HealthEvent.objects.get()
    assert (event.kind, event.code, event.gpu_uuid, event.at) == (
        "xid",
        79,
        agent.nvml.inventory().gpus[0].uuid,
        datetime.fromtimestamp(T0 + 5, UTC),
    )


def test_a_sample_from_the_future_is_dated_now(credential):
    agent = FakeNode("h100-node-0")
    services.record_telemetry(credential=credential, payload=agent.telemetry(T0 + 86_400), now=NOW)
    assert set(DeviceState.objects.values_list("sampled_at", flat=True)) == {NOW}


def test_hours_are_rolled_up_from_minutes_and_old_history_is_pruned(credential, settings):
    # given: minute rows of one device at 11:58, 11:59 and 12:00, plus history past both retention limits
    node = credential.node

    def minute(bucket, samples, memory, util, resolution="minute"):
        DeviceRollup.objects.create(
            node=node,
            uuid="MIG-x",
            kind="mig",
            resolution=resolution,
            bucket=bucket,
            samples=samples,
            memory_mean_mib=memory,
            memory_max_mib=int(memory),
            utilisation_mean=util,
            utilisation_max=util,
            processes_max=1,
        )

    noon = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    minute(noon - timedelta(minutes=2), 12, 100.0, 10.0)
    minute(noon - timedelta(minutes=1), 4, 300.0, None)
    minute(noon, 12, 1000.0, 50.0)
    minute(noon - timedelta(days=7, minutes=1), 12, 1.0, 1.0)
    minute(noon - timedelta(days=91), 700, 1.0, 1.0, resolution="hour")
    HealthEvent.objects.create(node=node, gpu_uuid="GPU-x", kind="xid", code=79, at=noon - timedelta(days=91))

    # when
    written = services.roll_up_hours(now=noon + timedelta(minutes=5))
    pruned = services.prune_agent_history(now=noon + timedelta(minutes=5))

    # then: 11:00 holds 16 samples (mean memory 150, utilisation over the 12 samples that had it), 12:00 holds 12
    hours = DeviceRollup.objects.filter(resolution="hour").order_by("bucket")
    assert written == 2
    assert [(h.bucket.hour, h.samples, h.memory_mean_mib, h.memory_max_mib, h.utilisation_mean) for h in hours] == [
        (11, 16, 150.0, 300, 10.0),
        (12, 12, 1000.0, 1000, 50.0),
    ]
    assert (pruned.minutes, pruned.hours, pruned.events) == (1, 1, 1)
    assert DeviceRollup.objects.filter(resolution="minute").count() == 3


def test_an_agent_silent_past_the_setting_marks_its_node_and_a_report_brings_it_back(
    credential, settings, django_capture_on_commit_callbacks
):
    # given: node 0's agent reported at NOW; node 1 never ran one
    settings.FATIA_AGENT_SILENT_AFTER_S = 60
    agent = FakeNode("h100-node-0")
    services.record_telemetry(credential=credential, payload=agent.telemetry(T0), now=NOW)

    # when
    early = services.mark_silent_agents(now=NOW + timedelta(seconds=60))
    late = services.mark_silent_agents(now=NOW + timedelta(seconds=61))

    # then
    assert (early, late) == ([], ["h100-node-0"])
    assert dict(Node.objects.values_list("name", "state")) == {"h100-node-0": "agent-silent", "h100-node-1": "ready"}
    event = AuditEvent.objects.get(verb="agent_silent")
    assert (event.object_id, event.before, event.after) == (
        str(credential.node_id),
        {"state": "ready"},
        {"state": "agent-silent"},
    )

    # and when the agent reports again
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        services.record_telemetry(credential=credential, payload=agent.telemetry(T0 + 5), now=NOW)
    assert len(callbacks) == 1
    assert Node.objects.get(name="h100-node-0").state == "ready"
    assert AuditEvent.objects.filter(verb="agent_back").count() == 1


def test_a_cordoned_node_is_not_marked_silent(credential):
    services.record_telemetry(credential=credential, payload=FakeNode("h100-node-0").telemetry(T0), now=NOW)
    Node.objects.filter(pk=credential.node_id).update(state=Node.State.CORDONED)
    assert services.mark_silent_agents(now=NOW + timedelta(hours=1)) == []
    assert Node.objects.get(pk=credential.node_id).state == "cordoned"


def test_a_credential_is_stored_as_a_digest_and_revoked_once(world, credential):
    # given
    token = services.issue_agent_credential(node_id=credential.node_id, actor=world.root)[1]
    second = AgentCredential.objects.exclude(pk=credential.pk).get()

    # then: only the digest is kept; the prefix finds it
    assert token.startswith(f"fagent_{second.prefix}_")
    assert second.digest == services.hash_agent_token(token)
    assert token not in str(list(AgentCredential.objects.values()))

    # when / then: revoked once; a second revoke is refused
    services.revoke_agent_credential(credential_id=second.pk, actor=world.root)
    with pytest.raises(services.InvalidTransition):
        services.revoke_agent_credential(credential_id=second.pk, actor=world.root)
    assert AuditEvent.objects.filter(verb="revoke_agent_credential").count() == 1


def test_only_platform_admins_issue_credentials(world):
    node = Node.objects.get(name="h100-node-0")
    with pytest.raises(services.NotAllowed):
        services.issue_agent_credential(node_id=node.pk, actor=world.mallory)
    assert not AgentCredential.objects.exists()
