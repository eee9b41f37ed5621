"""Static MIG, agent mode: carrying out a MigReconfiguration, one step per run (issue 12).

    PENDING --queue the plan--> APPLYING --batch done--> RESTARTING --pool republished--> DONE
                                  | batch failed: retry what was not done, once
                                  | failed again (or timed out): ROLLING_BACK (destroy the creates made)
                                  +--> RESTARTING --> FAILED (the layout is valid: every step was)

Each run reads where the reconfiguration is, does at most one thing, and says when to look again; the Celery
task (tasks.advance_reconfiguration_task) re-schedules itself until the reconfiguration is over. Every step is
idempotent (batches are keyed by reconfiguration and attempt, state moves are guarded by the expected status),
so a worker killed anywhere converges when the task runs again. Each wait is bounded by
FATIA_RECONFIGURATION_STEP_TIMEOUT_S.

The applier is the pool mode's: `static-agent` queues node agent commands (allocations/nodeagent/commands.py),
`static-manager` has NVIDIA's MIG manager apply the node's layout in counts (allocations/cluster/
manager_applier.py; the slots are the driver's choice, so the republish wait compares counts in that mode).
After the applier, the DRA kubelet plugin on the node is restarted (kube.restart_dra_plugin) and the run waits
until the node's `gpu.nvidia.com` pool has a higher generation whose GPU holds the planned layout (and the MIG
device UUIDs the agent reported); then the request that asked for it is provisioned again.
"""

from __future__ import annotations

import enum
import importlib
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from django.conf import settings
from django.utils import timezone

from allocations.cluster import kube
from allocations.cluster.published import DriverPools, Published, PublishedGpu, summarize
from allocations.mig.reconfig import Operation
from allocations.models import MigReconfiguration, NodePool
from allocations.services import reconfiguration as services
from allocations.services.reconfiguration import operations_of

Status = MigReconfiguration.Status


@dataclass(frozen=True, slots=True)
class AppliedOperation:
    """One operation of a batch as the applier reports it; `mig_uuid` of a create that is done."""

    action: str
    profile: str
    start: int
    status: str  # pending, running, done, failed, cancelled
    mig_uuid: str = ""


@dataclass(frozen=True, slots=True)
class Batch:
    status: str  # pending, running, done, failed
    operations: tuple[AppliedOperation, ...] = ()
    error: str = ""


class Applier(Protocol):
    """What changes a GPU's MIG layout: a batch of operations, run in order, stopped by the first failure."""

    def queue(self, *, node_id: int, gpu_index: int, operations: Sequence[Operation], batch_key: str) -> None: ...

    def state(self, *, batch_key: str) -> Batch: ...

    def cancel(self, *, batch_key: str) -> None: ...


class AgentCommandApplier:
    """Node agent commands (the contract of allocations/nodeagent/commands.py: queue_agent_commands, batch_state,
    cancel_agent_batch). Looked up at run time: the module belongs to the `agentcmd` package."""

    def _commands(self) -> Any:
        return importlib.import_module("allocations.nodeagent.commands")

    def queue(self, *, node_id: int, gpu_index: int, operations: Sequence[Operation], batch_key: str) -> None:
        self._commands().queue_agent_commands(
            node_id=node_id, gpu_index=gpu_index, operations=list(operations), batch_key=batch_key
        )

    def state(self, *, batch_key: str) -> Batch:
        found = self._commands().batch_state(batch_key=batch_key)
        return Batch(
            status=str(found.status),
            operations=tuple(
                AppliedOperation(
                    action=str(c.action),
                    profile=str(c.profile),
                    start=int(c.start),
                    status=str(c.status),
                    mig_uuid=str((c.result or {}).get("mig_uuid") or ""),
                )
                for c in found.commands
            ),
            error=str(found.error or ""),
        )

    def cancel(self, *, batch_key: str) -> None:
        self._commands().cancel_agent_batch(batch_key=batch_key)


