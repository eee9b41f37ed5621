"""The agent runs the portal's MIG commands: in order, a batch stopped at its first failure with a valid layout
left, each command run once however often it is listed, results kept until the portal has them, and the inventory
sent again after a change."""

from __future__ import annotations

import itertools
import json

import pynvml

from agent.commands import Command, CommandPoller
from agent.nvml import Nvml
from agent.outbox import Outbox
from agent.runner import Agent
from agent.sender import HttpTransport, Sender
from allocations.mig.catalog import load_catalog
from allocations.mig.layout import layout_violations
from tests.agent.http_portal import RecordingPortal, free_port
from tests.agent.scenarios import H100, fake


def _cmd(id_: int, action: str, profile: str, start: int, batch: str = "reconfiguration:1") -> Command:
    return Command(id=id_, gpu_index=0, action=action, profile=profile, start=start, batch_key=batch)


def _agent(lib, portal_url: str = "http://127.0.0.1:9", outbox: Outbox | None = None):
    clock = itertools.count(1000.0, 5.0)
    sender = Sender(
        transport=HttpTransport(portal_url, "fagent_test_secret", timeout_s=30),
        node="gpu-node-1",
        boot="boot-1",
        jitter=lambda d: d,
        outbox=outbox,
    )
    agent = Agent(nvml=Nvml(lib), sender=sender, node="gpu-node-1", clock=lambda: next(clock))
    return agent, sender


def _slots(lib) -> list[tuple[str, int]]:
    return [(gi.profile["name"], gi.start) for gi in sorted(lib.gpus[0].instances, key=lambda g: g.start)]


def _results(sender: Sender) -> dict[int, dict]:
    out = {}
    while (item := sender.outbox.next_pending()) is not None:
        out[item[0]] = item[1]
        sender.outbox.ack(item[0])
    return out


def test_a_batch_runs_in_order_its_results_go_out_first_then_the_fresh_inventory():
    # given: a 3g.40gb at 4 and a 1g.10gb at 0; the plan makes room for a 3g.40gb at 0
    instances = [{"profile": "3g.40gb", "start": 4}, {"profile": "1g.10gb", "start": 0}]
    lib = fake({"gpus": [{"product": H100, "instances": instances}]})
    portal = RecordingPortal(free_port())
    portal.status = 200
    portal.start()
    agent, sender = _agent(lib, portal.url)
    agent.offer_commands([_cmd(1, "destroy", "1g.10gb", 0), _cmd(2, "create", "3g.40gb", 0)])

    # when
    try:
        ran = agent.run_commands()
        while sender.send_pending() != "idle":
            pass
    finally:
        portal.stop()

    # then
    assert ran == 2
    assert _slots(lib) == [("3g.40gb", 0), ("3g.40gb", 4)]
    paths = [path for path, _, _ in portal.requests]
    assert paths == ["/api/v1/agent/commands/1/result/", "/api/v1/agent/commands/2/result/", "/api/v1/agent/inventory/"]
    destroyed, created, inventory = (body for _, body, _ in portal.requests)
    assert destroyed == {"node": "gpu-node-1", "ok": True, "gi_id": 2, "ci_id": None, "mig_uuid": ""}
    assert (created["ok"], created["gi_id"], created["ci_id"]) == (True, 2, 0)
    listed = inventory["gpus"][0]["instances"]
    assert [(i["profile"], i["start"], i["gi"]) for i in listed] == [("3g.40gb", 0, 2), ("3g.40gb", 4, 1)]
    assert listed[0]["cis"][0]["uuid"] == created["mig_uuid"]


