"""The last result of a reconfiguration's batch wakes its orchestration at once (advance_reconfiguration_task on
commit), instead of leaving it to the next poll."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from allocations import tasks
from allocations.models import Gpu, MigReconfiguration, Node
from allocations.nodeagent import services
from allocations.nodeagent.commands import claim_agent_commands, queue_agent_commands, record_agent_command_result
from allocations.nodeagent.models import AgentCredential
from tests.nodeagent.test_commands import MADE, PLAN, _failed, _ok

pytestmark = pytest.mark.django_db


@pytest.fixture
def node0(world: Any) -> Node:
    node = Node.objects.get(name="h100-node-0")
    services.issue_agent_credential(node_id=node.pk, actor=world.root)
    return node


def live_reconfiguration(node: Node) -> MigReconfiguration:
    gpu = Gpu.objects.get(node=node, index=0)
    return MigReconfiguration.objects.create(gpu=gpu, reason="test", status=MigReconfiguration.Status.APPLYING)


def woken(callbacks: list[Any]) -> list[int]:
    """The reconfiguration ids whose advance task the callbacks queue (sent through the outbox after commit)."""
    return [
        cb.args[0]
        for cb in callbacks
        if isinstance(cb, partial)
        and getattr(getattr(cb.func, "__self__", None), "name", None) == tasks.advance_reconfiguration_task.name
    ]


def report(node: Node, batch_key: str, payloads: list[dict[str, Any]], capture: Any) -> list[list[int]]:
    """Queue len(payloads) commands, then report each; per report, the reconfigurations woken on its commit."""
    queue_agent_commands(node_id=node.pk, gpu_index=0, operations=PLAN[: len(payloads)], batch_key=batch_key)
    credential = AgentCredential.objects.select_related("node").get(node=node)
    listed = claim_agent_commands(credential=credential, node_name=node.name)
    seen = []
    for command, payload in zip(listed, payloads, strict=True):
        with capture() as callbacks:
            record_agent_command_result(credential=credential, command_id=command.pk, payload=payload)
        seen.append(woken(callbacks))
    return seen


def test_the_last_result_of_a_batch_wakes_its_reconfiguration(
    node0: Node, django_capture_on_commit_callbacks: Any
) -> None:
    # given
    live = live_reconfiguration(node0)
    # when
    seen = report(node0, f"reconfiguration:{live.pk}:apply-1", [_ok(gi_id=1), _ok(gi_id=2), _ok(**MADE)],
                  django_capture_on_commit_callbacks)  # fmt: skip
    # then: only the last result queues the next step
    assert seen == [[], [], [live.pk]]


def test_a_failure_ends_the_batch_and_wakes_its_reconfiguration(
    node0: Node, django_capture_on_commit_callbacks: Any
) -> None:
    live = live_reconfiguration(node0)
    seen = report(node0, f"reconfiguration:{live.pk}:apply-2", [_ok(gi_id=1), _failed()],
                  django_capture_on_commit_callbacks)  # fmt: skip
    assert seen == [[], [live.pk]]


def test_a_batch_of_no_live_reconfiguration_wakes_nothing(node0: Node, django_capture_on_commit_callbacks: Any) -> None:
    # given: one reconfiguration over already, and a key that names none
    over = live_reconfiguration(node0)
    MigReconfiguration.objects.filter(pk=over.pk).update(status=MigReconfiguration.Status.DONE)
    # when / then
    assert report(node0, f"reconfiguration:{over.pk}:rollback", [_ok(gi_id=1)], django_capture_on_commit_callbacks) == [
        []
    ]
    assert report(node0, "manual:7", [_ok(gi_id=1)], django_capture_on_commit_callbacks) == [[]]
