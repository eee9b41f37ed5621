"""The queue of MIG operations for node agents (static-MIG agent mode): every state change of an AgentCommand.

The portal's orchestration queues a batch of operations for one GPU (``queue_agent_commands``), follows it
(``batch_state``) and may cancel what has not been handed out (``cancel_agent_batch``). The node's agent lists its
commands (``claim_agent_commands``: pending ones become running) and reports each outcome
(``record_agent_command_result``). A failure stops its batch: the later commands become cancelled. The agent runs
a batch in sequence order and reports results in that order.

Locks: queueing locks the node row (sequence numbers count up per node); everything else locks the batch's command
rows in pk order. Callers that already hold allocation, pool or node locks (the reconfiguration) keep the fleet's
order: node after pool, commands last.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from allocations.mig.reconfig import Operation
from allocations.models import MigReconfiguration, Node
from allocations.nodeagent import ingest_queue
from allocations.nodeagent.models import AgentCommand, AgentCredential
from allocations.nodeagent.services import WrongNode
from allocations.services.outbox import enqueue_task
from tenants.errors import DomainError, IdempotencyConflict, InvalidInput
from tenants.services import record_audit_event

Status = AgentCommand.Status
_OPEN = (Status.PENDING, Status.RUNNING)


class ResultConflict(DomainError):
    """A result for a command that was cancelled, or that already has a different outcome."""

    status = 409
    code = "invalid_transition"


@dataclass(frozen=True, slots=True)
class BatchState:
    """Where a batch stands. ``status``: "pending" (nothing handed out or finished yet), "running", "done" (every
    command done, or the batch is empty) or "failed" (a command failed, or the batch was cancelled before it
    finished); ``error`` is the first failure's message ("cancelled" for a cancelled batch)."""

    status: str
    commands: list[AgentCommand] = field(default_factory=list)
    error: str = ""


def _steps(operations: Sequence[Operation]) -> list[tuple[str, str, int]]:
    return [(op.action, op.profile, int(op.start)) for op in operations]


def _check(gpu_index: int, operations: Sequence[Operation], batch_key: str) -> None:
    errors: dict[str, list[str]] = {}
    if not batch_key or len(batch_key) > 64:
        errors["batch_key"] = ["Give a reference of 1 to 64 characters."]
    if not 0 <= gpu_index <= 255:
        errors["gpu_index"] = ["Must be between 0 and 255."]
    for op in operations:
        if op.action not in AgentCommand.Action.values:
            errors["operations"] = [f"Unknown action {op.action!r}: create or destroy."]
        elif not op.profile or len(op.profile) > 32 or not 0 <= op.start <= 64:
            errors["operations"] = [f"Invalid operation {op.action} {op.profile!r} at {op.start}."]
    if errors:
        raise InvalidInput(errors)


@transaction.atomic
def queue_agent_commands(
    *, node_id: int, gpu_index: int, operations: Sequence[Operation], batch_key: str
) -> list[AgentCommand]:
    """Queue ``operations`` (in order) for one GPU of one node as the batch ``batch_key``; returns its commands.

    Idempotent per batch_key: a second call with the same node, GPU and operations returns the existing rows;
    other ones raise IdempotencyConflict (a new plan needs a new key). No operations: nothing is queued (the
    batch is done). Locks the node row (sequence numbers). Audited as queue_agent_commands."""
    _check(gpu_index, operations, batch_key)
    node = Node.objects.select_for_update(no_key=True, of=("self",)).get(pk=node_id)
    existing = list(AgentCommand.objects.filter(batch_key=batch_key).order_by("sequence"))
    if existing:
        same = all(c.node_id == node.pk and c.gpu_index == gpu_index for c in existing) and [
            (c.action, c.profile, c.start) for c in existing
        ] == _steps(operations)
        if not same:
            raise IdempotencyConflict(
                f"Batch {batch_key} was queued with other operations; use a new batch key.", field="batch_key"
            )
        return existing
    if not operations:
        return []
    last = AgentCommand.objects.filter(node=node).aggregate(last=Max("sequence"))["last"] or 0
    commands = AgentCommand.objects.bulk_create(
        AgentCommand(
            node=node,
            gpu_index=gpu_index,
            sequence=last + n,
            action=action,
            profile=profile,
            start=start,
            batch_key=batch_key,
        )
        for n, (action, profile, start) in enumerate(_steps(operations), start=1)
    )
    record_audit_event(
        actor=None,
        actor_name="portal",
        verb="queue_agent_commands",
        obj=node,
        after={"batch_key": batch_key, "gpu_index": gpu_index, "operations": [list(s) for s in _steps(operations)]},
    )
    # The node's next telemetry answer tells its agent to list them now (with the queue; otherwise it counts them).
    transaction.on_commit(partial(ingest_queue.note_commands_waiting, node.pk))
    return commands


def batch_state(*, batch_key: str) -> BatchState:
    """The batch's commands in sequence order and its overall status (see BatchState). A read: no locks."""
    commands = list(AgentCommand.objects.filter(batch_key=batch_key).order_by("sequence"))
    statuses = {c.status for c in commands}
    failed = next((c for c in commands if c.status == Status.FAILED), None)
    if failed is not None:
        return BatchState("failed", commands, failed.error or failed.code or "failed")
    if Status.CANCELLED in statuses:
        return BatchState("failed", commands, "cancelled")
    if statuses <= {Status.DONE}:
        return BatchState("done", commands)
    if statuses == {Status.PENDING}:
        return BatchState("pending", commands)
    return BatchState("running", commands)