def test_a_failure_in_the_middle_of_a_batch_leaves_a_valid_layout_and_the_rest_is_not_run():
    # given: the plan destroys two 1g.10gb and creates a 2g.20gb in their place, then a 1g.10gb elsewhere; NVML
    # fails the GPU-instance create; another batch follows
    lib = fake({"gpus": [{"product": H100, "instances": [{"profile": "1g.10gb", "start": s} for s in (0, 1, 5)]}]})
    lib.inject_failure(call="create_gpu_instance", code=pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
    agent, sender = _agent(lib)
    agent.offer_commands(
        [
            _cmd(1, "destroy", "1g.10gb", 0),
            _cmd(2, "destroy", "1g.10gb", 1),
            _cmd(3, "create", "2g.20gb", 0),
            _cmd(4, "create", "1g.10gb", 6),
            _cmd(5, "create", "1g.10gb", 3, batch="reconfiguration:2"),
        ]
    )

    # when
    ran = agent.run_commands()

    # then: the two destroys held, the create failed with NVML's code, 4 never ran, the other batch did
    assert ran == 4
    results = _results(sender)
    assert sorted(results) == [1, 2, 3, 5]
    assert (results[3]["ok"], results[3]["code"]) == (False, "NVML_ERROR_INSUFFICIENT_RESOURCES")
    assert "nvmlDeviceCreateGpuInstanceWithPlacement" in results[3]["error"]
    assert _slots(lib) == [("1g.10gb", 3), ("1g.10gb", 5)]
    assert layout_violations(load_catalog().model(H100), _slots(lib)) == []

    # and the rest of the failed batch stays skipped when the portal lists it again
    agent.offer_commands([_cmd(4, "create", "1g.10gb", 6)])
    assert agent.run_commands() == 0
    assert _slots(lib) == [("1g.10gb", 3), ("1g.10gb", 5)]


def test_a_batch_run_again_from_scratch_changes_nothing_more():
    # given: a batch ran; the agent restarts without its outbox and the portal hands the same commands out again
    lib = fake({"gpus": [{"product": H100, "instances": [{"profile": "1g.10gb", "start": 0}]}]})
    batch = [_cmd(1, "destroy", "1g.10gb", 0), _cmd(2, "create", "2g.20gb", 0), _cmd(3, "create", "1g.10gb", 6)]
    first, first_sender = _agent(lib)
    first.offer_commands(batch)
    first.run_commands()
    before = _results(first_sender)
    writes = dict(lib.calls)

    # when
    again, sender = _agent(lib)
    again.offer_commands(batch)
    again.run_commands()

    # then: no NVML write, the same layout; the creates report the same instances, the destroy found nothing left
    results = _results(sender)
    assert lib.calls == writes
    assert _slots(lib) == [("2g.20gb", 0), ("1g.10gb", 6)]
    assert (results[2], results[3]) == (before[2], before[3])
    assert (before[1]["gi_id"], results[1]) == (1, before[1] | {"gi_id": None})


def test_a_command_listed_twice_runs_once():
    lib = fake({"gpus": [{"product": H100}]})
    agent, sender = _agent(lib)
    agent.offer_commands([_cmd(1, "create", "1g.10gb", 2)])
    agent.offer_commands([_cmd(1, "create", "1g.10gb", 2)])  # before it ran
    agent.run_commands()
    agent.offer_commands([_cmd(1, "create", "1g.10gb", 2)])  # after it ran, before the portal heard
    assert agent.run_commands() == 0
    assert lib.calls == {"create_gpu_instance": 1, "create_compute_instance": 1}
    assert list(_results(sender)) == [1]


def test_the_poller_hands_over_new_commands_and_re_reports_ones_already_run():
    # given: the portal lists commands 7 and 8; the outbox already holds 7's result, acknowledged
    portal = RecordingPortal(free_port())
    portal.commands = [
        {"id": 7, "gpu_index": 0, "action": "create", "profile": "1g.10gb", "start": 0, "batch_key": "b"},
        {"id": 8, "gpu_index": 0, "action": "create", "profile": "1g.10gb", "start": 1, "batch_key": "b"},
        {"id": 9, "gpu_index": 0, "action": "reset", "profile": "", "start": 0, "batch_key": "b"},
        {"id": "x"},
    ]
    portal.start()
    outbox = Outbox()
    outbox.record(7, "b", {"node": "n", "ok": True, "gi_id": 1, "ci_id": 0, "mig_uuid": "MIG-x"})
    outbox.ack(7)
    handed: list[list[Command]] = []
    poller = CommandPoller(
        transport=HttpTransport(portal.url, "fagent_a_b"), node="gpu node/1", outbox=outbox, hand_over=handed.append
    )

    # when
    try:
        outcome = poller.poll_once()
    finally:
        portal.stop()

    # then: 8 goes to the sampler, 7 is queued to be reported again, the malformed and unknown ones are skipped
    assert outcome == "handed"
    assert handed == [[_cmd(8, "create", "1g.10gb", 1, batch="b")]]
    assert outbox.next_pending() == (7, {"node": "n", "ok": True, "gi_id": 1, "ci_id": 0, "mig_uuid": "MIG-x"})
    assert portal.requests == [("/api/v1/agent/commands/?node=gpu+node%2F1", {}, "Bearer fagent_a_b")]


def test_the_poller_counts_an_unreachable_portal_as_a_failure():
    poller = CommandPoller(
        transport=HttpTransport(f"http://127.0.0.1:{free_port()}", "t"), node="n", outbox=Outbox(), hand_over=print
    )
    assert poller.poll_once() == "failed"


def test_results_go_before_the_inventory_and_stay_until_the_portal_takes_them():
    # given: a result and an inventory wait; the portal answers 503, then 200
    portal = RecordingPortal(free_port())
    portal.status = 503
    portal.start()
    lib = fake({"gpus": [{"product": H100}]})
    agent, sender = _agent(lib, portal.url)
    agent.offer_commands([_cmd(3, "create", "1g.10gb", 0)])
    agent.run_commands()

    # when
    try:
        outcomes = [sender.send_pending()]
        portal.status = 200
        outcomes += [sender.send_pending() for _ in range(3)]
    finally:
        portal.stop()

    # then
    assert outcomes == ["failed", "sent", "sent", "idle"]
    assert [path for path, _, _ in portal.requests] == [
        "/api/v1/agent/commands/3/result/",
        "/api/v1/agent/commands/3/result/",
        "/api/v1/agent/inventory/",
    ]
    assert portal.requests[0][1] == portal.requests[1][1]
    assert sender.outbox.pending() == 0


def test_a_result_the_portal_refuses_for_good_is_dropped_and_counted():
    portal = RecordingPortal(free_port())
    portal.status = 409
    portal.start()
    agent, sender = _agent(fake({"gpus": [{"product": H100}]}), portal.url)
    sender.put_result(5, "b", {"node": "gpu-node-1", "ok": True, "gi_id": 1, "ci_id": 0, "mig_uuid": "MIG-x"})
    try:
        assert sender.send_pending() == "sent"
    finally:
        portal.stop()
    assert (sender.results_refused, sender.outbox.pending()) == (1, 0)


def test_the_outbox_file_keeps_unsent_results_and_what_ran_across_a_restart(tmp_path):
    # given: two results, one acknowledged
    path = tmp_path / "outbox.json"
    outbox = Outbox(path)
    outbox.record(1, "b", {"ok": True})
    outbox.record(2, "b", {"ok": False, "error": "x", "code": "NVML_ERROR_IN_USE"})
    outbox.ack(1)

    # when: the agent starts again
    again = Outbox(path)

    # then
    assert again.next_pending() == (2, {"ok": False, "error": "x", "code": "NVML_ERROR_IN_USE"})
    assert again.known(1) == {"ok": True}
    assert again.batch_failed("b") is True
    assert again.batch_failed("other") is False
    assert json.loads(path.read_text())["pending"] == [2]


def test_a_damaged_outbox_file_starts_empty(tmp_path):
    path = tmp_path / "outbox.json"
    path.write_text("{not json")
    assert Outbox(path).pending() == 0


def test_the_outbox_forgets_the_oldest_acknowledged_results_never_an_unsent_one():
    outbox = Outbox(keep=2)
    outbox.record(1, "b", {"ok": True})  # never acknowledged
    outbox.record(2, "b", {"ok": True})
    outbox.ack(2)
    outbox.record(3, "b", {"ok": True})
    outbox.ack(3)
    outbox.record(4, "b", {"ok": True})
    assert [outbox.known(i) is not None for i in (1, 2, 3, 4)] == [True, False, False, True]
    assert outbox.pending() == 2


def test_a_command_for_a_gpu_the_node_does_not_have_fails_with_nvmls_code():
    lib = fake({"gpus": [{"product": H100}]})
    agent, sender = _agent(lib)
    agent.offer_commands([Command(id=1, gpu_index=3, action="create", profile="1g.10gb", start=0, batch_key="b")])
    agent.run_commands()
    result = _results(sender)[1]
    assert (result["ok"], result["code"]) == (False, "NVML_ERROR_INVALID_ARGUMENT")
    assert lib.calls == {}
