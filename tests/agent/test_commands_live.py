"""The agent's MIG command loop against the real portal over HTTP (pytest-django's live server), through a proxy
the tests can take away: a batch applied end to end, the portal gone between execute and report, an answer lost
after the portal recorded the result, and a failure in the middle of a batch."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

from agent.commands import CommandPoller
from agent.nvml import Nvml
from agent.runner import Agent
from agent.sender import HttpTransport, Sender
from allocations.mig.catalog import load_catalog
from allocations.mig.layout import layout_violations
from allocations.mig.reconfig import Operation
from allocations.models import Node
from allocations.nodeagent import services
from allocations.nodeagent.commands import batch_state, queue_agent_commands
from allocations.nodeagent.models import AgentStatus
from tenants.models import AuditEvent
from tests.agent.http_portal import Proxy
from tests.agent.scenarios import H100, fake, write

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.django_db(transaction=True)

NODE = "h100-node-0"
# Two free 1g.10gb at 0 and 1 make room for a 2g.20gb at 0; a 1g.10gb goes to 6.
PLAN = [
    Operation("destroy", "1g.10gb", 0),
    Operation("destroy", "1g.10gb", 1),
    Operation("create", "2g.20gb", 0),
    Operation("create", "1g.10gb", 6),
]


@pytest.fixture
def proxy(live_server: Any) -> Iterator[Proxy]:
    proxy = Proxy(live_server.url)
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture
def node0(world) -> Node:
    return Node.objects.get(name=NODE)


@pytest.fixture
def token(world, node0) -> str:
    return services.issue_agent_credential(node_id=node0.pk, actor=world.root)[1]


class NodeAgent:
    """The agent's real pieces on a fake H100, driven one step at a time."""

    def __init__(self, url: str, token: str) -> None:
        self.lib = fake(
            {"gpus": [{"product": H100, "instances": [{"profile": "1g.10gb", "start": s} for s in (0, 1, 4)]}]}
        )
        transport = HttpTransport(url, token, timeout_s=30)
        clock = itertools.count(1000.0, 5.0)
        self.sender = Sender(transport=transport, node=NODE, boot="boot-1", jitter=lambda d: d)
        self.agent = Agent(nvml=Nvml(self.lib), sender=self.sender, node=NODE, clock=lambda: next(clock))
        self.poller = CommandPoller(
            transport=transport, node=NODE, outbox=self.sender.outbox, hand_over=self.agent.offer_commands
        )

    def poll_and_run(self) -> tuple[str, int]:
        outcome = self.poller.poll_once()
        return outcome, self.agent.run_commands()

    def send(self) -> list[str]:
        outcomes = []
        while (outcome := self.sender.send_pending()) != "idle":
            outcomes.append(outcome)
            if outcome == "failed":
                break
        return outcomes

    def slots(self) -> list[tuple[str, int]]:
        return [(gi.profile["name"], gi.start) for gi in sorted(self.lib.gpus[0].instances, key=lambda g: g.start)]


def _queue(node: Node) -> None:
    queue_agent_commands(node_id=node.pk, gpu_index=0, operations=PLAN, batch_key="reconfiguration:1")


def test_a_batch_is_applied_reported_and_followed_by_the_new_inventory(proxy, node0, token):
    # given
    _queue(node0)
    node = NodeAgent(proxy.url, token)

    # when
    outcome, ran = node.poll_and_run()
    sent = node.send()

    # then: the layout the plan asked for, every command done with what NVML made, and the portal's inventory fresh
    assert (outcome, ran, sent) == ("handed", 4, ["sent"] * 5)
    assert node.slots() == [("2g.20gb", 0), ("1g.10gb", 4), ("1g.10gb", 6)]
    state = batch_state(batch_key="reconfiguration:1")
    assert state.status == "done"
    assert [c.result["gi_id"] for c in state.commands] == [1, 2, 1, 2]
    inventory = AgentStatus.objects.get(node=node0).inventory["gpus"][0]["instances"]
    uuids = {(i["profile"], i["start"]): i["cis"][0]["uuid"] for i in inventory}
    assert uuids[("2g.20gb", 0)] == state.commands[2].result["mig_uuid"]
    assert uuids[("1g.10gb", 6)] == state.commands[3].result["mig_uuid"]
    assert sorted(uuids) == [("1g.10gb", 4), ("1g.10gb", 6), ("2g.20gb", 0)]
    assert node.poll_and_run() == ("idle", 0)


def test_the_portal_going_away_between_execute_and_report_loses_no_result_and_runs_nothing_twice(proxy, node0, token):
    # given: the agent has fetched and run the batch, then the portal goes away
    _queue(node0)
    node = NodeAgent(proxy.url, token)
    assert node.poll_and_run() == ("handed", 4)
    writes = dict(node.lib.calls)
    proxy.stop()

    # when: it cannot report nor poll; the portal comes back and still lists the commands as running
    down = (node.send(), node.poller.poll_once())
    proxy.start()
    back = node.poll_and_run()
    sent = node.send()

    # then: nothing ran again; each result arrived once, from the outbox
    assert down == (["failed"], "failed")
    assert back == ("idle", 0)
    assert sent == ["sent"] * 5
    assert (
        node.lib.calls
        == writes
        == {
            "destroy_compute_instance": 2,
            "destroy_gpu_instance": 2,
            "create_gpu_instance": 2,
            "create_compute_instance": 2,
        }
    )
    assert batch_state(batch_key="reconfiguration:1").status == "done"
    results = [p for m, p, _ in proxy.paths if m == "POST" and p.endswith("/result/")]
    assert len(results) == len(set(results)) == 4
    assert AuditEvent.objects.filter(verb="agent_command_done").count() == 4