def _lock_batch(batch_key: str) -> list[AgentCommand]:
    return list(
        AgentCommand.objects.select_for_update(no_key=True, of=("self",)).filter(batch_key=batch_key).order_by("pk")
    )


@transaction.atomic
def cancel_agent_batch(*, batch_key: str) -> int:
    """Cancel the batch's pending commands (those not yet handed to the agent); returns how many. Commands the
    agent already holds run to their end and report. Locks the batch's rows. Audited as cancel_agent_batch."""
    commands = [c for c in _lock_batch(batch_key) if c.status == Status.PENDING]
    if not commands:
        return 0
    now = timezone.now()
    AgentCommand.objects.filter(pk__in=[c.pk for c in commands]).update(status=Status.CANCELLED, finished_at=now)
    record_audit_event(
        actor=None,
        actor_name="portal",
        verb="cancel_agent_batch",
        obj=commands[0].node,
        after={"batch_key": batch_key, "cancelled": [c.pk for c in commands]},
    )
    return len(commands)


@transaction.atomic
def claim_agent_commands(*, credential: AgentCredential, node_name: str) -> list[AgentCommand]:
    """The node's commands awaiting a result, in sequence order; pending ones become running (handed out), so a
    cancel no longer takes them back. Running ones are listed again: an agent that restarted gets them anew (it
    recognises those it already ran). Raises WrongNode (403) for another node's name. Locks the listed rows."""
    node = credential.node
    if node.name != node_name:
        raise WrongNode(f"This credential reports for node {node.name}, not {node_name}.", field="node")
    ingest_queue.clear_commands_waiting(node.pk)
    commands = list(
        AgentCommand.objects.select_for_update(no_key=True, of=("self",))
        .filter(node=node, status__in=_OPEN)
        .order_by("sequence")
    )
    fresh = [c.pk for c in commands if c.status == Status.PENDING]
    if fresh:
        now = timezone.now()
        AgentCommand.objects.filter(pk__in=fresh).update(status=Status.RUNNING, started_at=now)
        for c in commands:
            if c.pk in fresh:
                c.status, c.started_at = Status.RUNNING, now
    return commands


def _outcome(payload: dict[str, Any]) -> tuple[str, dict[str, Any], str, str]:
    if payload["ok"]:
        result = {"gi_id": payload.get("gi_id"), "ci_id": payload.get("ci_id"), "mig_uuid": payload.get("mig_uuid", "")}
        return Status.DONE, result, "", ""
    return Status.FAILED, {}, payload.get("error", ""), payload.get("code", "")


@transaction.atomic
def record_agent_command_result(
    *, credential: AgentCredential, command_id: int, payload: dict[str, Any], now: datetime | None = None
) -> AgentCommand:
    """Record what the agent did with one command (payload validated by the API's serializer: node, ok, gi_id,
    ci_id, mig_uuid, error, code).

    Pending or running -> done or failed; a failure cancels the batch's later open commands. Idempotent: the same
    outcome again changes nothing; a different one, or a result for a cancelled command, raises ResultConflict
    (409). Raises WrongNode (403) when the payload names another node, AgentCommand.DoesNotExist (404) for a
    command that is not this node's. Locks the batch's rows in pk order. Audited as agent_command_done /
    agent_command_failed."""
    now = now or timezone.now()
    node = credential.node
    if node.name != payload["node"]:
        raise WrongNode(f"This credential reports for node {node.name}, not {payload['node']}.", field="node")
    batch_key = AgentCommand.objects.values_list("batch_key", flat=True).get(pk=command_id, node=node)
    batch = _lock_batch(batch_key)
    command = next(c for c in batch if c.pk == command_id)
    status, result, error, code = _outcome(payload)
    if command.status in (Status.DONE, Status.FAILED):
        if (command.status, command.result, command.error, command.code) != (status, result, error, code):
            raise ResultConflict(f"Command {command.pk} already {command.status}; a different result is refused.")
        return command
    if command.status == Status.CANCELLED:
        raise ResultConflict(f"Command {command.pk} was cancelled; it should not have run.")
    before = command.status
    command.status, command.result, command.error, command.code = status, result, error, code
    command.started_at = command.started_at or now
    command.finished_at = now
    command.save(update_fields=["status", "result", "error", "code", "started_at", "finished_at"])
    cancelled = [c.pk for c in batch if c.sequence > command.sequence and c.status in _OPEN]
    if status == Status.FAILED and cancelled:
        AgentCommand.objects.filter(pk__in=cancelled).update(status=Status.CANCELLED, finished_at=now)
    if status == Status.FAILED or not any(c.status in _OPEN for c in batch):
        _wake_reconfiguration(batch_key)
    record_audit_event(
        actor=None,
        actor_name=f"agent:{node.name}",
        verb=f"agent_command_{status}",
        obj=command,
        before={"status": before},
        after={
            "status": status,
            "batch_key": command.batch_key,
            "operation": [command.action, command.profile, command.start],
            **({"result": result} if result else {"error": error, "code": code, "cancelled": cancelled}),
        },
    )
    return command


def _wake_reconfiguration(batch_key: str) -> None:
    """The batch is over: a live reconfiguration that queued it (key ``reconfiguration:<id>:<step>``) takes its
    next step at once rather than at its next poll. The polling chain goes on as well; steps are idempotent and
    guarded by the expected status, so a second run of one finds nothing to do."""
    prefix, _, rest = batch_key.partition(":")
    ident = rest.split(":", 1)[0]
    if prefix != "reconfiguration" or not ident.isdigit():
        return
    if not MigReconfiguration.objects.filter(pk=int(ident), status__in=MigReconfiguration.LIVE).exists():
        return
    enqueue_task("allocations.tasks.advance_reconfiguration_task", int(ident))
