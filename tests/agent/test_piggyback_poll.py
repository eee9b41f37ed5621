"""Idle nodes need not poll for MIG commands: the telemetry answer says when some wait (``commands``), which wakes
the command poller at once; without it the poller asks only on its slow fallback interval."""

from __future__ import annotations

import itertools
import json
import time

import pytest

from agent.commands import CommandPoller
from agent.nvml import Nvml
from agent.outbox import Outbox
from agent.runner import Agent
from agent.sender import HttpTransport, Sender
from tests.agent.http_portal import RecordingPortal, free_port
from tests.agent.scenarios import fake, two_gpus


@pytest.fixture
def portal():
    portal = RecordingPortal(free_port())
    portal.start()
    yield portal
    portal.stop()


@pytest.mark.parametrize(
    ("status", "answer", "woken"),
    [
        (202, {"queued": 1, "commands": 1}, 1),
        (200, {"accepted": 1, "duplicates": 0, "commands": 3}, 1),
        (202, {"queued": 1, "commands": 0}, 0),
        (200, {"accepted": 1, "duplicates": 0}, 0),  # a portal from before the flag
        (503, {"code": "unavailable", "commands": 1}, 0),
    ],
    ids=["queued-waiting", "applied-waiting", "none-waiting", "older-portal", "busy"],
)
def test_a_telemetry_answer_with_commands_waiting_wakes_the_poller(portal, status, answer, woken):
    # given
    calls: list[str] = []
    portal.status = 200

    def answer_telemetry_so(path, body):  # the inventory gets a plain 200, the telemetry the answer under test
        portal.status, portal.answer = status, json.dumps(answer).encode()

    portal.on_request = answer_telemetry_so
    sender = Sender(
        transport=HttpTransport(portal.url, "fagent_a_b", timeout_s=30),
        node="gpu-node-1",
        boot="boot-1",
        on_commands=lambda: calls.append("wake"),
    )
    clock = itertools.count(1000.0, 5.0)
    agent = Agent(nvml=Nvml(fake(two_gpus())), sender=sender, node="gpu-node-1", clock=lambda: next(clock))
    agent.tick()

    # when: the inventory, then the sample
    sender.send_pending()
    sender.send_pending()

    # then: only a telemetry answer that says so wakes it
    assert [path for path, _, _ in portal.requests] == ["/api/v1/agent/inventory/", "/api/v1/agent/telemetry/"]
    assert len(calls) == woken


def _gets(portal: RecordingPortal) -> int:
    return sum(1 for path, _, _ in portal.requests if path.startswith("/api/v1/agent/commands/"))


def _wait_for(predicate, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds  # a guard against hanging, not a timing
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_a_wake_makes_the_poller_ask_at_once_instead_of_at_its_slow_interval(portal):
    # given: a poller that asks at start, then only every ten minutes
    poller = CommandPoller(
        transport=HttpTransport(portal.url, "fagent_a_b"), node="n", outbox=Outbox(), hand_over=print, interval_s=600
    )
    poller.start()
    try:
        assert _wait_for(lambda: _gets(portal) == 1)

        # when
        poller.wake()

        # then
        assert _wait_for(lambda: _gets(portal) == 2)
    finally:
        poller.stop()
    assert poller.polls == 2