class NoApplier:
    """A pool mode whose applier this deployment lacks: every batch fails at once, with the reason."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def queue(self, *, node_id: int, gpu_index: int, operations: Sequence[Operation], batch_key: str) -> None:
        return None

    def state(self, *, batch_key: str) -> Batch:
        return Batch(status="failed", error=self.reason)

    def cancel(self, *, batch_key: str) -> None:
        return None


def applier_for(pool: NodePool) -> Applier:
    if pool.mig_mode == NodePool.MigMode.STATIC_AGENT:
        if importlib.util.find_spec("allocations.nodeagent.commands") is None:
            return NoApplier("The node agent's command queue (allocations/nodeagent/commands.py) is not installed.")
        return AgentCommandApplier()
    if pool.mig_mode == NodePool.MigMode.STATIC_MANAGER:
        # Imported here: the manager applier builds on this module's Batch.
        from allocations.cluster.manager_applier import ManagerApplier

        return ManagerApplier()
    return NoApplier(f"No applier for MIG mode {pool.mig_mode} in this deployment.")


class Next(enum.Enum):
    WAIT = "wait"  # look again in FATIA_RECONFIGURATION_POLL_S
    AGAIN = "again"  # a step was taken: look again at once
    OVER = "over"  # DONE or FAILED


@dataclass
class _Attempt:
    """The operations of the plan not done yet, and the creates done so far (to roll back)."""

    remaining: list[Operation] = field(default_factory=list)
    created: list[Operation] = field(default_factory=list)
    mig_uuids: list[str] = field(default_factory=list)


def _progress(plan: list[Operation], batches: Sequence[Batch]) -> _Attempt:
    done = [op for b in batches for op in b.operations if op.status == "done"]
    out = _Attempt()
    left = list(done)
    for op in plan:
        match = next((d for d in left if (d.action, d.profile, d.start) == (op.action, op.profile, op.start)), None)
        if match is None:
            out.remaining.append(op)
            continue
        left.remove(match)
        if op.action == "create":
            out.created.append(op)
            if match.mig_uuid:
                out.mig_uuids.append(match.mig_uuid)
    return out


def _timed_out(reconfiguration: MigReconfiguration, limit_s: int | None = None) -> bool:
    started = reconfiguration.step_started_at or reconfiguration.created_at
    limit = settings.FATIA_RECONFIGURATION_STEP_TIMEOUT_S if limit_s is None else limit_s
    return timezone.now() - started > timedelta(seconds=limit)


def _apply_limit_s(pool: NodePool) -> tuple[int, str]:
    """How long an apply step may take, and who was waited for. The MIG manager's own bound (room for a node
    reboot) applies in its mode; its status turns into `failed` when that runs out."""
    if pool.mig_mode == NodePool.MigMode.STATIC_MANAGER:
        return max(settings.FATIA_RECONFIGURATION_STEP_TIMEOUT_S, settings.FATIA_MIG_MANAGER_TIMEOUT_S), "MIG manager"
    return settings.FATIA_RECONFIGURATION_STEP_TIMEOUT_S, "node agent"


def _key(reconfiguration: MigReconfiguration, step: str) -> str:
    return f"reconfiguration:{reconfiguration.pk}:{step}"


def published_pool(node_name: str) -> Published | None:
    """The node's complete `gpu.nvidia.com` pool as the API server has it now (None: not complete)."""
    pools = DriverPools()
    for info in kube.list_node_slices(node_name):
        pools.put(summarize(info))
    return pools.published(node_name)


def _published_gpu(published: Published | None, minor: int) -> PublishedGpu | None:
    if published is None:
        return None
    return next((g for g in published.gpus if g.minor == minor), None)


def advance_reconfiguration(*, reconfiguration_id: int, applier: Applier | None = None) -> Next:
    """Take the next step of a reconfiguration (see the module docstring). Raises KubeUnavailable (retry); a
    KubeRejected (the portal may not list or delete the plugin's pods, say) ends it FAILED with the message."""
    try:
        return _advance(reconfiguration_id=reconfiguration_id, applier=applier)
    except kube.KubeRejected as exc:
        services.finish_reconfiguration(
            reconfiguration_id=reconfiguration_id,
            instances=None,
            error=f"The cluster refused a step of the MIG layout change: {exc.message}",
        )
        return Next.OVER