def test_a_result_whose_answer_was_lost_is_sent_again_and_recorded_once(proxy, node0, token):
    # given: the portal records the first result but its answer never reaches the agent
    _queue(node0)
    node = NodeAgent(proxy.url, token)
    node.poll_and_run()
    proxy.swallow = 1

    # when
    first = node.send()
    again = node.send()

    # then
    assert (first, again) == (["failed"], ["sent"] * 5)
    posts = [(p, status) for m, p, status in proxy.paths if m == "POST" and p.endswith("/result/")]
    assert [status for _, status in posts] == [200] * 5
    assert posts[0][0] == posts[1][0]  # the same result twice: 200 both times
    assert batch_state(batch_key="reconfiguration:1").status == "done"
    assert AuditEvent.objects.filter(verb="agent_command_done").count() == 4


def test_a_failure_in_the_middle_of_a_batch_stops_it_on_both_sides_and_leaves_a_valid_layout(proxy, node0, token):
    # given: NVML will refuse the GPU-instance create
    _queue(node0)
    node = NodeAgent(proxy.url, token)
    node.lib.inject_failure(call="create_gpu_instance", code=pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)

    # when
    outcome, ran = node.poll_and_run()
    node.send()

    # then: two destroys done, the create failed with NVML's code, the last one cancelled and never run
    assert (outcome, ran) == ("handed", 3)
    state = batch_state(batch_key="reconfiguration:1")
    assert [c.status for c in state.commands] == ["done", "done", "failed", "cancelled"]
    assert (state.status, state.commands[2].code) == ("failed", "NVML_ERROR_INSUFFICIENT_RESOURCES")
    assert node.slots() == [("1g.10gb", 4)]
    assert layout_violations(load_catalog().model(H100), node.slots()) == []
    assert node.poll_and_run() == ("idle", 0)


def test_python_m_agent_without_django_applies_a_batch_and_keeps_its_outbox_file(proxy, node0, token, tmp_path):
    # given: the batch is queued; the agent runs as its own process, where importing Django fails
    _queue(node0)
    scenario = write(
        tmp_path, {"gpus": [{"product": H100, "instances": [{"profile": "1g.10gb", "start": s} for s in (0, 1, 4)]}]}
    )
    outbox = tmp_path / "outbox.json"
    env = {
        "PATH": os.environ["PATH"],
        "FATIA_AGENT_PORTAL_URL": proxy.url,
        "FATIA_AGENT_TOKEN": token,
        "FATIA_AGENT_NODE": NODE,
        "FATIA_AGENT_FAKE_NVML": str(scenario),
        "FATIA_AGENT_INTERVAL_S": "1",
        "FATIA_AGENT_COMMAND_POLL_S": "0.2",
        "FATIA_AGENT_OUTBOX": str(outbox),
    }
    code = "import runpy, sys; sys.modules['django'] = None; runpy.run_module('agent', run_name='__main__')"
    process = subprocess.Popen(  # noqa: S603 -- our own interpreter and module
        [sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )

    # when: the portal has every result and the inventory that follows (a guard against hanging, not a timing)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = batch_state(batch_key="reconfiguration:1").status == "done"
            status = AgentStatus.objects.filter(node=node0).first()
            starts = [i["start"] for i in status.inventory["gpus"][0]["instances"]] if status else []
            if done and starts == [0, 4, 6]:
                break
            time.sleep(0.2)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)

    # then
    state = batch_state(batch_key="reconfiguration:1")
    assert [c.status for c in state.commands] == ["done"] * 4, stderr
    assert starts == [0, 4, 6]
    assert process.returncode == 0, stderr
    kept = json.loads(outbox.read_text())
    assert (kept["pending"], [k[0] for k in kept["known"]]) == ([], [c.pk for c in state.commands])


def test_commands_queued_while_the_agent_runs_reach_it_through_the_telemetry_answer(proxy, node0, token, tmp_path):
    # given: an agent whose own poll comes only every ten minutes, already running (its start-up poll found nothing)
    scenario = write(
        tmp_path, {"gpus": [{"product": H100, "instances": [{"profile": "1g.10gb", "start": s} for s in (0, 1, 4)]}]}
    )
    env = {
        "PATH": os.environ["PATH"],
        "FATIA_AGENT_PORTAL_URL": proxy.url,
        "FATIA_AGENT_TOKEN": token,
        "FATIA_AGENT_NODE": NODE,
        "FATIA_AGENT_FAKE_NVML": str(scenario),
        "FATIA_AGENT_INTERVAL_S": "1",
        "FATIA_AGENT_COMMAND_POLL_S": "600",
    }
    process = subprocess.Popen(  # noqa: S603 -- our own interpreter and module
        [sys.executable, "-m", "agent"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120  # guards against hanging, not timings
        while time.monotonic() < deadline and not AgentStatus.objects.filter(node=node0, last_seq__gt=0).exists():
            time.sleep(0.2)

        # when: the portal queues a batch; only a telemetry answer can tell the agent
        _queue(node0)
        while time.monotonic() < deadline and batch_state(batch_key="reconfiguration:1").status != "done":
            time.sleep(0.2)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)

    # then
    assert [c.status for c in batch_state(batch_key="reconfiguration:1").commands] == ["done"] * 4, stderr
