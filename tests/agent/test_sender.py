"""The agent with the portal down, failing and slow: capped back-off, a bounded buffer whose overflow is counted,
nothing lost within the bound, and sampling that never waits on the network."""

from __future__ import annotations

import itertools
import threading

from agent.nvml import Nvml
from agent.runner import Agent
from agent.sender import HttpTransport, Sender
from tests.agent.http_portal import RecordingPortal, free_port
from tests.agent.scenarios import fake, two_gpus


def _agent(portal_url: str, **sender_options):
    clock = itertools.count(1000.0, 5.0)
    sender = Sender(
        transport=HttpTransport(portal_url, "fagent_test_secret", timeout_s=30),
        node="gpu-node-1",
        boot="boot-1",
        jitter=lambda d: d,
        **sender_options,
    )
    return Agent(nvml=Nvml(fake(two_gpus())), sender=sender, node="gpu-node-1", clock=lambda: next(clock)), sender


def test_with_the_portal_down_it_backs_off_up_to_the_cap_keeps_the_newest_and_delivers_them_once_it_is_back():
    # given: nothing listens on the portal's port; 15 samples into a buffer of 10
    port = free_port()
    portal = RecordingPortal(port)
    delays: list[float] = []

    def wait(delay: float) -> None:
        delays.append(delay)
        if len(delays) == 6:
            portal.start()  # the portal comes back after the sixth failed attempt

    agent, sender = _agent(portal.url, capacity=10, batch=4, backoff_base_s=1.0, backoff_cap_s=8.0, wait=wait)
    for _ in range(15):
        agent.tick()
    assert (sender.pending(), sender.dropped) == (11, 5)  # the inventory and the 10 newest samples

    def stop_when_done(path, body):
        if path.endswith("/telemetry/") and body["samples"][-1]["seq"] == 15:
            sender.stop()

    portal.on_request = stop_when_done

    # when
    try:
        sender.run()
    finally:
        portal.stop()

    # then
    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert [path for path, _, _ in portal.requests] == ["/api/v1/agent/inventory/"] + ["/api/v1/agent/telemetry/"] * 3
    assert [s["seq"] for s in portal.samples()] == list(range(6, 16))
    assert {body["dropped"] for path, body, _ in portal.requests if path.endswith("/telemetry/")} == {5}
    assert {auth for _, _, auth in portal.requests} == {"Bearer fagent_test_secret"}
    assert (sender.pending(), sender.sent, sender.failures) == (0, 10, 0)


def test_a_failing_portal_loses_no_sample_and_sends_none_twice():
    # given: the portal answers 503 to the first two attempts, then 201
    portal = RecordingPortal(free_port())
    portal.status = 503
    portal.start()
    attempts: list[float] = []

    def wait(delay: float) -> None:
        attempts.append(delay)
        if len(attempts) == 2:
            portal.status = 201

    agent, sender = _agent(portal.url, batch=3, wait=wait)
    for _ in range(6):
        agent.tick()

    def stop_when_done(path, body):
        if path.endswith("/telemetry/") and body["samples"][-1]["seq"] == 6:
            sender.stop()

    portal.on_request = stop_when_done

    # when
    try:
        sender.run()
    finally:
        portal.stop()

    # then: every sample arrived once, in order, after the accepted attempts
    assert [path.split("/")[-2] for path, _, _ in portal.requests] == ["inventory"] * 3 + ["telemetry"] * 2
    assert [s["seq"] for s in portal.samples()] == [1, 2, 3, 4, 5, 6]
    assert attempts == [1.0, 2.0]
    assert (sender.dropped, sender.rejected, sender.sent) == (0, 0, 6)


def test_a_batch_the_portal_rejects_as_malformed_is_dropped_and_counted_not_retried_forever():
    portal = RecordingPortal(free_port())
    portal.status = 400
    portal.start()
    agent, sender = _agent(portal.url, batch=10)
    try:
        agent.tick()
        agent.tick()
        assert sender.send_pending() == "sent"  # the inventory, refused: dropped
        assert sender.send_pending() == "sent"  # the two samples, refused: dropped and counted
        assert sender.send_pending() == "idle"
    finally:
        portal.stop()
    assert (sender.rejected, sender.sent, sender.pending()) == (2, 0, 0)


def test_sampling_goes_on_while_the_sender_is_stuck_in_a_request():
    # given: the portal holds every request until the test lets it go
    portal = RecordingPortal(free_port())
    portal.hold = threading.Event()
    portal.start()
    agent, sender = _agent(portal.url, capacity=100)
    agent.tick()
    sender.start()

    # when: the sender is inside its first request; the sampler takes ten more samples
    for _ in range(10):
        agent.tick()
    released_by_test = not portal.hold.is_set()
    portal.hold.set()
    sender.stop()
    portal.stop()

    # then: the samples were taken while the request was still held
    assert released_by_test
    assert agent.seq == 11


def test_batches_stay_under_the_portals_body_limit():
    # given: a full node (8 GPUs x 7 MIG devices) sampled 20 times; batches of at most 48 kB of samples
    from tests.agent.scenarios import full_node

    portal = RecordingPortal(free_port())
    portal.start()
    clock = itertools.count(1000.0, 5.0)
    sender = Sender(transport=HttpTransport(portal.url, "fagent_x_y"), node="n", boot="b", batch_bytes=48_000)
    agent = Agent(nvml=Nvml(fake(full_node())), sender=sender, node="n", clock=lambda: next(clock))
    for _ in range(20):
        agent.tick()

    # when
    try:
        while sender.send_pending() != "idle":
            pass
    finally:
        portal.stop()

    # then: every sample arrived once, in batches of five (about 8.5 kB each)
    batches = [body["samples"] for path, body, _ in portal.requests if path.endswith("/telemetry/")]
    assert [len(b) for b in batches] == [5, 5, 5, 5]
    assert [s["seq"] for b in batches for s in b] == list(range(1, 21))


def test_a_garbled_answer_counts_as_a_failure_and_the_batch_is_sent_again():
    # given: the first two answers are not HTTP at all
    portal = RecordingPortal(free_port())
    portal.garble = 2
    portal.start()
    delays: list[float] = []
    agent, sender = _agent(portal.url, wait=delays.append)
    agent.tick()

    # when
    try:
        outcomes = [sender.send_pending() for _ in range(4)]
    finally:
        portal.stop()

    # then: the inventory fails twice, then it and the sample arrive, once each
    assert outcomes == ["failed", "failed", "sent", "sent"]
    assert [path.split("/")[-2] for path, _, _ in portal.requests] == ["inventory", "telemetry"]
    assert [s["seq"] for s in portal.samples()] == [1]


def test_with_a_send_interval_it_waits_after_emptying_its_buffer_and_sends_what_gathered_in_one_batch():
    # given: a sender that waits 30 s after each send that empties its buffer
    portal = RecordingPortal(free_port())
    portal.start()
    waits: list[float] = []

    def sample_three_then_stop(delay):
        waits.append(delay)
        if len(waits) == 1:
            for _ in range(3):  # the sampler goes on while the sender waits
                agent.tick()
        else:
            sender.stop()

    agent, sender = _agent(portal.url, send_interval_s=30.0, wait=sample_three_then_stop)
    agent.tick()

    # when
    try:
        sender.run()
    finally:
        portal.stop()

    # then: inventory, then sample 1; a 30 s wait; then samples 2-4 in one request
    telemetry = [[s["seq"] for s in body["samples"]] for path, body, _ in portal.requests if "telemetry" in path]
    assert telemetry == [[1], [2, 3, 4]]
    assert waits == [30.0, 30.0]