def _advance(*, reconfiguration_id: int, applier: Applier | None) -> Next:
    reconfiguration = MigReconfiguration.objects.select_related("gpu__node__pool").get(pk=reconfiguration_id)
    if reconfiguration.status not in MigReconfiguration.LIVE:
        return Next.OVER
    gpu = reconfiguration.gpu
    node = gpu.node
    pool = node.pool
    if pool is None:
        services.finish_reconfiguration(
            reconfiguration_id=reconfiguration.pk, instances=None, error=f"{node.name} left its pool."
        )
        return Next.OVER
    applier = applier or applier_for(pool)
    plan = operations_of(reconfiguration.plan)
    status = reconfiguration.status

    if status == Status.PENDING:
        step = "apply-1"
        applier.queue(node_id=node.pk, gpu_index=gpu.index, operations=plan, batch_key=_key(reconfiguration, step))
        services.move_reconfiguration(
            reconfiguration_id=reconfiguration.pk, expected=status, status=Status.APPLYING, step=step
        )
        return Next.WAIT

    if status == Status.RESTARTING:
        return _await_republish(reconfiguration, plan, applier)

    batch = applier.state(batch_key=_key(reconfiguration, reconfiguration.step))
    if batch.status in ("pending", "running"):
        limit_s, who = _apply_limit_s(pool)
        if not _timed_out(reconfiguration, limit_s):
            return Next.WAIT
        applier.cancel(batch_key=_key(reconfiguration, reconfiguration.step))
        error = f"The {who} did not finish within {limit_s} s."
        batch = Batch(status="failed", operations=batch.operations, error=error)
    if status == Status.ROLLING_BACK:
        # Done or not, the layout is valid (every step was); the plugin publishes what is there.
        error = reconfiguration.error + ("" if batch.status == "done" else f" Roll-back: {batch.error}")
        return _restart(reconfiguration, status, error=error)

    steps = [s for s in ("apply-1", "apply-2") if s <= reconfiguration.step]
    batches = [applier.state(batch_key=_key(reconfiguration, s)) for s in steps[:-1]] + [batch]
    progress = _progress(plan, batches)
    if batch.status == "done" and not progress.remaining:
        return _restart(reconfiguration, status)
    if batch.status == "done":
        batch = Batch(status="failed", operations=batch.operations, error="The agent skipped operations.")
    if reconfiguration.attempts == 0:
        step = "apply-2"
        applier.queue(
            node_id=node.pk, gpu_index=gpu.index, operations=progress.remaining, batch_key=_key(reconfiguration, step)
        )
        services.move_reconfiguration(
            reconfiguration_id=reconfiguration.pk,
            expected=status,
            status=Status.APPLYING,
            step=step,
            attempts=1,
            error=batch.error,
        )
        return Next.WAIT
    undo = [Operation("destroy", op.profile, op.start) for op in reversed(progress.created)]
    error = f"Applying the plan failed twice: {batch.error or 'no reason given'}."
    if not undo:
        return _restart(reconfiguration, status, error=error)
    applier.queue(node_id=node.pk, gpu_index=gpu.index, operations=undo, batch_key=_key(reconfiguration, "rollback"))
    services.move_reconfiguration(
        reconfiguration_id=reconfiguration.pk,
        expected=status,
        status=Status.ROLLING_BACK,
        step="rollback",
        attempts=2,
        error=error,
    )
    return Next.WAIT


def _restart(reconfiguration: MigReconfiguration, expected: str, *, error: str = "") -> Next:
    """Restart the node's DRA plugin, remembering the pool generation it replaces."""
    published = published_pool(reconfiguration.gpu.node.name)
    generation = published.generation if published is not None else 0
    kube.restart_dra_plugin(reconfiguration.gpu.node.name)
    services.move_reconfiguration(
        reconfiguration_id=reconfiguration.pk,
        expected=expected,
        status=Status.RESTARTING,
        step="restart",
        pool_generation=generation,
        error=error or None,
    )
    return Next.WAIT


def _await_republish(reconfiguration: MigReconfiguration, plan: list[Operation], applier: Applier) -> Next:
    gpu = reconfiguration.gpu
    published = published_pool(gpu.node.name)
    found = _published_gpu(published, gpu.index)
    newer = published is not None and published.generation > (reconfiguration.pool_generation or 0)
    if newer and found is not None:
        layout = sorted(((i.profile, i.start) for i in found.instances), key=lambda x: x[1])
        expected = [(str(p), int(s)) for p, s in reconfiguration.targets]
        if gpu.node.pool is not None and gpu.node.pool.mig_mode == NodePool.MigMode.STATIC_MANAGER:
            # mig-parted chooses the slots: the planned counts of each profile are what to wait for.
            layout = sorted((p, 0) for p, _ in layout)
            expected = sorted((p, 0) for p, _ in expected)
        uuids = {i.uuid for i in found.instances}
        batches = [applier.state(batch_key=_key(reconfiguration, s)) for s in ("apply-1", "apply-2")]
        wanted = set(_progress(plan, batches).mig_uuids)
        # After a failure the layout is whatever the agent left (valid, but not the plan's): any newer pool does.
        if reconfiguration.error or (layout == expected and wanted <= uuids):
            services.finish_reconfiguration(
                reconfiguration_id=reconfiguration.pk, instances=[i.as_json() for i in found.instances]
            )
            return Next.OVER
    if not _timed_out(reconfiguration):
        return Next.WAIT
    services.finish_reconfiguration(
        reconfiguration_id=reconfiguration.pk,
        instances=None,
        error=(
            f"The DRA plugin on {gpu.node.name} did not publish the new layout within "
            f"{settings.FATIA_RECONFIGURATION_STEP_TIMEOUT_S} s (is it running, with DynamicMIG off?)."
        ),
    )
    return Next.OVER


def allocation_waiting(*, reconfiguration_id: int) -> int | None:
    """The request that waits for this (finished) reconfiguration, to provision again: on DONE it takes the new
    instance; on FAILED provisioning plans again (the GPU's layout is what it is now)."""
    found = MigReconfiguration.objects.filter(pk=reconfiguration_id).values_list("allocation_id", flat=True).first()
    return int(found) if found is not None else None
